"""Sans-I/O writes of a run's transitions: complete, schedule_retry, fail, abort, release, heartbeat; and reject.

Every write after a claim (``store/claims.py``) is fenced: conditional on ``status = running AND
claim_token = :token``, the random token of that claim. A write retried by botocore after a lost
answer is recognised as its own by a random nonce it also writes (``wid``) — never by a time, owner
or epoch, which a second claim in the same millisecond by the same worker would repeat
(docs/lifecycle.md). How each refusal is read is next to the transition, in ``store/job_store.py``.

Item layout: one item per job keyed by ``id``, under 1 KB on the happy path (one write unit per
write): the SQS message carries the payload, the record its hash and size. Only records that need
attention (held, pending, dead) carry ``attn``/``due``, the keys of the one sparse index
(``store/schema.py``); no write of the happy path touches an index. ``audit`` is a capped list of
operator actions (retry, replay), read through ``Job.extra``.

Where the other writes are built: the producer's record and the message it sends in
``store/enqueue.py``, the claims in ``store/claims.py``, expiry in ``store/deadlines.py``, the
operator's (cancel, request_cancel, replay) in ``store/operator.py``, the sweeper's dispatch mark in
``store/schema.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from sqsjobs.job import AttemptOutcome, AttemptRecord, FailureRecord, Job, JobStatus
from sqsjobs.store.codec import WRITE_ID, av_error, av_json, av_n, av_s, creates_from, nonce
from sqsjobs.store.conditions import All, AnyOf, Compare, Fragment, IfNotExists, Missing, OneOf, Plus, eq
from sqsjobs.store.enqueue import kept_payload
from sqsjobs.store.schema import DEAD, HELD, attention_key
from sqsjobs.store.write import Write

if TYPE_CHECKING:
    from sqsjobs.envelope import Envelope
    from sqsjobs.store.conditions import Expr

#: Attempts kept in the record; older ones are dropped so the item stays small.
HISTORY_CAP = 10


# ── owner-fenced transitions ─────────────────────────────────────────────────────────────────
#: The fence of every write of a run: still running, under this run's claim.
FENCE = All((eq("status", ":running"), eq("claim_token", ":token")))
_LEASE = ("lease_owner", "lease_expires")
_WID: tuple[str, Expr] = (WRITE_ID, ":wid")
_RUNNING = av_s(JobStatus.RUNNING)


def _fenced(
    table: str,
    job: Job,
    *,
    sets: tuple[tuple[str, Expr], ...],
    values: dict[str, Any],
    removes: tuple[str, ...] = (),
    returns: Literal["NONE", "ALL_NEW"] = "NONE",
) -> Write:
    if job.claim_token is None:
        raise ValueError(f"job {job.id} was not claimed by this run: no claim token to fence on")
    values[":wid"] = av_s(nonce())
    fence = Fragment("fence", FENCE, {":running": _RUNNING, ":token": av_s(job.claim_token)})
    return Write(
        table, {"id": av_s(job.id)}, (*sets, _WID), removes, guards=(fence,), values=values, returns=returns
    )


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
) -> Write:
    """Running → a final status, fenced: what complete, fail and abort share (TTL set, lease dropped).

    A first attempt that succeeds writes no history entry (the record's own times say it all), so
    the happy path stays within one write unit; any other outcome appends one.
    """
    sets: list[tuple[str, Expr]] = [("status", ":final"), ("finished_at", ":now"), ("updated_at", ":now")]
    values: dict[str, Any] = {
        ":final": av_s(status),
        ":now": av_n(now),
        ":ttl": av_n(int(now + retention_s)),
    }
    if status is not JobStatus.SUCCEEDED or job.attempt > 1 or job.history:
        sets.append(("history", ":history"))
        values[":history"] = _history(job, now, AttemptOutcome(status.value), owner, error)
    for attr, value in (extra or {}).items():
        sets.append((attr, f":{attr}"))
        values[f":{attr}"] = value
    sets.append(("expires_at", ":ttl"))
    return _fenced(table, job, sets=tuple(sets), values=values, removes=_LEASE)


def complete(
    table: str,
    job: Job,
    *,
    owner: str,
    now: float,
    result: Any,
    retention_s: float,
    result_ref: str | None = None,
) -> Write:
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
) -> Write:
    """Running → retry_scheduled, fenced.

    ``held`` when the message cannot carry the delay (beyond the 12 h visibility cap): the record
    then keeps ``payload`` and an attention entry, and the sweeper sends it when due.
    """
    sets: list[tuple[str, Expr]] = [
        ("status", ":retry"),
        ("run_at", ":run_at"),
        ("updated_at", ":now"),
        ("error", ":error"),
        ("history", ":history"),
    ]
    values: dict[str, Any] = {
        ":retry": av_s(JobStatus.RETRY_SCHEDULED),
        ":run_at": av_n(run_at),
        ":now": av_n(now),
        ":error": av_error(error),
        ":history": _history(job, now, AttemptOutcome.RETRY, owner, error),
    }
    if held:
        sets += [("attn", ":attn"), ("due", ":run_at")]
        values[":attn"] = av_s(attention_key(HELD, job.id))
        if job.payload_ref is None:
            sets.append(("payload", ":payload"))
            values[":payload"] = av_json(payload)
    return _fenced(table, job, sets=tuple(sets), values=values, removes=_LEASE)


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
) -> Write:
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
) -> Write:
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


def release(table: str, job: Job, *, owner: str, now: float) -> Write:
    """Running → queued on graceful shutdown, fenced; the attempt is given back."""
    return _fenced(
        table,
        job,
        sets=(
            ("status", ":queued"),
            ("run_at", ":now"),
            ("updated_at", ":now"),
            ("attempt", Plus("attempt", "-", ":one")),
            ("history", ":history"),
        ),
        values={
            ":queued": av_s(JobStatus.QUEUED),
            ":now": av_n(now),
            ":one": av_n(1),
            ":history": _history(job, now, AttemptOutcome.RELEASED, owner, None),
        },
        removes=_LEASE,
    )


def heartbeat(table: str, job: Job, *, owner: str, now: float, lease_s: float) -> Write:
    """Running → running with a later lease expiry, fenced; ``ALL_NEW`` shows a cancel request."""
    return _fenced(
        table,
        job,
        sets=(("lease_expires", ":expires"), ("updated_at", ":now")),
        values={":expires": av_n(now + lease_s), ":now": av_n(now)},
        returns="ALL_NEW",
    )


# ── transitions without an owner ─────────────────────────────────────────────────────────────
_REJECT_SETS: tuple[tuple[str, Expr], ...] = (
    ("status", ":dead"),
    ("finished_at", ":now"),
    ("updated_at", ":now"),
    ("error", ":error"),
    ("reason", ":reason"),
    ("expires_at", ":ttl"),
    ("attn", ":attn"),
    ("due", ":now"),
    ("attempt", IfNotExists("attempt", ":zero")),
    ("lease_epoch", IfNotExists("lease_epoch", ":zero")),
)
#: What a reject may end: a waiting job, or a running one whose lease expired.
REJECTABLE = AnyOf(
    (
        OneOf("status", (":queued", ":retry")),
        All((eq("status", ":running"), Compare("lease_expires", "<", ":now"))),
    )
)


def reject(
    table: str, envelope: Envelope, *, now: float, error: FailureRecord, reason: str, retention_s: float
) -> Write:
    """A job that must not run (unknown type, invalid payload, attempts exhausted) → dead, unclaimed.

    Like the claim, it creates the record from a version 2 message if there is none yet, so a
    producer's write that lands later finds the job already dead (and says so) instead of queuing a
    job whose message is gone. The record keeps the payload and a ``dead`` attention entry.
    """
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
    write = Write(table, {"id": av_s(envelope.job_id)}, _REJECT_SETS, _LEASE, values=values)
    if not envelope.has_payload:
        return write.guard("rejectable", REJECTABLE, values)
    created, created_values = creates_from(envelope)
    created_values[":payload"] = av_json(envelope.payload)
    write = write.also_set((*created, ("payload", ":payload")), created_values)
    return write.guard("new_or_rejectable", AnyOf((Missing("id"), REJECTABLE)), values)


def with_write_id(write: Write) -> Write:
    """``write`` that also sets a fresh nonce (``wid``): what a transaction recognises its own landed try by."""
    return write.also_set(((WRITE_ID, ":wid"),), {":wid": av_s(nonce())})


def get(table: str, job_id: str) -> dict[str, Any]:
    """GetItem, strongly consistent (an operator asking right after a write sees it)."""
    return {"TableName": table, "Key": {"id": av_s(job_id)}, "ConsistentRead": True}
