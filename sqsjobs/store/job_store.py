"""The state table's operations on one job, and what each refusal means, read once, next to its write.

``JobStore`` applies the writes of the state table's rows (``store/state_table.py``: claim, complete, schedule_retry, fail, abort,
release, heartbeat, reject, expire, keep_payload) through an ``Applier`` — the worker's write batcher
(``store/write_batcher.py``) — and answers ``Landed`` or ``Refused(reason, the record as it was)``.
A refused write returns the record as it was (``ReturnValuesOnConditionCheckFailure=ALL_OLD``), so
reading a refusal costs no request. What is not a refusal (throttling, an outage) is raised as the
``StoreError`` it was: the caller leaves the message for redelivery.

Lost answers: botocore retries a write whose answer was lost with the same parameters. If the first
try landed, the retry is refused by its own result; the record then shows this write's random claim
token (a claim) or nonce (``wid``, every other write), which no other request has — not even a second
claim by the same worker in the same millisecond for a copy of the message (docs/lifecycle.md). Such
a write answers ``Landed(confirmed=True)``.

The operator's transitions (cancel, request_cancel, replay: ``store/operator.py``) and the sweeper's
are sent by request flows with ``store/apply.py``, which answers with the same ``Landed`` and
``Refused`` (defined there); what a refusal means is read next to each write's builder.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from sqsjobs.errors import LeaseLost, StoreError
from sqsjobs.job import Job, JobStatus, Progress
from sqsjobs.store import deadlines, operator, requests, runs
from sqsjobs.store.apply import ClaimRefusal, Landed, Refusal, Refused
from sqsjobs.store.codec import (
    CCF,
    TRANSACTION_CANCELED,
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
    from sqsjobs.job import FailureRecord
    from sqsjobs.store.write import Entry, Write


class Applier(Protocol):
    """Sends writes: alone, batched with others, or in one transaction with other items."""

    async def write(
        self,
        single: Write | Callable[[], Write],
        *,
        batchable: Write | None = None,
        needs_single: Callable[[StoreError], bool] | None = None,
        linger: bool = False,
    ) -> Landed:
        """Apply ``single`` (or its batchable twin); raises what the single write would have raised.

        ``single`` may be what builds it, called only when the single write is sent after all.
        ``linger``: a run's end, which may wait a moment to share a request (nothing waits on it
        but its message's delete).
        """
        ...

    async def single(self, write: Write) -> Mapping[str, Any] | None:
        """Apply ``write`` alone, now; its ``Attributes``."""
        ...

    async def transact(self, write: Write, entries: Sequence[Entry]) -> None:
        """Apply ``write`` and ``entries`` all or nothing; a refusal of ``write`` reads as its own."""
        ...


# ── claim ────────────────────────────────────────────────────────────────────────────────────
def interpret_claim_refusal(
    error: StoreError, now: float, max_attempts: int, payload_hash: str | None = None
) -> Refused:
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
        return Refused(ClaimRefusal.MISSING)
    job = job_from_item(old)
    if payload_hash is not None and job.payload_hash not in (None, payload_hash):
        return Refused(ClaimRefusal.CONFLICT, job)
    if job.status.terminal:
        return Refused(ClaimRefusal.FINISHED, job)
    if job.status is JobStatus.WAITING:  # a chain step or a sleep: what wakes it sends its own message
        return Refused(ClaimRefusal.NOT_DUE, job)
    if job.attempt >= max_attempts:
        lease_live = job.status is JobStatus.RUNNING and (num_attr(old, "lease_expires") or 0) >= now
        return Refused(ClaimRefusal.HELD_ELSEWHERE if lease_live else ClaimRefusal.EXHAUSTED, job)
    if job.status is JobStatus.RUNNING:
        return Refused(ClaimRefusal.HELD_ELSEWHERE, job)
    return Refused(ClaimRefusal.NOT_DUE, job)


def own_claim(write: Write, error: StoreError) -> Job | None:
    """The job, when a refused claim was refused only because this very claim already landed.

    ``ALL_OLD`` then shows this claim's token, which no other claim has.
    """
    token = write.value(":token")
    return _own_claim(token["S"], error) if token is not None else None


def _own_claim(token: str, error: StoreError, message: Envelope | None = None) -> Job | None:
    old = old_item(error) if is_conflict(error) else None
    if old is None or old.get("claim_token") != av_s(token) or old.get("status") != av_s(JobStatus.RUNNING):
        return None
    return job_from_item(old, message)


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
    """One worker's writes of the state table, applied through ``applier`` (see the module docstring).

    Each method raises the ``StoreError`` of what is not a refusal (throttling, an outage).
    """

    def __init__(self, applier: Applier, table: str, owner: str) -> None:
        """``owner``: the worker id every claim writes as ``lease_owner``."""
        self.applier = applier
        self.table = table
        self.owner = owner

    # ── claim ─────────────────────────────────────────────────────────────────────────────
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
        type_bound_s: float | None = None,
    ) -> Landed | Refused:
        """Claim the job of ``envelope``, batched as a fresh claim when it can be.

        Every claim refuses a job that never started and whose deadline passed — the record's
        ``start_by``, or without one its ``created_at`` plus ``type_bound_s``, the type's
        ``expires_after`` (``runs.claim_guard``) — whatever the message shows:
        ``Refused(Refusal.EXPIRED, deadline=...)``. ``Landed(job=...)``: the
        job is this run's, with the payload the message carries (the record keeps only its hash) (``confirmed``: botocore retried a claim whose answer was lost, and the
        first try took it). Any other refusal is a ``ClaimRefusal``: the record decides what the
        message is worth.
        """
        args: dict[str, Any] = {
            "owner": self.owner,
            "token": token,
            "message_id": message_id,
            "now": now,
            "lease_s": lease_s,
            "max_attempts": max_attempts,
        }
        own = runs.claim_guard(now=now, type_bound_s=type_bound_s)
        guards = (own,)
        fresh_guards = (
            runs.fresh_claim_guard(envelope, now=now, type_bound_s=type_bound_s, values=own.values),
        )
        fresh = None
        # Only a first delivery of a version 2 message is worth a fresh claim: a redelivered message
        # is usually a retry, whose attempt and history are the record's (its fresh claim would be refused).
        if first_delivery and envelope.has_payload:
            fresh = runs.fresh_claim(
                self.table, envelope, clock_skew_s=runs.CLOCK_SKEW_S, guards=fresh_guards, **args
            )

        def single() -> Write:  # built only when it is sent: a fresh claim usually lands alone
            return runs.claim(self.table, envelope, guards=guards, **args)

        def needs_single(error: StoreError) -> bool:
            return claim_needs_single(error, token=token, start_by=envelope.start_by)

        try:
            landed = await self.applier.write(
                single if fresh is not None else single(), batchable=fresh, needs_single=needs_single
            )
        except StoreError as exc:
            claimed = _own_claim(token, exc, envelope)
            if claimed is not None:
                return Landed(job=claimed, confirmed=True)
            if not is_conflict(exc):
                raise
            old = old_item(exc)
            passed = deadlines.expired_deadline(old, now, type_bound_s)
            if passed is not None:
                return Refused(Refusal.EXPIRED, job_from_item(old) if old else None, exc, deadline=passed)
            refused = interpret_claim_refusal(exc, now, max_attempts, envelope.payload_hash)
            return Refused(refused.reason, refused.job, exc)
        if landed.attributes is None and fresh is not None:  # batched: the message has the record
            return Landed(job=job_from_item(runs.claimed_item(envelope, fresh), envelope))
        return Landed(landed.attributes, job_from_item(landed.attributes or {}, envelope))

    # ── a run's writes, fenced by its claim ────────────────────────────────────────────────
    async def complete(
        self,
        job: Job,
        *,
        now: float,
        result: Any,
        retention_s: float,
        result_ref: str | None = None,
        entries: Sequence[Entry] = (),
    ) -> Landed | Refused:
        """Running → succeeded (``entries``: what commits with it, in one transaction)."""
        write = runs.complete(
            self.table,
            job,
            owner=self.owner,
            now=now,
            result=result,
            retention_s=retention_s,
            result_ref=result_ref,
        )
        return await self._fenced(job, write, entries)

    async def schedule_retry(
        self,
        job: Job,
        *,
        now: float,
        run_at: float,
        error: FailureRecord,
        held: bool,
        payload: Any = None,
        entries: Sequence[Entry] = (),
    ) -> Landed | Refused:
        """Running → retry_scheduled (``held``: the record keeps the job, see ``runs.schedule_retry``)."""
        write = runs.schedule_retry(
            self.table, job, owner=self.owner, now=now, run_at=run_at, error=error, held=held, payload=payload
        )
        return await self._fenced(job, write, entries)

    async def fail(
        self,
        job: Job,
        *,
        now: float,
        error: FailureRecord,
        reason: str,
        retention_s: float,
        payload: Any = None,
        entries: Sequence[Entry] = (),
    ) -> Landed | Refused:
        """Running → dead."""
        write = runs.fail(
            self.table,
            job,
            owner=self.owner,
            now=now,
            error=error,
            reason=reason,
            retention_s=retention_s,
            payload=payload,
        )
        return await self._fenced(job, write, entries)

    async def abort(
        self,
        job: Job,
        *,
        now: float,
        reason: str,
        retention_s: float,
        payload: Any = None,
        entries: Sequence[Entry] = (),
    ) -> Landed | Refused:
        """Running → cancelled (the handler stopped on a cancel request)."""
        write = runs.abort(
            self.table,
            job,
            owner=self.owner,
            now=now,
            reason=reason,
            retention_s=retention_s,
            payload=payload,
        )
        return await self._fenced(job, write, entries)

    async def release(self, job: Job, *, now: float, entries: Sequence[Entry] = ()) -> Landed | Refused:
        """Running → queued, the attempt given back (shutdown, or a payload newer than the code)."""
        write = requests.release(self.table, job, owner=self.owner, now=now)
        return await self._fenced(job, write, entries)

    async def expire_claimed(
        self,
        job: Job,
        *,
        now: float,
        reason: str,
        retention_s: float,
        entries: Sequence[Entry] = (),
    ) -> Landed | Refused:
        """Running → expired, the attempt given back: claimed ahead of a slot, its deadline passed first."""
        write = requests.expire_claimed(
            self.table, job, owner=self.owner, now=now, reason=reason, retention_s=retention_s
        )
        return await self._fenced(job, write, entries)

    async def transition(self, job: Job, write: Write, *, entries: Sequence[Entry] = ()) -> Landed | Refused:
        """A feature's own fenced transition of a run (a durable sleep), read alike as the kernel's."""
        return await self._fenced(job, write, entries)

    async def _fenced(self, job: Job, write: Write, entries: Sequence[Entry]) -> Landed | Refused:
        """Apply a fenced write; its refusals read alike for every transition of a run.

        Refused only by its own earlier try (the record shows this write's nonce): ``confirmed``.
        Refused otherwise: ``LEASE_LOST`` (another run owns the job, or it is gone).
        """
        try:
            if entries:
                await self.applier.transact(write, entries)
            else:
                await self.applier.write(write, linger=True)
        except StoreError as exc:
            if already_written(write, exc):
                return Landed(confirmed=True)
            if not is_conflict(exc):
                raise
            old = old_item(exc)
            lost = lease_lost(job, exc)
            return Refused(Refusal.LEASE_LOST, job_from_item(old) if old else None, exc, str(lost))
        return Landed()

    async def heartbeat(
        self,
        job: Job,
        *,
        now: float,
        lease_s: float,
        progress: Progress | None = None,
        notes: Mapping[str, Any] | None = None,
    ) -> Landed | Refused:
        """Renew ``job``'s lease; ``Landed(job=...)`` is the record as it is now (it shows a cancel request).

        ``progress``: the handler's latest report, and ``notes`` a watch's (``RunWatch``), written by
        the same write. ``MOVED_ON``: the
        owner's own outcome landed while the renewal was in flight (expected); ``LEASE_LOST``:
        another run owns the job.
        """
        write = requests.heartbeat(
            self.table, job, owner=self.owner, now=now, lease_s=lease_s, progress=progress, notes=notes
        )
        try:
            attributes = await self.applier.single(write)
        except StoreError as exc:
            if moved_on_by_owner(job, exc):
                return Refused(Refusal.MOVED_ON, job_from_item(old_item(exc) or {}), exc)
            if not is_conflict(exc):
                raise
            old = old_item(exc)
            lost = lease_lost(job, exc)
            return Refused(Refusal.LEASE_LOST, job_from_item(old) if old else None, exc, str(lost))
        return Landed(attributes, job_from_item(attributes or {}))

    # ── transitions without a run ──────────────────────────────────────────────────────────
    async def reject(
        self,
        envelope: Envelope,
        *,
        now: float,
        error: FailureRecord,
        reason: str,
        retention_s: float,
        entries: Sequence[Entry] = (),
    ) -> Landed | Refused:
        """A job that must not run → dead, unclaimed (``requests.reject``).

        A reject is refused only by a finished job or a live lease (no attempt bound applies): its
        refusal reads as a claim's with no attempt left (``FINISHED``, ``HELD_ELSEWHERE``...).
        """
        write = requests.reject(
            self.table, envelope, now=now, error=error, reason=reason, retention_s=retention_s
        )
        try:
            await self._unrun(write, entries)
        except StoreError as exc:
            if not is_conflict(exc):
                raise
            refused = interpret_claim_refusal(exc, now, max_attempts=0)
            return Refused(refused.reason, refused.job, exc)
        return Landed()

    async def expire(
        self,
        envelope: Envelope,
        *,
        now: float,
        reason: str,
        retention_s: float,
        type_bound_s: float | None,
        entries: Sequence[Entry] = (),
    ) -> Landed | Refused:
        """Queued (never started, deadline passed) → expired, unclaimed (``deadlines.expire``).

        ``ALREADY_EXPIRED``: a copy of the message met the record expired before; ``NOT_EXPIRED``:
        the record is not expired (its own deadline, started already, finished): the claim decides.
        """
        write = deadlines.expire(
            self.table, envelope, now=now, reason=reason, retention_s=retention_s, type_bound_s=type_bound_s
        )
        try:
            await self._unrun(write, entries)
        except StoreError as exc:
            if exc.code == TRANSACTION_CANCELED:  # an entry committed with it was refused: nothing landed
                return Refused(Refusal.ENTRY_REFUSED, None, exc)
            if not is_conflict(exc):
                raise
            expired = already_expired(exc)
            if expired is not None:
                return Refused(Refusal.ALREADY_EXPIRED, expired, exc)
            old = old_item(exc)
            return Refused(Refusal.NOT_EXPIRED, job_from_item(old) if old else None, exc)
        return Landed()

    async def _unrun(self, write: Write, entries: Sequence[Entry]) -> None:
        """A transition without a run: alone, or with ``entries`` under a write id of its own."""
        if entries:
            await self.applier.transact(requests.with_write_id(write), entries)
        else:
            await self.applier.single(write)

    async def keep_payload(self, job_id: str, *, payload: Any, now: float) -> Landed | Refused:
        """Keep the payload of a job cancelled while it waited (its message is about to go).

        ``CHANGED``: kept already, or retried meanwhile; nothing is lost.
        """
        write = operator.keep_payload(self.table, job_id, payload=payload, now=now)
        try:
            await self.applier.single(write)
        except StoreError as exc:
            if not is_conflict(exc):
                raise
            old = old_item(exc)
            return Refused(Refusal.CHANGED, job_from_item(old) if old else None, exc)
        return Landed()
