"""The state table's operations on one job, and what each refusal means, read once, next to its write.

``JobStore`` applies the writes of ``job.TRANSITIONS`` (claim, complete, schedule_retry, fail, abort,
release, heartbeat, reject, expire, keep_payload) through an ``Applier`` — the worker's write batcher
(``runtime/transitions.py``) — and answers ``Landed`` or raises the ``StoreError`` of the refusal,
which the functions below read. A refused write returns the record as it was
(``ReturnValuesOnConditionCheckFailure=ALL_OLD``), so reading a refusal costs no request.

Lost answers: botocore retries a write whose answer was lost with the same parameters. If the first
try landed, the retry is refused by its own result; the record then shows this write's random claim
token (a claim) or nonce (``wid``, every other write), which no other request has — not even a second
claim by the same worker in the same millisecond for a copy of the message (docs/lifecycle.md).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from sqsjobs.errors import LeaseLost, StoreError
from sqsjobs.job import Job, JobStatus
from sqsjobs.store import claims, deadlines, requests
from sqsjobs.store.codec import (
    CCF,
    av_s,
    is_conflict,
    job_from_item,
    num_attr,
    old_item,
    shows_own_write,
    str_attr,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from sqsjobs.envelope import Envelope
    from sqsjobs.store.write import Write


@dataclass(frozen=True)
class Landed:
    """A write that took effect; ``attributes`` is what a single write returned (None from a batch)."""

    attributes: Mapping[str, Any] | None = None


class Applier(Protocol):
    """Sends writes: alone, batched with others, or in one transaction with other items."""

    async def write(
        self,
        single: Write,
        *,
        batchable: Write | None = None,
        needs_single: Callable[[StoreError], bool] | None = None,
    ) -> Landed:
        """Apply ``single`` (or its batchable twin); raises what the single write would have raised."""
        ...

    async def single(self, write: Write) -> Mapping[str, Any] | None:
        """Apply ``write`` alone, now; its ``Attributes``."""
        ...

    async def transact(self, write: Write, entries: Sequence[Mapping[str, Any]]) -> None:
        """Apply ``write`` and ``entries`` all or nothing; a refusal of ``write`` reads as its own."""
        ...


# ── claim ────────────────────────────────────────────────────────────────────────────────────
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
    """Why a claim did not take the job, and the record as it was."""

    reason: ClaimRefusal
    job: Job | None = None


def interpret_claim_refusal(
    error: StoreError, now: float, max_attempts: int, payload_hash: str | None = None
) -> ClaimRefused:
    """Read the record returned with a refused claim (or reject, whose refusals are a subset).

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


def own_claim(write: Write, error: StoreError) -> Job | None:
    """The job, when a refused claim was refused only because this very claim already landed.

    ``ALL_OLD`` then shows this claim's token, which no other claim has.
    """
    if not is_conflict(error):
        return None
    old = old_item(error)
    token = write.value(":token")
    if old is None or old.get("claim_token") != token or old.get("status") != av_s(JobStatus.RUNNING):
        return None
    return job_from_item(old)


def claim_needs_single(error: StoreError, token: str, start_by: float | None = None) -> bool:
    """True when a refused fresh claim says only that the single claim must decide.

    That is: no record yet (the single claim creates it from the message); a waiting record claimed
    before (a retry, released or replayed job: its attempt is not the message's to know), or whose
    deadline is not the message's (``start_by``: another enqueue with the same key); or this very
    claim, landed on a try whose answer was lost (the single claim's refusal shows it as ours).
    Any other refusal (finished, not due, held by another owner, another payload) is read at once.
    """
    old = old_item(error)
    if old is None:
        return error.code == CCF
    status = str_attr(old, "status")
    if status in (JobStatus.QUEUED, JobStatus.RETRY_SCHEDULED):
        stored = num_attr(old, "start_by")
        other_deadline = (stored is None) != (start_by is None) or (
            stored is not None and start_by is not None and round(stored, 3) != round(start_by, 3)
        )
        return (num_attr(old, "lease_epoch") or 0) != 0 or other_deadline
    return status == JobStatus.RUNNING and str_attr(old, "claim_token") == token


def refused_as_expired(error: StoreError, now: float, type_bound_s: float | None) -> float | None:
    """The passed deadline, when a refused claim was refused because the job expired; None otherwise."""
    return deadlines.expired_deadline(old_item(error) if is_conflict(error) else None, now, type_bound_s)


# ── a run's writes ───────────────────────────────────────────────────────────────────────────
def already_written(write: Write, error: StoreError) -> bool:
    """True when a fenced write was refused only because an earlier try of the same write landed."""
    return shows_own_write(write, error)


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


def already_expired(error: StoreError) -> Job | None:
    """The record a refused ``expire`` met, when it is expired already (a copy of the message)."""
    old = old_item(error) if is_conflict(error) else None
    if old is None or str_attr(old, "status") != JobStatus.EXPIRED:
        return None
    return job_from_item(old)


class JobStore:
    """One worker's writes of the state table, applied through ``applier`` (see the module docstring)."""

    def __init__(self, applier: Applier, table: str, owner: str) -> None:
        """``owner``: the worker id every claim writes as ``lease_owner``."""
        self.applier = applier
        self.table = table
        self.owner = owner

    async def claim(
        self,
        envelope: Envelope,
        *,
        token: str,
        message_id: str | None,
        first_delivery: bool,
        now: float,
        lease_s: float,
        max_attempts: int,
        expires_after_s: float | None,
    ) -> tuple[Job, bool]:
        """Claim the job of ``envelope``, batched as a fresh claim when it can be.

        Returns the job, and True when the claim was refused only by its own first try (botocore
        retried a claim whose answer was lost): the job is ours to run, not "held elsewhere".
        Raises any other refusal's ``StoreError``; read it with ``refused_as_expired``, then
        ``interpret_claim_refusal``.
        """
        single, fresh = claims.claims(
            self.table,
            envelope,
            first_delivery=first_delivery,
            clock_skew_s=claims.CLOCK_SKEW_S,
            owner=self.owner,
            token=token,
            message_id=message_id,
            now=now,
            lease_s=lease_s,
            max_attempts=max_attempts,
            expires_after_s=expires_after_s,
        )
        start_by = envelope.start_by

        def needs_single(error: StoreError) -> bool:
            return claim_needs_single(error, token=token, start_by=start_by)

        try:
            landed = await self.applier.write(single, batchable=fresh, needs_single=needs_single)
        except StoreError as exc:
            claimed = own_claim(single, exc)
            if claimed is None:
                raise
            return claimed, True
        if landed.attributes is None and fresh is not None:  # batched: the message has the record
            return claims.claimed_job(envelope, fresh), False
        return job_from_item(landed.attributes or {}), False

    async def heartbeat(self, job: Job, *, now: float, lease_s: float) -> Job:
        """Renew ``job``'s lease; the record as it is now (it shows a cancel request)."""
        write = requests.heartbeat(self.table, job, owner=self.owner, now=now, lease_s=lease_s)
        return job_from_item(await self.applier.single(write) or {})
