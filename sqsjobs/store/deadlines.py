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
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sqsjobs.errors import ExpiryInvalid
from sqsjobs.job import JobStatus
from sqsjobs.store.apply import Refusal
from sqsjobs.store.codec import av_n, av_s, creates_from, num_attr, str_attr
from sqsjobs.store.conditions import All, AnyOf, IfNotExists, Missing, eq
from sqsjobs.store.runs import EXPIRED, deadline_values
from sqsjobs.store.state_table import STATE_TABLE
from sqsjobs.store.write import Write

if TYPE_CHECKING:
    from collections.abc import Mapping

    from sqsjobs.envelope import Envelope
    from sqsjobs.job import Job
    from sqsjobs.store.conditions import Expr


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


# Never started (``lease_epoch = 0``) and past ``start_by`` (or the type's bound from ``created_at``).
@STATE_TABLE.row(
    "expire",
    sources={JobStatus.QUEUED},
    target=JobStatus.EXPIRED,
    refusals=(Refusal.ALREADY_EXPIRED, Refusal.NOT_EXPIRED, Refusal.ENTRY_REFUSED),
)
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
        **deadline_values(now, type_bound_s),
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


@dataclass(frozen=True)
class ExpireInstead:
    """The job must not start: record it ``expired`` (no run), then drop the message."""

    #: The deadline that passed (epoch seconds).
    deadline: float
    #: The record's ``reason``.
    reason: str
    #: The type's own bound (s), which the expire write's condition applies to a record without one.
    type_bound_s: float | None = None


def passed_before_claim(envelope: Envelope, type_bound_s: float | None, now: float) -> ExpireInstead | None:
    """Expire instead of claiming: the deadline the message shows passed (None: the claim decides)."""
    passed = message_deadline(envelope, type_bound_s)
    if passed is None or passed >= now:
        return None
    return ExpireInstead(passed, reason(passed), type_bound_s)


def started_too_late(job: Job, type_bound_s: float | None, now: float) -> str | None:
    """Why ``job``, claimed ahead of a free slot and starting only ``now``, expires instead; None: it starts.

    A job claimed before (a retry, a release: ``lease_epoch`` > 1) started before its deadline.
    """
    if job.lease_epoch > 1:
        return None
    passed = deadline(
        job.start_by.timestamp() if job.start_by else None, job.created_at.timestamp(), type_bound_s
    )
    return reason(passed) if passed is not None and passed < now else None


def reason(deadline_s: float) -> str:
    """The record's ``reason`` for an expired job."""
    return (
        f"not started by its deadline {datetime.fromtimestamp(deadline_s, UTC).isoformat(timespec='seconds')}"
    )
