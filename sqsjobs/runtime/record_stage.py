"""The record stage: a job's end written through the ``JobStore``, with what the finish hooks add.

Every end of a job goes through here, run or not: a run's outcome (succeeded, retry, dead,
cancelled, released), a job rejected without a run, a job expired instead of claimed. Each is one
fenced transition of the state table; the finish hooks of the features the job belongs to
(``Kernel.concerned``: a batch item's counter, a chain's next step, a limit's slot) add the entries
that commit with it in one ``TransactWriteItems`` and hear of it once it landed. A finish no hook
claims pays nothing: it stays the single (or batched) write of the happy path.

What a failed attempt becomes (retried, dead or cancelled) is decided once, here
(``judge_failure``), by the job type's policy; ``sqsjobs.testing.run_job`` applies the same rule.

The record is written before the message is touched: each method answers the ``Ack`` the message
is worth now, and LEAVE when the write could not be made (the message comes back, the lease
expires, the job reruns). A retry that would outlive its message (SQS drops a message
``message_retention_s`` after its first send, and a re-arm does not renew it) becomes a held record
the sweeper sends when due, as a retry past the 12 h visibility cap does.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from sqsjobs.delivery import DELETE, LEAVE, RELEASE, Ack, Finish, dead_letter, failure_record
from sqsjobs.errors import AwsError, Cancel, PayloadInvalid, PermanentError, Retry, StoreError
from sqsjobs.job import AttemptOutcome, JobStatus
from sqsjobs.observability.metrics import DEAD, EXPIRED, on_transition
from sqsjobs.observability.tracing import trace_id
from sqsjobs.retry import decide
from sqsjobs.store import yielded as yielded_note
from sqsjobs.store.apply import ClaimRefusal, Landed, Refusal, Refused, apply
from sqsjobs.store.codec import job_from_item, record_of
from sqsjobs.transport import lifespan, sqs

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

    from sqsjobs.delivery import Delivery
    from sqsjobs.envelope import Envelope
    from sqsjobs.job import FailureRecord, Job
    from sqsjobs.registry import HandlerSpec
    from sqsjobs.runtime.kernel import Kernel
    from sqsjobs.runtime.seams import FinishHook
    from sqsjobs.store.deadlines import ExpireInstead
    from sqsjobs.store.job_store import JobStore
    from sqsjobs.store.write import Entry


@dataclass(frozen=True)
class Verdict:
    """What a failed attempt becomes: the transition the worker records for it."""

    #: ``retry``: runs again after ``delay_s``; ``dead``: to the DLQ; ``cancelled``: stopped for good.
    outcome: Literal["retry", "dead", "cancelled"]
    #: The record's ``reason`` (dead or cancelled).
    reason: str = ""
    delay_s: float = 0.0


def judge_failure(spec: HandlerSpec, job: Job, exc: BaseException, *, now: float) -> Verdict:
    """Map a handler's exception to its job's next state; the one place the worker decides it.

    ``Cancel`` stops the job; ``PermanentError`` and ``PayloadInvalid`` kill it at once; anything
    else (a timeout, ``Retry`` with its delay) is retried by the job type's policy until the
    attempts or its max age run out. The bound is the type's (``spec``), never a producer's
    guess. Pure, so ``sqsjobs.testing.run_job`` reuses it.
    """
    if isinstance(exc, Cancel):
        return Verdict("cancelled", reason=str(exc))
    if isinstance(exc, PermanentError | PayloadInvalid):
        return Verdict("dead", reason="permanent error")
    decision = decide(
        spec.retry,
        attempt=job.attempt,
        max_attempts=spec.max_attempts,
        created_at=job.created_at.timestamp(),
        now=now,
        requested_delay_s=exc.delay_s if isinstance(exc, Retry) else None,
    )
    if decision is None:
        exhausted = job.attempt >= spec.max_attempts
        reason = (
            f"attempts exhausted ({job.attempt}/{spec.max_attempts})" if exhausted else "max age exceeded"
        )
        return Verdict("dead", reason=reason)
    return Verdict("retry", delay_s=decision.delay_s)


def unrun(envelope: Envelope, outcome: AttemptOutcome, error: FailureRecord | None = None) -> Finish | None:
    """A job ended without a run (rejected: dead; expired), as a finish its batch or chain must hear of.

    None for a message without the job's fields (version 1): it does not describe the job.
    """
    if not envelope.has_payload:
        return None
    return Finish(job_from_item(record_of(envelope)), outcome, error=error)


async def commit(
    hooks: Sequence[FinishHook],
    finish: Finish | None,
    transition: Callable[[Sequence[Entry]], Awaitable[Landed | Refused]],
) -> Landed | Refused:
    """Apply ``transition`` with what ``hooks`` add for ``finish``; they hear of it once it landed.

    A ``StoreError`` is raised as the transition raised it. The sweeper's expire uses this too, so
    a job that ends without a worker ends its batch item or chain step the same way.
    """
    entries = (
        [e for hook in hooks for e in await hook.entries(finish)] if finish is not None and hooks else []
    )
    outcome = await transition(entries)
    if finish is not None and isinstance(outcome, Landed):
        for hook in hooks:
            await hook.landed(finish)
    return outcome


def finish_hooks(kernel: Kernel, job: Job) -> list[FinishHook]:
    """The finish hooks of the features ``job`` belongs to, in plug-in order."""
    return kernel.concerned(kernel.finish_hooks, job.type, job)


class Recorder:
    """Writes a job's end for one worker and says what its message is worth (see the module docstring)."""

    def __init__(
        self, kernel: Kernel, worker_id: str, store: JobStore, hooks: Sequence[FinishHook] | None = None
    ) -> None:
        """``hooks``: every finish's hooks instead of the kernel's (a test's own)."""
        self.kernel = kernel
        self.worker_id = worker_id
        self.store = store
        self._hooks = None if hooks is None else tuple(hooks)

    def hooks(self, job: Job) -> Sequence[FinishHook]:
        """The finish hooks ``job`` concerns."""
        return self._hooks if self._hooks is not None else finish_hooks(self.kernel, job)

    async def yielded(self, job_id: str, reason: str) -> None:
        """A serialized job gave up its place in its key: its record says when and why (``store/yielded.py``).

        One conditional write on a job still waiting to start; a failure is logged, never raised
        (the job itself is safe either way: only the note is missing).
        """
        kernel = self.kernel
        write = yielded_note.yielded(
            kernel.settings.table_name, job_id, reason=reason, now=kernel.clock.now()
        )
        try:
            noted = await kernel.arun(apply(write))
        except AwsError as exc:
            kernel.logger.warning("order_yielded not noted", extra={"job_id": job_id, "error": str(exc)})
            return
        if isinstance(noted, Refused):  # started or ended since
            return
        kernel.logger.warning(
            "serialized job yields its place in its key", extra={"job_id": job_id, "reason": reason}
        )

    def log(
        self,
        event: str,
        job: Job,
        status: JobStatus | None = None,
        exception: BaseException | None = None,
        **fields: Any,
    ) -> None:
        """One JSON line per transition; the same fields feed the metrics and the job's trace span.

        ``status``: the state the transition left the job in, when ``job`` is as it was before it;
        ``exception``: what failed the attempt (the span records it; the line has its class).
        """
        kernel = self.kernel
        if (
            fields.get("outcome") not in (None, AttemptOutcome.STARTED)
            and "duration_s" not in fields
            and job.started_at
        ):
            fields["duration_s"] = round(kernel.clock.now() - job.started_at.timestamp(), 4)
        kernel.logger.info(
            event,
            extra={
                "job_id": job.id,
                "job_type": job.type,
                "queue": job.queue,
                "attempt": job.attempt,
                "status": str(status or job.status),
                "tenant": job.tenant,
                "trace_id": trace_id(job.trace) if job.trace else None,
                "worker": self.worker_id,
                **fields,
            },
        )
        on_transition(kernel.metrics, job, fields, exception)

    async def write(
        self, job: Job, transition: Callable[..., Awaitable[Landed | Refused]], finish: Finish | None = None
    ) -> bool:
        """A fenced transition; False (logged) when the lease is gone or DynamoDB did not answer.

        With a ``finish``, the hooks' entries commit in one transaction with it, and the hooks hear
        of it once it landed.
        """
        try:
            outcome = await commit(self.hooks(job) if finish else (), finish, lambda e: transition(entries=e))
        except StoreError as exc:
            # The message comes back after its visibility timeout and the lease expires: the job reruns.
            self.kernel.logger.error("could not record outcome", extra={"job_id": job.id, "error": str(exc)})
            return False
        if isinstance(outcome, Refused):  # LEASE_LOST (JobStore reads it)
            self.kernel.logger.warning(
                "write refused: lease lost", extra={"job_id": job.id, "error": outcome.detail}
            )
            return False
        if outcome.confirmed:  # botocore retried after a lost answer; the first try landed
            self.kernel.logger.info("write confirmed after a lost answer", extra={"job_id": job.id})
        return True

    # ── a run's ends ──────────────────────────────────────────────────────────────────────
    async def release(self, job: Job) -> bool:
        """Running → queued, attempt kept (a shutdown, a payload version this worker cannot read)."""
        release = functools.partial(self.store.release, job, now=self.kernel.clock.now())
        return await self.write(job, release, Finish(job, AttemptOutcome.RELEASED))

    async def succeeded(self, job: Job, value: Any, ref: str | None, duration: float) -> Ack:
        """The handler returned: ``value`` (or its S3 object ``ref``) is the job's result."""
        params = functools.partial(
            self.store.complete,
            job,
            now=self.kernel.clock.now(),
            result=value,
            result_ref=ref,
            retention_s=self.kernel.kept_for(job.type, JobStatus.SUCCEEDED),
        )
        if not await self.write(
            job, params, Finish(job, AttemptOutcome.SUCCEEDED, result=value, result_ref=ref)
        ):
            return LEAVE
        self.log(
            "job succeeded",
            job,
            status=JobStatus.SUCCEEDED,
            duration_s=duration,
            outcome=AttemptOutcome.SUCCEEDED,
        )
        return DELETE

    async def failed(self, spec: HandlerSpec, job: Job, exc: BaseException, delivery: Delivery | None) -> Ack:
        """The attempt failed: retried, dead or cancelled, as ``judge_failure`` says."""
        now = self.kernel.clock.now()
        queue = delivery.queue if delivery else job.queue
        verdict = judge_failure(spec, job, exc, now=now)
        if verdict.outcome == "cancelled":
            return await self.abort(job, verdict.reason)
        if verdict.outcome == "dead":
            return await self.dead(job, exc, reason=verdict.reason, queue=queue)
        held = (verdict.delay_s > sqs.MAX_VISIBILITY_S and not lifespan.in_key(delivery)) or self.outlives(
            delivery, now + verdict.delay_s
        )
        error = failure_record(exc)
        params = functools.partial(
            self.store.schedule_retry,
            job,
            now=now,
            run_at=now + verdict.delay_s,
            error=error,
            held=held,
            payload=job.payload,
        )
        if not await self.write(job, params, Finish(job, AttemptOutcome.RETRY, error=error)):
            return LEAVE
        if held and job.serialize_key is not None:  # its message goes: the key's later jobs go first
            await self.yielded(job.id, "retries after its message would have expired: its key went on")
        self.log(
            "job retry scheduled",
            job,
            status=JobStatus.RETRY_SCHEDULED,
            delay_s=round(verdict.delay_s, 3),
            error=error.error_class,
            outcome=AttemptOutcome.RETRY,
            exception=exc,
        )
        # Retries re-arm the same message, so its receive count keeps meaning something; beyond the
        # 12 h cap, or past the message's own expiry, the record holds the job and the sweeper
        # sends it when due — except past the cap on a FIFO queue, where the message keeps the
        # job's place in its key (re-armed to the cap, then held until due: ``lifespan.in_key``).
        return DELETE if held else Ack("rearm", delay_s=sqs.clamp_visibility(verdict.delay_s))

    def outlives(self, delivery: Delivery | None, wake_at: float) -> bool:
        """True when a re-arm of ``delivery`` until ``wake_at`` would pass the message's expiry.

        SQS deletes a message ``message_retention_s`` after its first send, whatever its visibility;
        a margin of one visibility timeout leaves the woken message time to be claimed.
        """
        return delivery is not None and lifespan.outlives(self.kernel.settings, delivery.sent_at, wake_at)

    async def dead(self, job: Job, exc: BaseException, *, reason: str, queue: str) -> Ack:
        """The job cannot succeed: dead, and its message to the DLQ."""
        error = failure_record(exc)
        params = functools.partial(
            self.store.fail,
            job,
            now=self.kernel.clock.now(),
            error=error,
            reason=reason,
            retention_s=self.kernel.kept_for(job.type, JobStatus.DEAD),
            payload=job.payload,
        )
        if not await self.write(job, params, Finish(job, AttemptOutcome.DEAD, error=error)):
            return LEAVE
        self.log(
            "job dead",
            job,
            status=JobStatus.DEAD,
            reason=reason,
            error=error.error_class,
            outcome=AttemptOutcome.DEAD,
            exception=exc,
        )
        return dead_letter(reason, job_id=job.id, job_type=job.type, error=error, queue=queue)

    async def abort(self, job: Job, reason: str) -> Ack:
        """The job was cancelled (a ``Cancel``, or a cancel request its run heard)."""
        params = functools.partial(
            self.store.abort,
            job,
            now=self.kernel.clock.now(),
            reason=reason,
            retention_s=self.kernel.kept_for(job.type, JobStatus.CANCELLED),
            payload=job.payload,
        )
        return await self._ended(
            job, params, "job cancelled", JobStatus.CANCELLED, AttemptOutcome.CANCELLED, reason
        )

    async def expire_claimed(self, job: Job, reason: str) -> Ack:
        """Claimed ahead of a free slot, its deadline passed first: expired unrun, the message deleted."""
        params = functools.partial(
            self.store.expire_claimed,
            job,
            now=self.kernel.clock.now(),
            reason=reason,
            retention_s=self.kernel.kept_for(job.type, JobStatus.EXPIRED),
        )
        return await self._ended(
            job, params, "job expired", JobStatus.EXPIRED, AttemptOutcome.EXPIRED, reason
        )

    async def _ended(
        self,
        job: Job,
        params: Callable[..., Awaitable[Landed | Refused]],
        line: str,
        status: JobStatus,
        outcome: AttemptOutcome,
        reason: str,
    ) -> Ack:
        """A fenced end with no result and nothing to retry: written, logged, the message deleted."""
        if not await self.write(job, params, Finish(job, outcome)):
            return LEAVE
        self.log(line, job, status=status, reason=reason, outcome=outcome)
        return DELETE

    async def shutdown_release(self, job: Job) -> Ack:
        """A shutdown interrupted the run: released, the message visible again at once."""
        if not await self.release(job):
            return LEAVE
        self.log("job released", job)
        return RELEASE

    # ── ends without a run ────────────────────────────────────────────────────────────────
    async def reject(self, envelope: Envelope, delivery: Delivery, exc: Exception, *, reason: str) -> Ack:
        """Dead without a claim: the record says why, the message goes to the DLQ."""
        error = failure_record(exc)
        now = self.kernel.clock.now()
        dead = unrun(envelope, AttemptOutcome.DEAD, error=error)
        try:  # a batch item's reject counts like its finish, a chain step's stops its chain
            rejected = await commit(
                self.hooks(dead.job) if dead else (),
                dead,
                lambda entries: self.store.reject(
                    envelope,
                    now=now,
                    error=error,
                    reason=reason,
                    retention_s=self.kernel.kept_for(envelope.job_type, JobStatus.DEAD),
                    entries=entries,
                ),
            )
        except StoreError:
            return LEAVE
        if isinstance(rejected, Refused):  # read by JobStore.reject
            if (
                rejected.reason is ClaimRefusal.FINISHED
                and rejected.job
                and rejected.job.status is not JobStatus.DEAD
            ):  # a cancelled job's payload is kept all the same: a retry may run it with other code
                return await self.finished_copy(rejected.job, envelope, delivery)
            if rejected.reason in (ClaimRefusal.HELD_ELSEWHERE, ClaimRefusal.NOT_DUE):
                return DELETE  # a live run decides, or what wakes a waiting job sends it a message
        self.kernel.logger.warning(
            "job rejected", extra={"job_id": envelope.job_id, "job_type": envelope.job_type, "reason": reason}
        )
        self.kernel.metrics.count(DEAD, envelope.job_type)
        return dead_letter(
            reason, job_id=envelope.job_id, job_type=envelope.job_type, error=error, queue=delivery.queue
        )

    async def finished_copy(self, job: Job, envelope: Envelope, delivery: Delivery) -> Ack:
        """A copy of a finished job's message: delete it, after keeping what a retry would need."""
        cancelled_unkept = (
            job.status is JobStatus.CANCELLED and job.payload_in_message_only and envelope.has_payload
        )
        if cancelled_unkept:  # the message of a job cancelled while it waited: keep its payload
            try:
                kept = await self.store.keep_payload(
                    job.id, payload=envelope.payload, now=self.kernel.clock.now()
                )
            except StoreError:
                return LEAVE  # not kept (DynamoDB unreachable): the message comes back, try again
            if isinstance(kept, Refused):
                # Kept already by a copy, or retried since we read it: a retry of a job whose payload
                # is only here sends no hint, so this message is its witness. Visible again at once:
                # the next receive claims it, or meets the finished record again and deletes it.
                return RELEASE
        if job.status is JobStatus.DEAD:
            # The record died but this copy survived (a crash between the record and the DLQ send,
            # or a duplicate): make sure the DLQ has it.
            return dead_letter(
                job.reason or "dead",
                job_id=job.id,
                job_type=job.type,
                error=job.last_error,
                queue=delivery.queue,
            )
        return DELETE

    async def expire(
        self, envelope: Envelope, delivery: Delivery, now: float, instead: ExpireInstead
    ) -> Ack | None:
        """Expire the job of ``delivery`` instead of claiming it: DELETE once the record says ``expired``.

        The message is deleted, not dead-lettered: expiry is an outcome the producer asked for, not an
        error an operator must look at. None when the record refused because it is not expired
        (another deadline of its own, started already, finished): the claim then decides what the
        message is worth, as for any delivery. LEAVE when DynamoDB did not answer.
        """
        kernel = self.kernel
        finish = unrun(envelope, AttemptOutcome.EXPIRED)
        try:  # a batch item's expiry counts on its batch, a chain step's stops its chain
            expired = await commit(
                self.hooks(finish.job) if finish else (),
                finish,
                lambda entries: self.store.expire(
                    envelope,
                    now=now,
                    reason=instead.reason,
                    retention_s=kernel.kept_for(envelope.job_type, JobStatus.EXPIRED),
                    type_bound_s=instead.type_bound_s,
                    entries=entries,
                ),
            )
        except StoreError as exc:
            kernel.logger.warning(
                "expire failed, message left for redelivery",
                extra={"job_id": envelope.job_id, "error": str(exc)},
            )
            return LEAVE
        if isinstance(expired, Refused):  # read by JobStore.expire
            if expired.reason is Refusal.ENTRY_REFUSED:  # a hook's entry (its chain moved on): read it again
                return LEAVE
            return DELETE if expired.reason is Refusal.ALREADY_EXPIRED else None
        kernel.logger.info(
            "job expired",
            extra={
                "job_id": envelope.job_id,
                "job_type": envelope.job_type,
                "queue": delivery.queue,
                "tenant": envelope.tenant,
                "status": "expired",
                "reason": instead.reason,
                "late_s": round(now - instead.deadline, 3),
            },
        )
        kernel.metrics.count(EXPIRED, envelope.job_type, envelope.tenant)
        return DELETE
