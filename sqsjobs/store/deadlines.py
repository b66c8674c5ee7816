"""Deadlines (expiry), sans-I/O: a job not started by its deadline ends ``expired`` and never runs.

Timeline of one job with a deadline (``start_by`` = enqueue time + ``expires_after``)::

    enqueue (created_at) ──── run_at ─────────────────── start_by ──────────────────────▶ time
      │ not due: a claim is         │ a claim may start it     │ a claim of a job never started is
      │ refused (hidden until due)  │                          │ refused; the worker that met its
      │                             │                          │ message (or the sweeper, for a held
      │                             │                          │ job) writes ``expire``; the message
      │                             │                          │ is deleted, never dead-lettered

**Never started** is ``lease_epoch = 0``: every claim bumps the epoch and nothing lowers it. So a
job that started before its deadline is never expired later: not when it retries, and not when
its worker released it at shutdown (its handler ran; cutting it off would leave half its work
done). Expiry bounds the wait for a *first* start, not the job's whole life.

**The deadline** is the record's ``start_by``, written by the producer from the enqueue's
``expires_after`` or the type's. A producer without the handler code cannot know the type's, and
writes none: the worker that has the handler applies it from the record's ``created_at``
(``created_at < now - expires_after``), in the claim's condition itself, so a thin producer never
weakens the type's bound (the same holds for attempts: docs/lifecycle.md). An enqueue's own
``expires_after`` wins over the type's, looser or stricter.

Every fragment here is a condition, not a read: guarding a claim costs nothing, and a job without
a deadline pays nothing (its claim's guard is false on a record without ``start_by``).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sqsjobs.errors import ExpiryInvalid
from sqsjobs.job import JobStatus
from sqsjobs.store.codec import av_n, av_s, creates_from, num_attr, str_attr
from sqsjobs.store.conditions import All, AnyOf, Compare, Fragment, IfNotExists, Missing, Not, eq
from sqsjobs.store.write import Write

if TYPE_CHECKING:
    from collections.abc import Mapping

    from sqsjobs.envelope import Envelope
    from sqsjobs.store.conditions import Condition, Expr

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


def start_by(*, job_type: str, now: float, run_at: float, expires_after_s: float | None) -> float | None:
    """The deadline of a job enqueued at ``now``, to the millisecond (what the record stores); None: none.

    Raises:
        ExpiryInvalid: ``expires_after`` is not a positive finite duration, or the job would expire
            before it may start (``run_at`` past its deadline): it could never run.
    """
    if expires_after_s is None:
        return None
    if not (math.isfinite(expires_after_s) and expires_after_s > 0):
        raise ExpiryInvalid(
            f"expires_after of {job_type!r} must be a positive duration, got {expires_after_s!r}"
        )
    deadline = round(now + expires_after_s, 3)
    if run_at > deadline:
        raise ExpiryInvalid(
            f"job {job_type!r} would expire {expires_after_s:g} s after its enqueue, before it may start "
            f"{run_at - now:.0f} s after it: give an expires_after longer than its delay, or run it sooner"
        )
    return deadline


def deadline(start: float | None, created_at: float | None, type_bound_s: float | None) -> float | None:
    """When a job never started expires: its own ``start_by``, else ``created_at`` + the type's bound."""
    if start is not None:
        return start
    if type_bound_s is None or created_at is None:
        return None
    return created_at + type_bound_s


def message_deadline(envelope: Envelope, type_bound_s: float | None) -> float | None:
    """The deadline a message shows (a version 1 hint shows none: the claim's condition decides)."""
    return deadline(envelope.start_by, envelope.created_at, type_bound_s)


def _values(now: float, type_bound_s: float | None) -> dict[str, Any]:
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
    return Fragment("not_expired", _NOT_EXPIRED, _values(now, type_bound_s))


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
    return Fragment("the_messages_deadline", condition, values or _values(now, type_bound_s))


def guard_fresh_claim(write: Write, envelope: Envelope, *, now: float, type_bound_s: float | None) -> Write:
    """The batchable fresh claim ``write``, guarded by ``fresh_claim_guard``."""
    fragment = fresh_claim_guard(envelope, now=now, type_bound_s=type_bound_s)
    return write.guard(fragment.name, fragment.condition, fragment.values)


_EXPIRE_SETS: tuple[tuple[str, Expr], ...] = (
    ("status", ":expired"),
    ("finished_at", ":now"),
    ("updated_at", ":now"),
    ("reason", ":reason"),
    ("expires_at", ":ttl"),
    ("attempt", IfNotExists("attempt", ":x_zero")),
    ("lease_epoch", IfNotExists("lease_epoch", ":x_zero")),
)
_EXPIRABLE = All((eq("status", ":queued"), EXPIRED))


def expire(
    table: str, envelope: Envelope, *, now: float, reason: str, retention_s: float, type_bound_s: float | None
) -> Write:
    """Queued (never started, deadline passed) → expired, unclaimed; the attention entry goes.

    Like ``reject``, it creates the record from a version 2 message if there is none yet, so a
    producer's write that lands later finds the job expired instead of queuing a job whose message
    is gone. The condition is the claim guard's: exactly the records a claim refuses as expired.
    """
    values: dict[str, Any] = {
        ":queued": av_s(JobStatus.QUEUED),
        ":expired": av_s(JobStatus.EXPIRED),
        ":now": av_n(now),
        ":reason": av_s(reason),
        ":ttl": av_n(int(now + retention_s)),
        **_values(now, type_bound_s),
    }
    write = Write(table, {"id": av_s(envelope.job_id)}, _EXPIRE_SETS, ("attn", "due"), values=values)
    if not envelope.has_payload:
        return write.guard("expirable", _EXPIRABLE, values)
    created, created_values = creates_from(envelope)
    return write.also_set(created, created_values).guard(
        "new_or_expirable", AnyOf((Missing("id"), _EXPIRABLE)), values
    )


def expired_deadline(item: Mapping[str, Any] | None, now: float, type_bound_s: float | None) -> float | None:
    """The passed deadline of a job a claim refuses as expired (``EXPIRED``, in Python); None: not expired."""
    if item is None or str_attr(item, "status") != JobStatus.QUEUED or num_attr(item, "lease_epoch") != 0:
        return None
    due = deadline(num_attr(item, "start_by"), num_attr(item, "created_at"), type_bound_s)
    return due if due is not None and due < now else None


def reason(deadline_s: float) -> str:
    """The record's ``reason`` for an expired job."""
    return (
        f"not started by its deadline {datetime.fromtimestamp(deadline_s, UTC).isoformat(timespec='seconds')}"
    )
