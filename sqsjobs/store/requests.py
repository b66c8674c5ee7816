"""Sans-I/O DynamoDB requests: one conditional write per transition, and how to read each answer.

Lease timeline of one job (``now`` is the caller's clock, ``lease`` is ``Settings.lease_s``)::

    claim (token t, message m) ──────── lease_expires ───────────────────────────▶ time
      │  the owner may heartbeat,            │ rescue allowed: a new claim takes
      │  complete, retry, fail or release;   │ a new token; the old owner's writes
      │  a refused claim from message m      │ fail: LeaseLost
      │  (the owner's own, back after its    │
      │  worker died) waits for the lease;   │
      │  a copy from another message is      │
      │  dropped: m covers a crash           │

Every write after a claim is conditional on ``claim_token = :token``: a random value per claim
— the fence. A write retried by botocore after a lost answer is recognised as its own by a random
nonce it also writes (``wid``) — never by a time, owner or epoch, which a second claim in the same
millisecond by the same worker would repeat (DESIGN §3.2). Conflicts are read back with
``ReturnValuesOnConditionCheckFailure=ALL_OLD``, never with a separate read, so the happy path
costs no read units.

Item layout: one item per job keyed by ``id``, under 1 KB on the happy path (one write unit per
write): the SQS message carries the payload, the record its hash and size. Only records that need
attention (held, pending, dead) carry ``attn``/``due``, the keys of the one sparse index
(``store/schema.py``); no write of the happy path touches an index. ``audit`` is a capped list of
operator actions (retry, replay), read through ``Job.extra``.

Where each write is built: the producer's record and the message it sends are in
``store/enqueue.py``; the worker's transitions are below; the operator's
(cancel, request_cancel, replay and its audit entry) are in ``store/operator.py``, and the
sweeper's dispatch mark in ``store/schema.py``. All are re-exported here, the one entry point.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqsjobs.errors import LeaseLost, StoreError
from sqsjobs.job import AttemptOutcome, AttemptRecord, FailureRecord, Job, JobStatus
from sqsjobs.store.codec import (
    CCF,
    WRITE_ID,
    Item,
    av_error,
    av_json,
    av_n,
    av_s,
    idempotent_job_id,
    is_conflict,
    job_from_item,
    nonce,
    num_attr,
    old_item,
    payload_hash,
    shows_own_write,
    str_attr,
)
from sqsjobs.store.enqueue import (
    NewJob,
    creates_from,
    envelope_of,
    interpret_put_conflict,
    kept_payload,
    put_job,
)
from sqsjobs.store.operator import (
    AUDIT_CAP,
    audit_av,
    audit_entries,
    cancel,
    interpret_cancel_refusal,
    interpret_replay_refusal,
    keep_payload,
    not_cancellable,
    replay,
    request_cancel,
    updated_raw,
)
from sqsjobs.store.schema import (
    ATTENTION_INDEX,
    ATTENTION_SHARDS,
    DEAD,
    HELD,
    LEGACY_INDEXES,
    PENDING,
    TTL_ATTRIBUTE,
    DueRecord,
    attention_key,
    attention_partitions,
    dispatch_landed,
    due_records,
    mark_dispatched,
    query_due,
    table_definition,
)

# Callers use ``requests`` as the one entry point of the store's sans-I/O layer.
__all__ = [
    "ATTENTION_INDEX",
    "ATTENTION_SHARDS",
    "AUDIT_CAP",
    "CCF",
    "DEAD",
    "HELD",
    "LEGACY_INDEXES",
    "PENDING",
    "TTL_ATTRIBUTE",
    "DueRecord",
    "FailureRecord",
    "Item",
    "NewJob",
    "attention_key",
    "attention_partitions",
    "audit_av",
    "audit_entries",
    "cancel",
    "dispatch_landed",
    "due_records",
    "envelope_of",
    "idempotent_job_id",
    "interpret_cancel_refusal",
    "interpret_put_conflict",
    "interpret_replay_refusal",
    "is_conflict",
    "job_from_item",
    "keep_payload",
    "mark_dispatched",
    "nonce",
    "not_cancellable",
    "payload_hash",
    "put_job",
    "query_due",
    "replay",
    "request_cancel",
    "table_definition",
    "updated_raw",
]

if TYPE_CHECKING:
    from collections.abc import Mapping

    from sqsjobs.envelope import Envelope

#: Attempts kept in the record; older ones are dropped so the item stays small.
HISTORY_CAP = 10
#: A message may arrive this much before ``run_at`` (clock skew between hosts) and still claim.
CLOCK_SKEW_S = 1.0


# ── claim ────────────────────────────────────────────────────────────────────────────────────
def claim(
    table: str,
    envelope: Envelope,
    *,
    owner: str,
    token: str,
    message_id: str | None,
    now: float,
    lease_s: float,
    max_attempts: int,
) -> dict[str, Any]:
    """UpdateItem that makes ``owner`` the runner: a due runnable job, or a running one whose lease expired.

    Args:
        table: the job table.
        envelope: the message: the job id, and (version 2) the fields to create the record from if
            there is none yet — the producer may have died between its send and its write, or its
            write may simply not have landed yet. Its payload hash must be the record's.
        owner: the worker id, for operators (``lease_owner``).
        token: a fresh ``nonce()``: the fence of every later write of this run.
        message_id: the SQS message that brought the job (see ``ClaimRefusal.HELD_ELSEWHERE``).
        now: the worker's clock.
        lease_s: how long the claim holds without renewal.
        max_attempts: the type's policy, from the worker's handler: the bound is the handler's,
            never the producer's (a producer without the handler code cannot know it).

    Attempt and epoch go up by one; ``ALL_NEW`` returns the record, so the worker needs no read.
    The claim removes any attention entry (a replayed or swept job is taken).
    """
    expires = now + lease_s
    names = {"#status": "status"}
    values: dict[str, Any] = {
        ":queued": av_s(JobStatus.QUEUED),
        ":retry": av_s(JobStatus.RETRY_SCHEDULED),
        ":running": av_s(JobStatus.RUNNING),
        ":due_by": av_n(now + CLOCK_SKEW_S),
        ":now": av_n(now),
        ":zero": av_n(0),
        ":one": av_n(1),
        ":owner": av_s(owner),
        ":token": av_s(token),
        ":expires": av_n(expires),
        ":max": av_n(max_attempts),
    }
    sets = [
        "#status = :running", "attempt = if_not_exists(attempt, :zero) + :one", "lease_owner = :owner",
        "claim_token = :token", "lease_epoch = if_not_exists(lease_epoch, :zero) + :one",
        "lease_expires = :expires", "started_at = :now", "updated_at = :now", "max_attempts = :max",
    ]  # fmt: skip
    if message_id:
        values[":msg"] = av_s(message_id)
        sets.append("claim_msg = :msg")
    runnable = (
        "attempt < :max AND ((#status IN (:queued, :retry) AND run_at <= :due_by) "
        "OR (#status = :running AND lease_expires < :now))"
    )
    condition = runnable
    if envelope.has_payload:
        sets += creates_from(envelope, names, values)
        condition = f"attribute_not_exists(id) OR (#payload_hash = :c_payload_hash AND {runnable})"
    return {
        "TableName": table,
        "Key": {"id": av_s(envelope.job_id)},
        "ConditionExpression": condition,
        "UpdateExpression": f"SET {', '.join(sets)} REMOVE attn, due",
        "ExpressionAttributeNames": names,
        "ExpressionAttributeValues": values,
        "ReturnValues": "ALL_NEW",
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }


class ClaimRefusal(enum.StrEnum):
    """Why a claim did not take the job; the record it found decides what the message is worth."""

    #: No record: the message outlived its job (or was never backed by one).
    MISSING = "missing"
    #: The job is succeeded, dead or cancelled.
    FINISHED = "finished"
    #: Queued or retry_scheduled, but ``run_at`` is still ahead (beyond the clock-skew allowance).
    NOT_DUE = "not_due"
    #: Running under a live lease: another worker (or this one, for a duplicate message) owns it.
    HELD_ELSEWHERE = "held_elsewhere"
    #: Every attempt was used by runs that never finished (their workers died).
    EXHAUSTED = "exhausted"
    #: The message's payload is not the record's: a conflicting enqueue with the same key sent it
    #: before its write was refused, or a retry ``--payload`` replaced it since. It names no job to run.
    CONFLICT = "conflict"


@dataclass(frozen=True)
class ClaimRefused:
    """Why a claim did not take the job, and what the message should do."""

    reason: ClaimRefusal
    job: Job | None = None


def interpret_claim_refusal(
    error: StoreError, now: float, max_attempts: int, payload_hash: str | None = None
) -> ClaimRefused:
    """Read the record returned with a refused claim.

    Args:
        error: the refusal.
        now: the claim's clock.
        max_attempts: the bound the claim used.
        payload_hash: the message's payload hash, if it carried one.
    """
    if not is_conflict(error):
        raise error
    old = old_item(error)
    if old is None:
        return ClaimRefused(ClaimRefusal.MISSING)
    job = job_from_item(old)
    if payload_hash is not None and job.payload_hash not in (None, payload_hash):
        return ClaimRefused(ClaimRefusal.CONFLICT, job)
    if job.status.terminal:
        return ClaimRefused(ClaimRefusal.FINISHED, job)
    if job.attempt >= max_attempts:
        lease_live = job.status is JobStatus.RUNNING and (num_attr(old, "lease_expires") or 0) >= now
        return ClaimRefused(ClaimRefusal.HELD_ELSEWHERE if lease_live else ClaimRefusal.EXHAUSTED, job)
    if job.status is JobStatus.RUNNING:
        return ClaimRefused(ClaimRefusal.HELD_ELSEWHERE, job)
    return ClaimRefused(ClaimRefusal.NOT_DUE, job)


def own_claim(params: Mapping[str, Any], error: StoreError) -> Job | None:
    """The job, when a refused claim was refused only because this very claim already landed.

    botocore retries a request whose answer was lost (connection reset, read timeout) with the
    same parameters. If the first try took the job, the retry's condition fails against our own
    lease. ``ALL_OLD`` then shows this claim's token, which no other claim has — not even a second
    claim by the same worker in the same millisecond for a copy of the message.
    """
    if not is_conflict(error):
        return None
    old = old_item(error)
    token = params["ExpressionAttributeValues"][":token"]
    if old is None or old.get("claim_token") != token or old.get("status") != av_s(JobStatus.RUNNING):
        return None
    return job_from_item(old)


def already_written(params: Mapping[str, Any], error: StoreError) -> bool:
    """True when a fenced write was refused only because an earlier try of the same request landed."""
    return shows_own_write(params, error)


# ── owner-fenced transitions ─────────────────────────────────────────────────────────────────
def _fenced(
    table: str, job: Job, *, owner: str, set_expr: str, values: dict[str, Any], remove: str = ""
) -> dict[str, Any]:
    if job.claim_token is None:
        raise ValueError(f"job {job.id} was not claimed by this run: no claim token to fence on")
    return {
        "TableName": table,
        "Key": {"id": av_s(job.id)},
        "ConditionExpression": "#status = :running AND claim_token = :token",
        "UpdateExpression": f"SET {set_expr}, {WRITE_ID} = :wid" + (f" REMOVE {remove}" if remove else ""),
        "ExpressionAttributeNames": {"#status": "status"},
        "ExpressionAttributeValues": {
            ":running": av_s(JobStatus.RUNNING),
            ":token": av_s(job.claim_token),
            ":wid": av_s(nonce()),
            **values,
        },
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }


def _history(
    job: Job, now: float, outcome: AttemptOutcome, owner: str, error: FailureRecord | None
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "attempt": av_n(job.attempt),
        "outcome": av_s(outcome),
        "finished_at": av_n(now),
        "worker": av_s(owner),
    }
    if job.started_at is not None:
        entry["started_at"] = av_n(job.started_at.timestamp())
    if error is not None:
        entry["error"] = av_s(f"{error.error_class}: {error.message}"[:300])
    previous = [_history_av(h) for h in job.history][-(HISTORY_CAP - 1) :]
    return {"L": [*previous, {"M": entry}]}


def _history_av(h: AttemptRecord) -> dict[str, Any]:
    m: dict[str, Any] = {
        "attempt": av_n(h.attempt),
        "outcome": av_s(h.outcome),
        "finished_at": av_n(h.finished_at.timestamp()),
        "worker": av_s(h.worker),
    }
    if h.started_at is not None:
        m["started_at"] = av_n(h.started_at.timestamp())
    if h.error:
        m["error"] = av_s(h.error)
    return {"M": m}


def _finish(
    table: str,
    job: Job,
    *,
    owner: str,
    now: float,
    status: JobStatus,
    retention_s: float,
    error: FailureRecord | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Running → a final status, fenced: what complete, fail and abort share (TTL set, lease dropped).

    A first attempt that succeeds writes no history entry (the record's own times say it all), so
    the happy path stays within one write unit; any other outcome appends one.
    """
    sets = "#status = :final, finished_at = :now, updated_at = :now"
    values: dict[str, Any] = {
        ":final": av_s(status),
        ":now": av_n(now),
        ":ttl": av_n(int(now + retention_s)),
    }
    if status is not JobStatus.SUCCEEDED or job.attempt > 1 or job.history:
        sets += ", history = :history"
        values[":history"] = _history(job, now, AttemptOutcome(status.value), owner, error)
    names = {"#status": "status"}
    for attr, value in (extra or {}).items():
        sets += f", #{attr} = :{attr}"
        names[f"#{attr}"] = attr
        values[f":{attr}"] = value
    params = _fenced(
        table,
        job,
        owner=owner,
        set_expr=f"{sets}, expires_at = :ttl",
        values=values,
        remove="lease_owner, lease_expires",
    )
    params["ExpressionAttributeNames"] = names
    return params


def complete(
    table: str, job: Job, *, owner: str, now: float, result: Any, retention_s: float,
    result_ref: str | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Running → succeeded, fenced (a ``None`` result is not written; one in S3 is by its reference)."""
    extra = {} if result is None else {"result": av_json(result)}
    if result_ref is not None:
        extra["result_ref"] = av_s(result_ref)
    return _finish(
        table, job, owner=owner, now=now, status=JobStatus.SUCCEEDED, retention_s=retention_s, extra=extra
    )


def schedule_retry(
    table: str,
    job: Job,
    *,
    owner: str,
    now: float,
    run_at: float,
    error: FailureRecord,
    held: bool,
    payload: Any = None,
) -> dict[str, Any]:
    """Running → retry_scheduled, fenced.

    ``held`` when the message cannot carry the delay (beyond the 12 h visibility cap): the record
    then keeps ``payload`` and an attention entry, and the sweeper sends it when due.
    """
    sets = "#status = :retry, run_at = :run_at, updated_at = :now, #error = :error, history = :history"
    values: dict[str, Any] = {
        ":retry": av_s(JobStatus.RETRY_SCHEDULED),
        ":run_at": av_n(run_at),
        ":now": av_n(now),
        ":error": av_error(error),
        ":history": _history(job, now, AttemptOutcome.RETRY, owner, error),
    }
    if held:
        sets += ", attn = :attn, due = :run_at"
        values[":attn"] = av_s(attention_key(HELD, job.id))
        if job.payload_ref is None:
            sets += ", payload = :payload"
            values[":payload"] = av_json(payload)
    return _fenced(
        table, job, owner=owner, set_expr=sets, values=values, remove="lease_owner, lease_expires"
    ) | {"ExpressionAttributeNames": {"#status": "status", "#error": "error"}}


def fail(
    table: str,
    job: Job,
    *,
    owner: str,
    now: float,
    error: FailureRecord,
    reason: str,
    retention_s: float,
    payload: Any = None,
) -> dict[str, Any]:
    """Running → dead, fenced; the record keeps the payload (replayable after the DLQ copy expires)."""
    return _finish(
        table,
        job,
        owner=owner,
        now=now,
        status=JobStatus.DEAD,
        retention_s=retention_s,
        error=error,
        extra={
            "error": av_error(error),
            "reason": av_s(reason),
            **kept_payload(job, payload),
            "attn": av_s(attention_key(DEAD, job.id)),
            "due": av_n(now),
        },
    )


def abort(
    table: str, job: Job, *, owner: str, now: float, reason: str, retention_s: float, payload: Any = None
) -> dict[str, Any]:
    """Running → cancelled, fenced (the handler stopped on a cancel request); keeps the payload."""
    return _finish(
        table,
        job,
        owner=owner,
        now=now,
        status=JobStatus.CANCELLED,
        retention_s=retention_s,
        extra={"reason": av_s(reason), **kept_payload(job, payload)},
    )


def release(table: str, job: Job, *, owner: str, now: float) -> dict[str, Any]:
    """Running → queued on graceful shutdown, fenced; the attempt is given back."""
    return _fenced(
        table,
        job,
        owner=owner,
        set_expr=(
            "#status = :queued, run_at = :now, updated_at = :now, attempt = attempt - :one, history = :history"
        ),
        values={
            ":queued": av_s(JobStatus.QUEUED),
            ":now": av_n(now),
            ":one": av_n(1),
            ":history": _history(job, now, AttemptOutcome.RELEASED, owner, None),
        },
        remove="lease_owner, lease_expires",
    )


def heartbeat(table: str, job: Job, *, owner: str, now: float, lease_s: float) -> dict[str, Any]:
    """Running → running with a later lease expiry, fenced; ``ALL_NEW`` shows a cancel request."""
    params = _fenced(
        table,
        job,
        owner=owner,
        set_expr="lease_expires = :expires, updated_at = :now",
        values={":expires": av_n(now + lease_s), ":now": av_n(now)},
    )
    params["ReturnValues"] = "ALL_NEW"
    return params


def lease_lost(job: Job, error: StoreError) -> LeaseLost:
    """The error for a refused fenced write (re-raises anything that is not a condition failure)."""
    if not is_conflict(error):
        raise error
    old = old_item(error)
    if old is None:
        return LeaseLost(f"job {job.id} no longer exists")
    now_owner = str_attr(old, "lease_owner")
    return LeaseLost(
        f"job {job.id} epoch {job.lease_epoch} lost its lease: now {old['status']['S']}, "
        f"owner {now_owner or '-'}, epoch {num_attr(old, 'lease_epoch')}"
    )


def moved_on_by_owner(job: Job, error: StoreError) -> bool:
    """True when a refused heartbeat met the owner's own later transition (same claim, no longer running).

    The heartbeat loop renews a lease while the execution records the outcome; when the outcome lands
    first the renewal is refused, which is expected, not a lost lease.
    """
    old = old_item(error) if is_conflict(error) else None
    return (
        old is not None
        and job.claim_token is not None
        and old.get("claim_token") == av_s(job.claim_token)
        and old.get("status", {}).get("S") != JobStatus.RUNNING
    )


# ── transitions without an owner ─────────────────────────────────────────────────────────────
def reject(
    table: str, envelope: Envelope, *, now: float, error: FailureRecord, reason: str, retention_s: float
) -> dict[str, Any]:
    """A job that must not run (unknown type, invalid payload, attempts exhausted) → dead, unclaimed.

    Like the claim, it creates the record from a version 2 message if there is none yet, so a
    producer's write that lands later finds the job already dead (and says so) instead of queuing a
    job whose message is gone. The record keeps the payload and a ``dead`` attention entry.
    """
    names = {"#status": "status", "#error": "error"}
    values: dict[str, Any] = {
        ":queued": av_s(JobStatus.QUEUED),
        ":retry": av_s(JobStatus.RETRY_SCHEDULED),
        ":running": av_s(JobStatus.RUNNING),
        ":dead": av_s(JobStatus.DEAD),
        ":now": av_n(now),
        ":error": av_error(error),
        ":reason": av_s(reason),
        ":ttl": av_n(int(now + retention_s)),
        ":attn": av_s(attention_key(DEAD, envelope.job_id)),
        ":zero": av_n(0),
    }
    sets = [
        "#status = :dead", "finished_at = :now", "updated_at = :now", "#error = :error", "reason = :reason",
        "expires_at = :ttl", "attn = :attn", "due = :now", "attempt = if_not_exists(attempt, :zero)",
        "lease_epoch = if_not_exists(lease_epoch, :zero)",
    ]  # fmt: skip
    condition = "#status IN (:queued, :retry) OR (#status = :running AND lease_expires < :now)"
    if envelope.has_payload:
        sets += [*creates_from(envelope, names, values), "payload = :payload"]
        values[":payload"] = av_json(envelope.payload)
        condition = f"attribute_not_exists(id) OR {condition}"
    return {
        "TableName": table,
        "Key": {"id": av_s(envelope.job_id)},
        "ConditionExpression": condition,
        "UpdateExpression": f"SET {', '.join(sets)} REMOVE lease_owner, lease_expires",
        "ExpressionAttributeNames": names,
        "ExpressionAttributeValues": values,
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }


def get(table: str, job_id: str) -> dict[str, Any]:
    """GetItem, strongly consistent (an operator asking right after a write sees it)."""
    return {"TableName": table, "Key": {"id": av_s(job_id)}, "ConsistentRead": True}
