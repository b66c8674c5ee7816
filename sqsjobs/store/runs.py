"""A run's writes: the claim that makes a worker a job's runner, and the fenced finish that ends the run.

The claim comes as a single UpdateItem and as its batchable twin; the finishes (complete,
schedule_retry, fail, abort) are the run's own outcome. The run's other writes, which most runs never
make (release at a shutdown, the heartbeat of a long job, a reject), are in ``store/requests.py``.

Lease timeline of one job (``now`` is the caller's clock, ``lease`` is ``Settings.lease_s``)::

    claim (token t, message m) ──────── lease_expires ───────────────────────────▶ time
      │  the owner may heartbeat,            │ rescue allowed: a new claim takes
      │  complete, retry, fail or release;   │ a new token; the old owner's writes
      │  a refused claim from message m      │ fail: LeaseLost
      │  (the owner's own, back after its    │
      │  worker died) waits for the lease;   │
      │  a copy from another message is      │
      │  dropped: m covers a crash           │

Every write after a claim is conditional on ``claim_token = :token``: a random value per claim — the
fence (docs/lifecycle.md). Conflicts are read back with ``ReturnValuesOnConditionCheckFailure=ALL_OLD``,
never with a separate read, so the happy path costs no read units.

Two claims exist because a batched PartiQL statement has neither an upsert nor ``ReturnValues``:

* the **single claim** (``claim``) takes a due runnable job, or a running one whose lease expired, and
  creates the record from a version 2 message if there is none yet; ``ALL_NEW`` returns the record;
* the **fresh claim** (``fresh_claim``) only claims a record never claimed before (``lease_epoch = 0``),
  whose every field the message carries, so ``claimed_job`` rebuilds the record without an answer. A
  job claimed before (a retry, a released or replayed job) takes the single claim.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from sqsjobs.errors import NotBatchable
from sqsjobs.job import AttemptOutcome, AttemptRecord, FailureRecord, JobStatus, Witness
from sqsjobs.store.codec import (
    WRITE_ID,
    Item,
    av_error,
    av_json,
    av_n,
    av_s,
    creates_from,
    job_from_item,
    nonce,
    record_of,
)
from sqsjobs.store.conditions import All, AnyOf, Compare, Fragment, IfNotExists, Missing, Not, OneOf, Plus, eq
from sqsjobs.store.enqueue import kept_payload
from sqsjobs.store.schema import DEAD, HELD, attention_key
from sqsjobs.store.state_table import CLAIM, FENCED, STATE_TABLE
from sqsjobs.store.write import Write

if TYPE_CHECKING:
    from collections.abc import Mapping

    from sqsjobs.envelope import Envelope
    from sqsjobs.job import Job
    from sqsjobs.store.conditions import Condition, Expr

#: A message may arrive this much before ``run_at`` (clock skew between hosts) and still claim.
CLOCK_SKEW_S = 1.0

_WAITING = OneOf("status", (":queued", ":retry"))
#: Due and runnable: waiting and due, or running under an expired lease; an attempt left either way.
RUNNABLE = All(
    (
        Compare("attempt", "<", ":max"),
        AnyOf(
            (
                All((_WAITING, Compare("run_at", "<=", ":due_by"))),
                All((eq("status", ":running"), Compare("lease_expires", "<", ":now"))),
            )
        ),
    )
)
#: A missing record (the claim creates it from the message), or the message's own job, runnable.
NEW_OR_RUNNABLE = AnyOf((Missing("id"), All((eq("payload_hash", ":c_payload_hash"), RUNNABLE))))
_CLAIM_SETS: tuple[tuple[str, Expr], ...] = (
    ("status", ":running"),
    ("attempt", Plus(IfNotExists("attempt", ":zero"), "+", ":one")),
    ("lease_owner", ":owner"),
    ("claim_token", ":token"),
    ("lease_epoch", Plus(IfNotExists("lease_epoch", ":zero"), "+", ":one")),
    ("lease_expires", ":expires"),
    ("started_at", ":now"),
    ("updated_at", ":now"),
    ("max_attempts", ":max"),
)
_CLAIM_MSG: tuple[tuple[str, Expr], ...] = (("claim_msg", ":msg"),)
_CLAIM_SETS_MSG = _CLAIM_SETS + _CLAIM_MSG
#: A claim takes the job off the attention index (a replayed or swept job).
_ATTENTION = ("attn", "due")
#: The record a fresh claim may take: never claimed, waiting, due, and the message's own payload.
FRESH = All(
    (
        eq("lease_epoch", ":zero"),
        eq("attempt", ":zero"),
        _WAITING,
        Compare("run_at", "<=", ":due_by"),
        eq("payload_hash", ":hash"),
    )
)
#: What a fresh claim sets (plus ``claim_msg``): one list for the write and for ``claimed_job``.
_FRESH_SETS: tuple[tuple[str, str], ...] = (
    ("status", ":running"),
    ("attempt", ":one"),
    ("lease_owner", ":owner"),
    ("claim_token", ":token"),
    ("lease_epoch", ":one"),
    ("lease_expires", ":expires"),
    ("started_at", ":now"),
    ("updated_at", ":now"),
    ("max_attempts", ":max"),
)
_FRESH_SETS_MSG: tuple[tuple[str, Expr], ...] = _FRESH_SETS + _CLAIM_MSG


def _claim_values(
    *,
    owner: str,
    token: str,
    message_id: str | None,
    now: float,
    lease_s: float,
    max_attempts: int,
    clock_skew_s: float,
) -> dict[str, Any]:
    values: dict[str, Any] = {
        ":queued": av_s(JobStatus.QUEUED),
        ":retry": av_s(JobStatus.RETRY_SCHEDULED),
        ":running": av_s(JobStatus.RUNNING),
        ":due_by": av_n(now + clock_skew_s),
        ":now": av_n(now),
        ":zero": av_n(0),
        ":one": av_n(1),
        ":owner": av_s(owner),
        ":token": av_s(token),
        ":expires": av_n(now + lease_s),
        ":max": av_n(max_attempts),
    }
    if message_id:
        values[":msg"] = av_s(message_id)
    return values


@STATE_TABLE.row(
    "claim",
    sources={JobStatus.QUEUED, JobStatus.RETRY_SCHEDULED},
    target=JobStatus.RUNNING,
    refusals=CLAIM,
    kept={Witness.LEASE},
)
# The same write on a running job once its lease expired: a new owner, a new token, epoch + 1.
@STATE_TABLE.row(
    "rescue", sources={JobStatus.RUNNING}, target=JobStatus.RUNNING, refusals=CLAIM, kept={Witness.LEASE}
)
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
    guards: tuple[Fragment, ...] = (),
) -> Write:
    """The single claim: makes ``owner`` the runner of a due runnable job, or of a running one whose lease expired.

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
        guards: more fragments it must meet (the deadline's: ``claims``).

    Attempt and epoch go up by one; ``ALL_NEW`` returns the record, so the worker needs no read.
    The claim removes any attention entry (a replayed or swept job is taken).
    """
    values = _claim_values(
        owner=owner,
        token=token,
        message_id=message_id,
        now=now,
        lease_s=lease_s,
        max_attempts=max_attempts,
        clock_skew_s=CLOCK_SKEW_S,
    )
    sets = _CLAIM_SETS_MSG if message_id else _CLAIM_SETS
    key = {"id": av_s(envelope.job_id)}
    if not envelope.has_payload:
        condition = Fragment("runnable", RUNNABLE, values)
    else:
        created, created_values = creates_from(envelope)
        sets = _creating(sets, created)
        values.update(created_values)
        condition = Fragment("new_or_runnable", NEW_OR_RUNNABLE, values)
    return Write(table, key, sets, _ATTENTION, guards=(condition, *guards), values=values, returns="ALL_NEW")


#: ``sets + created`` by the identity of both (module constants and ``enqueue``'s cached tuples):
#: one tuple per shape, found without hashing it, so the rendering cache finds it by identity too.
_CREATING: dict[tuple[int, int], tuple[object, tuple[tuple[str, Expr], ...]]] = {}


def _creating(
    sets: tuple[tuple[str, Expr], ...], created: tuple[tuple[str, Expr], ...]
) -> tuple[tuple[str, Expr], ...]:
    key = (id(sets), id(created))
    found = _CREATING.get(key)
    if found is None:
        if len(_CREATING) >= 256:
            _CREATING.clear()
        found = _CREATING[key] = ((sets, created), sets + created)  # the parts kept: their ids stay theirs
    return found[1]


def fresh_claim(
    table: str,
    envelope: Envelope,
    *,
    owner: str,
    token: str,
    message_id: str | None,
    now: float,
    lease_s: float,
    max_attempts: int,
    clock_skew_s: float,
    guards: tuple[Fragment, ...] = (),
) -> Write:
    """The claim of a job never claimed before, whose PartiQL twin may go in a batch.

    Same effect as ``claim`` on such a record (attempt and epoch 0 → 1), but every value it writes is
    known without the answer, so ``claimed_job`` can rebuild the record. It must use the same ``token``
    as the single claim it may fall back to, so a lost answer is recognised either way.
    """
    if not envelope.has_payload:
        raise NotBatchable("a version 1 message does not carry the record")
    values = _claim_values(
        owner=owner,
        token=token,
        message_id=message_id,
        now=now,
        lease_s=lease_s,
        max_attempts=max_attempts,
        clock_skew_s=clock_skew_s,
    )
    values[":hash"] = av_s(str(envelope.payload_hash))
    sets = _FRESH_SETS_MSG if message_id else _FRESH_SETS
    return Write(
        table,
        {"id": av_s(envelope.job_id)},
        sets,
        _ATTENTION,
        guards=(Fragment("fresh", FRESH, values), *guards),
        values=values,
        old_on_refusal=False,
    )


def claimed_item(envelope: Envelope, fresh: Write) -> Item:
    """The record a landed ``fresh_claim`` made: the message's record with the claim's values applied."""
    values = fresh.values
    assigned = (*_FRESH_SETS, *(_CLAIM_MSG if ":msg" in values else ()))
    # The message's record has no attention entry (``attn``, ``due``) for the claim to remove.
    return record_of(envelope) | {name: values[str(value)] for name, value in assigned}


def claimed_job(envelope: Envelope, fresh: Write) -> Job:
    """The job a landed ``fresh_claim`` made, as its record holds it (``claimed_item``)."""
    return job_from_item(claimed_item(envelope, fresh))


# ── the deadline every claim meets (expiry: ``store/deadlines.py``) ─────────────────────────────
#: True of a record whose deadline passed and that never started: what the claim refuses and the
#: ``expire`` write requires. ``:x_oldest`` is ``now - expires_after`` of the type (a value no
#: ``created_at`` is below when the type has none).
EXPIRED = All(
    (
        eq("lease_epoch", ":x_zero"),
        AnyOf(
            (
                Compare("start_by", "<", ":x_now"),
                All((Missing("start_by"), Compare("created_at", "<", ":x_oldest"))),
            )
        ),
    )
)


def deadline_values(now: float, type_bound_s: float | None) -> dict[str, Any]:
    """The values of ``EXPIRED``'s placeholders (the claim guards', and ``deadlines.expire``'s)."""
    # Without a type bound no created_at is below 0: the clause is false.
    return {
        ":x_zero": av_n(0),
        ":x_now": av_n(now),
        ":x_oldest": av_n(now - type_bound_s if type_bound_s else 0),
    }


def claim_guard(*, now: float, type_bound_s: float | None) -> Fragment:
    """What the single claim must meet too: the job did not expire (never started, deadline passed).

    ANDed to the whole condition: on a missing record ``lease_epoch = :x_zero`` is false, so the
    claim still creates it from the message (whose deadline the worker checked first).
    """
    return Fragment("not_expired", _NOT_EXPIRED, deadline_values(now, type_bound_s))


def guard_claim(write: Write, *, now: float, type_bound_s: float | None) -> Write:
    """The single claim ``write``, refused also for a job that expired (``claim_guard``)."""
    fragment = claim_guard(now=now, type_bound_s=type_bound_s)
    return write.guard(fragment.name, fragment.condition, fragment.values)


#: The fresh claim's deadline guards, by what the message shows (see ``fresh_claim_guard``).
_STARTS_BY = Compare("start_by", ">=", ":x_now")
_NO_DEADLINE_WITHIN_BOUND = All((Missing("start_by"), Compare("created_at", ">=", ":x_oldest")))
_NO_DEADLINE = Missing("start_by")
_NOT_EXPIRED = Not(EXPIRED)


def fresh_claim_guard(
    envelope: Envelope, *, now: float, type_bound_s: float | None, values: Mapping[str, Any] | None = None
) -> Fragment:
    """What the batchable fresh claim must meet too: the record's deadline is the message's and not past.

    A batched statement takes no ``OR`` or ``NOT`` (``store/write.py``), so the guard names the
    deadline the message shows: the record's ``start_by`` is at least now, or, when the message
    carries none, the record has none either (and its ``created_at`` is within the type's bound).
    A record whose deadline is not the message's sends the single claim to decide
    (``JobStore.claim``). ``values``: the single claim's guard's, when it has one (the same values).
    """
    if envelope.start_by is not None:
        condition: Condition = _STARTS_BY
    elif type_bound_s:
        condition = _NO_DEADLINE_WITHIN_BOUND
    else:
        condition = _NO_DEADLINE
    return Fragment("the_messages_deadline", condition, values or deadline_values(now, type_bound_s))


def guard_fresh_claim(write: Write, envelope: Envelope, *, now: float, type_bound_s: float | None) -> Write:
    """The batchable fresh claim ``write``, guarded by ``fresh_claim_guard``."""
    fragment = fresh_claim_guard(envelope, now=now, type_bound_s=type_bound_s)
    return write.guard(fragment.name, fragment.condition, fragment.values)


# ── the finish of a run ──────────────────────────────────────────────────────────────────────
#: Attempts kept in the record; older ones are dropped so the item stays small.
HISTORY_CAP = 10


# ── the finish: owner-fenced ─────────────────────────────────────────────────────────────────
#: The fence of every write of a run: still running, under this run's claim.
FENCE = All((eq("status", ":running"), eq("claim_token", ":token")))
LEASE = ("lease_owner", "lease_expires")
_WID: tuple[str, Expr] = (WRITE_ID, ":wid")
_RUNNING = av_s(JobStatus.RUNNING)


def fenced(
    table: str,
    job: Job,
    *,
    sets: tuple[tuple[str, Expr], ...],
    values: dict[str, Any],
    removes: tuple[str, ...] = (),
    returns: Literal["NONE", "ALL_NEW"] = "NONE",
) -> Write:
    """A write of ``job``'s run, landing only under its claim, carrying a write id (``wid``) of its own."""
    if job.claim_token is None:
        raise ValueError(f"job {job.id} was not claimed by this run: no claim token to fence on")
    values[":wid"] = av_s(nonce())
    fence = Fragment("fence", FENCE, {":running": _RUNNING, ":token": av_s(job.claim_token)})
    return Write(
        table, {"id": av_s(job.id)}, (*sets, _WID), removes, guards=(fence,), values=values, returns=returns
    )


def history(
    job: Job, now: float, outcome: AttemptOutcome, owner: str, error: FailureRecord | None
) -> dict[str, Any]:
    """The record's attempt history with this attempt's entry appended (the oldest dropped past the cap)."""
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
        values[":history"] = history(job, now, AttemptOutcome(status.value), owner, error)
    for attr, value in (extra or {}).items():
        sets.append((attr, f":{attr}"))
        values[f":{attr}"] = value
    sets.append(("expires_at", ":ttl"))
    return fenced(table, job, sets=tuple(sets), values=values, removes=LEASE)


@STATE_TABLE.row("complete", sources={JobStatus.RUNNING}, target=JobStatus.SUCCEEDED, refusals=FENCED)
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


# The same message re-armed to the backoff, or a ``held`` entry (payload in the record) beyond it.
@STATE_TABLE.row(
    "schedule_retry",
    sources={JobStatus.RUNNING},
    target=JobStatus.RETRY_SCHEDULED,
    refusals=FENCED,
    kept={Witness.MESSAGE, Witness.ATTENTION},
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
        ":history": history(job, now, AttemptOutcome.RETRY, owner, error),
    }
    if held:
        sets += [("attn", ":attn"), ("due", ":run_at")]
        values[":attn"] = av_s(attention_key(HELD, job.id))
        if job.payload_ref is None:
            sets.append(("payload", ":payload"))
            values[":payload"] = av_json(payload)
    return fenced(table, job, sets=tuple(sets), values=values, removes=LEASE)


@STATE_TABLE.row("fail", sources={JobStatus.RUNNING}, target=JobStatus.DEAD, refusals=FENCED)
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


# The handler stopped on a cancel request.
@STATE_TABLE.row("abort", sources={JobStatus.RUNNING}, target=JobStatus.CANCELLED, refusals=FENCED)
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
