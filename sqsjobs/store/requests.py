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

Item layout: one item per job keyed by ``id``. ``st``/``due`` feed the ``by_status`` index the
sweeper and operators query: ``st`` is the status, or ``held`` for a runnable record whose SQS
message has not been sent yet (far-future jobs, retries beyond the 12 h visibility cap); ``due``
is ``run_at`` for runnable jobs, ``lease_expires`` for running ones and ``finished_at`` for
finished ones. ``by_type``, ``by_queue`` and ``by_tenant`` list jobs newest first for operators.
``audit`` is a capped list of operator actions (retry, replay), read through ``Job.extra``.

Where each write is built: the producer's and the worker's transitions are below; the operator's
(cancel, request_cancel, replay and its audit entry) are in ``store/operator.py``, and the
sweeper's dispatch mark in ``store/schema.py``. All are re-exported here, the one entry point.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqsjobs.errors import IdempotencyConflict, LeaseLost, StoreError
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
from sqsjobs.store.operator import (
    AUDIT_CAP,
    audit_av,
    audit_entries,
    cancel,
    interpret_cancel_refusal,
    interpret_replay_refusal,
    not_cancellable,
    replay,
    request_cancel,
    updated_raw,
)
from sqsjobs.store.schema import (
    HELD,
    QUEUE_INDEX,
    STATUS_INDEX,
    TENANT_INDEX,
    TTL_ATTRIBUTE,
    TYPE_INDEX,
    DueRecord,
    dispatch_landed,
    due_records,
    mark_dispatched,
    query_due,
    table_definition,
)

# Callers use ``requests`` as the one entry point of the store's sans-I/O layer.
__all__ = [
    "AUDIT_CAP",
    "CCF",
    "HELD",
    "QUEUE_INDEX",
    "STATUS_INDEX",
    "TENANT_INDEX",
    "TTL_ATTRIBUTE",
    "TYPE_INDEX",
    "DueRecord",
    "FailureRecord",
    "Item",
    "audit_av",
    "audit_entries",
    "cancel",
    "dispatch_landed",
    "due_records",
    "idempotent_job_id",
    "interpret_cancel_refusal",
    "interpret_replay_refusal",
    "is_conflict",
    "job_from_item",
    "mark_dispatched",
    "nonce",
    "not_cancellable",
    "payload_hash",
    "query_due",
    "replay",
    "request_cancel",
    "table_definition",
    "updated_raw",
]

if TYPE_CHECKING:
    from collections.abc import Mapping

#: Attempts kept in the record; older ones are dropped so the item stays small.
HISTORY_CAP = 10
#: A message may arrive this much before ``run_at`` (clock skew between hosts) and still claim.
CLOCK_SKEW_S = 1.0


# ── enqueue ──────────────────────────────────────────────────────────────────────────────────
@dataclass(frozen=True)
class NewJob:
    """What a producer asks for; ``put_job`` turns it into the first write."""

    id: str
    type: str
    queue: str
    payload: Any
    payload_version: int
    #: None: the producer has no handler for the type; the worker's claim applies the type's policy.
    max_attempts: int | None
    run_at: float
    now: float
    #: True when no SQS message is sent now (run_at beyond the SQS delay cap); the sweeper sends it.
    held: bool = False
    idempotency_key: str | None = None
    tenant: str | None = None
    parent_id: str | None = None
    root_id: str | None = None
    trace: str | None = None

    @property
    def payload_json(self) -> str:
        """The stored payload."""
        return json.dumps(self.payload, separators=(",", ":"), sort_keys=True)

    @property
    def payload_hash(self) -> str:
        """See ``payload_hash``."""
        return payload_hash(self.type, self.payload_version, self.payload)


def put_job(table: str, job: NewJob) -> dict[str, Any]:
    """PutItem that creates the record only if the id is new (the idempotency check)."""
    item: Item = {
        "id": av_s(job.id),
        "type": av_s(job.type),
        "queue": av_s(job.queue),
        "status": av_s(JobStatus.QUEUED),
        "st": av_s(HELD if job.held else JobStatus.QUEUED),
        "due": av_n(job.run_at),
        "payload": av_s(job.payload_json),
        "payload_hash": av_s(job.payload_hash),
        "payload_version": av_n(job.payload_version),
        "attempt": av_n(0),
        "lease_epoch": av_n(0),
        "run_at": av_n(job.run_at),
        "created_at": av_n(job.now),
        "updated_at": av_n(job.now),
    }
    if job.max_attempts is not None:  # None: a producer without the handler; the claim resolves it
        item["max_attempts"] = av_n(job.max_attempts)
    for name in ("idempotency_key", "tenant", "parent_id", "root_id", "trace"):
        value = getattr(job, name)
        if value is not None:
            item[name] = av_s(value)
    return {
        "TableName": table,
        "Item": item,
        "ConditionExpression": "attribute_not_exists(id)",
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }


def interpret_put_conflict(job: NewJob, error: StoreError) -> str:
    """A put refused by the id condition: the same payload is the same job; anything else conflicts."""
    old = old_item(error)
    if old is None:
        raise error
    if old.get("payload_hash", {}).get("S") == job.payload_hash and old["type"]["S"] == job.type:
        return str(old["id"]["S"])
    raise IdempotencyConflict(
        f"idempotency key {job.idempotency_key!r} already names job {old['id']['S']} of type "
        f"{old['type']['S']!r} with a different payload; reuse the same payload or choose a new key"
    )


# ── claim ────────────────────────────────────────────────────────────────────────────────────
def claim(
    table: str,
    job_id: str,
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
        job_id: the job.
        owner: the worker id, for operators (``lease_owner``).
        token: a fresh ``nonce()``: the fence of every later write of this run.
        message_id: the SQS message that brought the job (see ``ClaimRefusal.HELD_ELSEWHERE``).
        now: the worker's clock.
        lease_s: how long the claim holds without renewal.
        max_attempts: the type's policy, from the worker's handler: the bound is the handler's,
            never the producer's (a producer without the handler code cannot know it).

    Attempt and epoch go up by one; ``ALL_NEW`` returns the record (payload included), so the
    worker needs no read.
    """
    expires = now + lease_s
    values: dict[str, Any] = {
        ":queued": av_s(JobStatus.QUEUED),
        ":retry": av_s(JobStatus.RETRY_SCHEDULED),
        ":running": av_s(JobStatus.RUNNING),
        ":due_by": av_n(now + CLOCK_SKEW_S),
        ":now": av_n(now),
        ":one": av_n(1),
        ":owner": av_s(owner),
        ":token": av_s(token),
        ":expires": av_n(expires),
        ":max": av_n(max_attempts),
    }
    sets = (
        "#status = :running, st = :running, attempt = attempt + :one, lease_owner = :owner, "
        "claim_token = :token, lease_epoch = lease_epoch + :one, lease_expires = :expires, "
        "due = :expires, started_at = :now, updated_at = :now, max_attempts = :max"
    )
    if message_id:
        values[":msg"] = av_s(message_id)
        sets += ", claim_msg = :msg"
    return {
        "TableName": table,
        "Key": {"id": av_s(job_id)},
        "ConditionExpression": (
            "attempt < :max AND ("
            "(#status IN (:queued, :retry) AND run_at <= :due_by) "
            "OR (#status = :running AND lease_expires < :now))"
        ),
        "UpdateExpression": f"SET {sets}",
        "ExpressionAttributeNames": {"#status": "status"},
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


@dataclass(frozen=True)
class ClaimRefused:
    """Why a claim did not take the job, and what the message should do."""

    reason: ClaimRefusal
    job: Job | None = None


def interpret_claim_refusal(error: StoreError, now: float, max_attempts: int) -> ClaimRefused:
    """Read the record returned with a refused claim (``max_attempts``: the bound the claim used)."""
    if not is_conflict(error):
        raise error
    old = old_item(error)
    if old is None:
        return ClaimRefused(ClaimRefusal.MISSING)
    job = job_from_item(old)
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
    """Running → a final status, fenced: what complete, fail and abort share (TTL set, lease dropped)."""
    sets = (
        "#status = :final, st = :final, due = :now, finished_at = :now, updated_at = :now, history = :history"
    )
    values: dict[str, Any] = {
        ":final": av_s(status),
        ":now": av_n(now),
        ":history": _history(job, now, AttemptOutcome(status.value), owner, error),
        ":ttl": av_n(int(now + retention_s)),
    }
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
    table: str, job: Job, *, owner: str, now: float, result: Any, retention_s: float
) -> dict[str, Any]:
    """Running → succeeded, fenced."""
    return _finish(
        table,
        job,
        owner=owner,
        now=now,
        status=JobStatus.SUCCEEDED,
        retention_s=retention_s,
        extra={"result": av_json(result)},
    )


def schedule_retry(
    table: str, job: Job, *, owner: str, now: float, run_at: float, error: FailureRecord, held: bool
) -> dict[str, Any]:
    """Running → retry_scheduled, fenced; ``held`` when the message cannot carry the delay."""
    return _fenced(
        table,
        job,
        owner=owner,
        set_expr=(
            "#status = :retry, st = :st, run_at = :run_at, due = :run_at, updated_at = :now, "
            "#error = :error, history = :history"
        ),
        values={
            ":retry": av_s(JobStatus.RETRY_SCHEDULED),
            ":st": av_s(HELD if held else JobStatus.RETRY_SCHEDULED),
            ":run_at": av_n(run_at),
            ":now": av_n(now),
            ":error": av_error(error),
            ":history": _history(job, now, AttemptOutcome.RETRY, owner, error),
        },
        remove="lease_owner, lease_expires",
    ) | {"ExpressionAttributeNames": {"#status": "status", "#error": "error"}}


def fail(
    table: str, job: Job, *, owner: str, now: float, error: FailureRecord, reason: str, retention_s: float
) -> dict[str, Any]:
    """Running → dead, fenced."""
    return _finish(
        table,
        job,
        owner=owner,
        now=now,
        status=JobStatus.DEAD,
        retention_s=retention_s,
        error=error,
        extra={"error": av_error(error), "reason": av_s(reason)},
    )


def abort(table: str, job: Job, *, owner: str, now: float, reason: str, retention_s: float) -> dict[str, Any]:
    """Running → cancelled, fenced (the handler stopped on a cancel request)."""
    return _finish(
        table,
        job,
        owner=owner,
        now=now,
        status=JobStatus.CANCELLED,
        retention_s=retention_s,
        extra={"reason": av_s(reason)},
    )


def release(table: str, job: Job, *, owner: str, now: float) -> dict[str, Any]:
    """Running → queued on graceful shutdown, fenced; the attempt is given back."""
    return _fenced(
        table,
        job,
        owner=owner,
        set_expr=(
            "#status = :queued, st = :queued, run_at = :now, due = :now, updated_at = :now, "
            "attempt = attempt - :one, history = :history"
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
        set_expr="lease_expires = :expires, due = :expires, updated_at = :now",
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
    table: str, job_id: str, *, now: float, error: FailureRecord, reason: str, retention_s: float
) -> dict[str, Any]:
    """A job that must not run (unknown type, invalid payload, attempts exhausted) → dead, unclaimed."""
    return {
        "TableName": table,
        "Key": {"id": av_s(job_id)},
        "ConditionExpression": (
            "#status IN (:queued, :retry) OR (#status = :running AND lease_expires < :now)"
        ),
        "UpdateExpression": (
            "SET #status = :dead, st = :dead, due = :now, finished_at = :now, updated_at = :now, "
            "#error = :error, reason = :reason, expires_at = :ttl REMOVE lease_owner, lease_expires"
        ),
        "ExpressionAttributeNames": {"#status": "status", "#error": "error"},
        "ExpressionAttributeValues": {
            ":queued": av_s(JobStatus.QUEUED),
            ":retry": av_s(JobStatus.RETRY_SCHEDULED),
            ":running": av_s(JobStatus.RUNNING),
            ":dead": av_s(JobStatus.DEAD),
            ":now": av_n(now),
            ":error": av_error(error),
            ":reason": av_s(reason),
            ":ttl": av_n(int(now + retention_s)),
        },
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }


def get(table: str, job_id: str) -> dict[str, Any]:
    """GetItem, strongly consistent (an operator asking right after a write sees it)."""
    return {"TableName": table, "Key": {"id": av_s(job_id)}, "ConsistentRead": True}
