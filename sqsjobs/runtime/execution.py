"""Handle one delivery: claim → run → record → ack. Shared by the ECS worker and the Lambda adapter.

Delivery is at least once: SQS may hand the same message out twice, late, or after the job is
finished. None of that matters here, because ownership comes only from the conditional claim in
DynamoDB: a message whose claim is refused is deleted, re-armed or dead-lettered according to
the record it found, and never runs the handler. A handler can still run twice for one job when a
worker loses its lease mid-run (it crashed, stalled past the lease, or its sync thread outlived a
timeout); every write of the stale run is then refused (``LeaseLost``), and handlers that pass
``ctx.fencing_token`` to their own writes can refuse its side effects too.

The record is always written before the message is touched: ``Execution.handle`` returns an
``Ack`` saying what to do with the message, and its host (``runtime/host.py``) applies it.
Features take part through the kernel's seams (``runtime/seams.py``), never by name: a message
kind handles its envelopes whole, admission guards run before the claim, run preparations fill
the handler's context, finish hooks write with each finish.
"""

from __future__ import annotations

import asyncio
import functools
from typing import TYPE_CHECKING, Any

from sqsjobs import envelope as env
from sqsjobs.context import InterruptReason, JobContext
from sqsjobs.delivery import DELETE, LEAVE, RELEASE, Ack, Finish, dead_letter, failure_record
from sqsjobs.errors import (
    Cancel,
    EnvelopeError,
    HandlerNotFound,
    ObjectStoreError,
    PayloadInvalid,
    PayloadMissing,
    StoreError,
    WorkerLost,
)
from sqsjobs.job import AttemptOutcome, JobStatus
from sqsjobs.observability.metrics import DEAD, on_transition
from sqsjobs.observability.tracing import trace_id
from sqsjobs.runtime import payloads
from sqsjobs.runtime.expiry import expire_delivery
from sqsjobs.runtime.hooks import commit_unrun, entries_of, tell_landed, unrun
from sqsjobs.runtime.kernel import kernel_of
from sqsjobs.runtime.transitions import Transitions
from sqsjobs.runtime.verdict import invoke, judge_failure, timeout_error
from sqsjobs.store import codec, deadlines
from sqsjobs.store.job_store import ClaimRefusal, JobStore, Refusal, Refused
from sqsjobs.transport import sqs

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterable, Sequence
    from concurrent.futures import ThreadPoolExecutor

    from sqsjobs.delivery import Delivery
    from sqsjobs.job import Job
    from sqsjobs.registry import HandlerSpec
    from sqsjobs.runtime.kernel import Kernel, SupportsKernel
    from sqsjobs.runtime.seams import FinishHook
    from sqsjobs.store.job_store import Landed

#: A worker that sees a payload version newer than its handler's parks the message this long.
NEWER_VERSION_PARK_S = 60
#: A message waiting for another owner's lease comes back this long after the lease expires, so the
#: rescue claim is not refused by a clock a little behind the owner's.
LEASE_EXPIRY_MARGIN_S = 1.0


class Execution:
    """Runs deliveries for one worker (``worker_id`` is the lease owner it writes)."""

    def __init__(
        self,
        app: Kernel | SupportsKernel,
        worker_id: str,
        *,
        pool: ThreadPoolExecutor | None = None,
        on_run: Callable[[JobContext], None] | None = None,
        on_done: Callable[[JobContext], None] | None = None,
        default_timeout_s: Callable[[], float] | None = None,
        hooks: Sequence[FinishHook] | None = None,
    ) -> None:
        """``default_timeout_s``: the timeout of a run whose type has none of its own, asked as it starts.

        The Lambda adapter answers with the invocation's remaining time (less its margin), so such a
        job runs there instead of waiting for an invocation as long as ``DEFAULT_TIMEOUT_S`` (the
        answer when None).
        """
        #: The kernel (an App given here is asked for its own).
        self.app = kernel = kernel_of(app)
        self.worker_id = worker_id
        self._pool = pool
        self._on_run = on_run
        self._on_done = on_done
        self._default_timeout_s = default_timeout_s
        #: Claims and finishes go through it: what is ready at one instant leaves in one request.
        self.transitions = Transitions(kernel.arun, batch=kernel.settings.batch_writes, logger=kernel.logger)
        #: The state table's operations, applied through ``transitions``.
        self.store = JobStore(self.transitions, kernel.settings.table_name, worker_id)
        #: What else each finish writes (the plug-ins' finish hooks, in order: ``runtime/hooks.py``).
        self._hooks = kernel.finish_hooks if hooks is None else list(hooks)
        #: Checked before the claim, in plug-in order (pause, limits and breakers).
        self._guards = kernel.guards

    @property
    def _table(self) -> str:
        return self.app.settings.table_name

    def _log(self, event: str, job: Job, **fields: Any) -> None:
        """One JSON line per transition; the same fields feed the metrics and the job's trace span."""
        if (
            fields.get("outcome") not in (None, AttemptOutcome.STARTED)
            and "duration_s" not in fields
            and job.started_at
        ):
            fields["duration_s"] = round(self.app.clock.now() - job.started_at.timestamp(), 4)
        self.app.logger.info(
            event,
            extra={
                "job_id": job.id,
                "job_type": job.type,
                "queue": job.queue,
                "attempt": job.attempt,
                "status": str(job.status),
                "tenant": job.tenant,
                "trace_id": trace_id(job.trace),
                "worker": self.worker_id,
                **fields,
            },
        )
        on_transition(self.app.metrics, job, fields)

    # ── the whole path for one message ─────────────────────────────────────────────────────
    async def handle(self, delivery: Delivery) -> Ack:
        """Decide and record the fate of one delivery; never raises for bad input."""
        try:
            envelope = env.parse(delivery.body)
        except EnvelopeError as exc:
            self.app.logger.warning("message rejected", extra={"queue": delivery.queue, "reason": str(exc)})
            return dead_letter(f"malformed message: {exc}", error=failure_record(exc), queue=delivery.queue)
        if not isinstance(envelope, env.Envelope):  # a schedule fire, a foreign message: a plug-in's kind
            return await self._other_kind(envelope, delivery)
        try:
            spec = self.app.registry.get(envelope.job_type)
        except HandlerNotFound as exc:
            return await self._reject(
                envelope, delivery, exc, reason=f"unknown job type {envelope.job_type!r}"
            )

        now = self.app.clock.now()
        bound, deadline = spec.expires_after_s, deadlines.message_deadline(envelope, spec.expires_after_s)
        if deadline is not None and deadline < now:  # expired: no claim (store/deadlines.py)
            ack = await expire_delivery(
                self.app,
                self.store,
                envelope,
                delivery,
                now=now,
                deadline=deadline,
                type_bound_s=bound,
                hooks=self._hooks,
            )
            if ack is not None:
                return ack
        admitted = await self._admit(spec, envelope, delivery)
        if isinstance(admitted, Ack):
            return admitted
        now = admitted if admitted is not None else self.app.clock.now()  # a rate limit logged this start
        try:
            claimed = await self.store.claim(
                envelope,
                token=codec.nonce(),
                message_id=delivery.message_id,
                first_delivery=delivery.receive_count <= 1,
                now=now,
                lease_s=max(self.app.settings.lease_s, 1.0),
                max_attempts=spec.max_attempts,
                expires_after_s=bound,
            )
        except StoreError as exc:  # not a refusal: throttled, or DynamoDB did not answer
            for guard in self._guards:  # not claimed: free what the admission took (limit slots) now
                await guard.give_back(envelope.job_id)
            self.app.logger.warning(
                "claim failed, message left for redelivery",
                extra={"job_id": envelope.job_id, "error": str(exc)},
            )
            return LEAVE
        if isinstance(claimed, Refused):  # read by JobStore.claim (not by its own landed try)
            for guard in self._guards:  # not claimed: free what the admission took (limit slots) now
                await guard.give_back(envelope.job_id)
            if claimed.reason is Refusal.EXPIRED and claimed.deadline is not None:
                # the record's own deadline (or the type's, from created_at) passed
                ack = await expire_delivery(
                    self.app,
                    self.store,
                    envelope,
                    delivery,
                    now=now,
                    deadline=claimed.deadline,
                    type_bound_s=bound,
                    hooks=self._hooks,
                )
                return ack or LEAVE
            return await self._refused(envelope, delivery, claimed)
        job, confirmed = claimed.job, claimed.confirmed
        assert job is not None
        if confirmed:  # botocore retried a claim whose answer was lost: our own first try took the job
            self.app.logger.info("claim confirmed after a lost answer", extra={"job_id": job.id})
        if envelope.has_payload:  # the message carries it; the record keeps only its hash
            job = job.evolve(payload=envelope.payload)
        self._log(
            "job claimed",
            job,
            receive_count=delivery.receive_count,
            wait_s=round(now - job.run_at.timestamp(), 3),
            outcome=AttemptOutcome.STARTED,
            **({"payload": job.payload} if self.app.settings.log_payloads else {}),
        )
        return await self._run(spec, job, delivery)

    async def _other_kind(self, message: object, delivery: Delivery) -> Ack:
        """A message that is no job's envelope: the plug-in that owns its kind handles it whole."""
        kind = self.app.kinds.get(type(message))
        if kind is None:
            reason = f"no plug-in handles {type(message).__name__} messages"
            self.app.logger.warning("message rejected", extra={"queue": delivery.queue, "reason": reason})
            return dead_letter(reason, queue=delivery.queue)
        return await kind.handle(message, delivery)

    async def _admit(
        self, spec: HandlerSpec, envelope: env.Envelope, delivery: Delivery
    ) -> float | Ack | None:
        """Every admission guard in turn: an Ack defers (earlier guards give back), else the admitted instant."""
        at: float | None = None
        for n, guard in enumerate(self._guards):
            admitted = await guard.admit(spec, envelope, delivery)
            if isinstance(admitted, Ack):
                for earlier in self._guards[:n]:
                    await earlier.give_back(envelope.job_id)
                return admitted
            if admitted is not None:
                at = admitted.at
        return at

    async def _reject(
        self, envelope: env.Envelope, delivery: Delivery, exc: Exception, *, reason: str
    ) -> Ack:
        """Dead without a claim: the record says why, the message goes to the DLQ."""
        error = failure_record(exc)
        now = self.app.clock.now()
        try:  # a batch item's reject counts like its finish, a chain step's stops its chain (runtime/hooks.py)
            dead = unrun(envelope, AttemptOutcome.DEAD, error=error)
            rejected = await commit_unrun(
                self._hooks,
                dead,
                lambda entries: self.store.reject(
                    envelope,
                    now=now,
                    error=error,
                    reason=reason,
                    retention_s=self.app.settings.retention_s,
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
            ):
                return DELETE
            if rejected.reason is ClaimRefusal.HELD_ELSEWHERE:
                return DELETE
        self.app.logger.warning(
            "job rejected", extra={"job_id": envelope.job_id, "job_type": envelope.job_type, "reason": reason}
        )
        self.app.metrics.count(DEAD, envelope.job_type)
        return dead_letter(
            reason, job_id=envelope.job_id, job_type=envelope.job_type, error=error, queue=delivery.queue
        )

    async def _refused(self, envelope: env.Envelope, delivery: Delivery, refused: Refused) -> Ack:
        """A claim that did not take the job: the record decides what the message is worth."""
        job = refused.job
        if refused.reason is ClaimRefusal.MISSING:
            return dead_letter(
                f"no record for job {envelope.job_id}",
                job_id=envelope.job_id,
                job_type=envelope.job_type,
                queue=delivery.queue,
            )
        assert job is not None
        if refused.reason is ClaimRefusal.CONFLICT:
            self.app.logger.warning(
                "message dropped: its payload is not the job's (a conflicting enqueue, or retried with another)",
                extra={"job_id": job.id, "job_type": job.type},
            )
            return DELETE
        if refused.reason is ClaimRefusal.FINISHED:
            cancelled_unkept = (  # a payload in S3 needs no keeping: the record has its reference
                job.status is JobStatus.CANCELLED
                and job.payload is None
                and job.payload_ref is None
                and envelope.has_payload
            )
            if cancelled_unkept and not await self._keep_payload(job, envelope):
                return LEAVE  # not kept (DynamoDB unreachable): the message comes back, try again
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
        if job.status is JobStatus.WAITING:  # a chain step's copy: its predecessor's success sends its hint
            return DELETE
        if refused.reason is ClaimRefusal.NOT_DUE:
            return Ack("rearm", delay_s=sqs.clamp_visibility(job.run_at.timestamp() - self.app.clock.now()))
        if refused.reason is ClaimRefusal.HELD_ELSEWHERE:
            return self._held_elsewhere(job, delivery)
        # ClaimRefusal.EXHAUSTED: every attempt was claimed by a run that never recorded an outcome
        # (its process died, or it stalled past its lease): dead without a run, and the record and
        # the DLQ say why.
        bound = f"{job.attempt}/{job.max_attempts or job.attempt}"
        return await self._reject(
            envelope,
            delivery,
            WorkerLost(f"attempts exhausted ({bound}): no run finished"),
            reason=f"attempts exhausted ({bound}) by runs that never finished "
            "(their worker died or lost its lease mid-run)",
        )

    async def _keep_payload(self, job: Job, envelope: env.Envelope) -> bool:
        """The message of a job cancelled while it waited is about to go: keep its payload for a retry."""
        try:  # refused: kept already, or retried meanwhile; nothing is lost
            await self.store.keep_payload(job.id, payload=envelope.payload, now=self.app.clock.now())
        except StoreError:
            return False
        return True

    def _held_elsewhere(self, job: Job, delivery: Delivery) -> Ack:
        """A claim refused by a live lease: wait for the lease, or drop a redundant copy.

        The owner holds the message it claimed with (``claim_message_id``) and extends it while it
        runs. If this *is* that message, the owner stopped extending it: its worker probably died.
        The message is re-armed until the lease expires, when a claim rescues the job — recovery
        without the sweeper. A copy of another message is redundant while the owner's
        message exists, so it is deleted rather than cycled toward the redrive limit.
        """
        if job.claim_message_id not in (None, delivery.message_id):
            return DELETE
        expires = job.lease_expires.timestamp() if job.lease_expires else self.app.clock.now()
        wait_s = expires - self.app.clock.now() + LEASE_EXPIRY_MARGIN_S
        return Ack("rearm", delay_s=max(1, sqs.clamp_visibility(wait_s)))

    # ── running the handler ───────────────────────────────────────────────────────────────
    async def _run(self, spec: HandlerSpec, job: Job, delivery: Delivery | None) -> Ack:
        if job.payload_version > spec.version:
            release = functools.partial(self.store.release, job, now=self.app.clock.now())
            await self._write(job, release, Finish(job, AttemptOutcome.RELEASED))
            return Ack("rearm", delay_s=NEWER_VERSION_PARK_S)
        queue = delivery.queue if delivery else job.queue
        try:
            payload = spec.load(await payloads.load(self.app.arun, job), job.payload_version)  # upcast first
        except (PayloadInvalid, PayloadMissing) as exc:  # which: validation, an upcast step, the S3 object
            return await self._dead(job, exc, reason=payloads.unusable(exc), queue=queue)
        except ObjectStoreError as exc:  # S3 did not answer: a passing fault, retried by the type's policy
            return await self._failed(spec, job, exc, queue)
        fields: dict[str, Any] = {}
        try:  # e.g. a chain step reads the step before's result, or stops if its chain was cancelled
            for preparation in self.app.preparations:
                fields.update(await preparation.prepare(job))
        except Exception as exc:  # Cancel: cancelled; a failed read: the type's retry policy
            return await self._failed(spec, job, exc, queue)

        timeout_s = (
            spec.run_timeout_s(self._default_timeout_s()) if self._default_timeout_s else spec.timeout_s
        )
        ctx = JobContext(
            job=job,
            worker_id=self.worker_id,
            deadline=self.app.clock.now() + timeout_s,
            logger=self.app.logger,
            delivery=delivery,
            **fields,
        )
        if self._on_run:
            self._on_run(ctx)
        try:
            with self.app.tracer.span(job):
                return await self._outcome(spec, job, payload, ctx, delivery, timeout_s)
        finally:
            if self._on_done:
                self._on_done(ctx)

    async def _outcome(
        self,
        spec: HandlerSpec,
        job: Job,
        payload: Any,
        ctx: JobContext,
        delivery: Delivery | None,
        timeout_s: float,
    ) -> Ack:
        started = self.app.clock.now()
        run = asyncio.ensure_future(invoke(spec, payload, ctx, pool=self._pool))
        interrupted = asyncio.ensure_future(ctx._interrupt.wait())
        try:
            await asyncio.wait({run, interrupted}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            interrupted.cancel()
        queue = delivery.queue if delivery else job.queue
        if not run.done():
            run.cancel()  # an async handler stops; a sync one's thread runs on, fenced by the lease
            reason = ctx.interrupt_reason
            if reason is InterruptReason.SHUTDOWN:
                release = functools.partial(self.store.release, job, now=self.app.clock.now())
                ok = await self._write(job, release, Finish(job, AttemptOutcome.RELEASED))
                if ok:
                    self._log("job released", job)
                return RELEASE if ok else LEAVE
            if reason is InterruptReason.LEASE_LOST:
                self._log("job lost its lease", job)
                return LEAVE
            if reason is InterruptReason.CANCEL:
                return await self._abort(job, "cancelled while running")
            # No reason: nothing interrupted the handler, its timeout ran out.
            return await self._failed(spec, job, timeout_error(spec, timeout_s), queue)
        duration = round(self.app.clock.now() - started, 4)
        exc = run.exception()
        if exc is None:
            return await self._succeeded(job, run.result(), duration)
        if not isinstance(exc, Cancel):  # a cancel is an expected outcome, not an error
            self.app.logger.info(
                "handler raised",
                extra={"job_id": job.id, "error": f"{type(exc).__name__}: {exc}", "duration_s": duration},
            )
        return await self._failed(spec, job, exc, queue)

    # ── leases of long jobs (ECS heartbeat and Lambda alike) ──────────────────────────────────
    async def renew_leases(self, running: Iterable[JobContext]) -> None:
        """Renew the lease of every job past half of it; a renewal shows a cancel request or a lost lease."""
        now = self.app.clock.now()
        half = self.app.settings.lease_s / 2
        due = [
            ctx
            for ctx in running
            if ctx.job.lease_expires is not None and ctx.job.lease_expires.timestamp() - now < half
        ]
        await asyncio.gather(*(self._renew(ctx, now) for ctx in due))
        for guard in self._guards:
            await guard.renew([ctx.job.id for ctx in due], now)

    async def _renew(self, ctx: JobContext, now: float) -> None:
        try:
            renewal = await self.store.heartbeat(ctx.job, now=now, lease_s=self.app.settings.lease_s)
        except StoreError:
            return
        if isinstance(renewal, Refused):  # MOVED_ON: the outcome landed while this renewal was in flight
            if renewal.reason is Refusal.LEASE_LOST:
                self.app.logger.warning(
                    "lease lost at heartbeat", extra={"job_id": ctx.job.id, "error": renewal.detail}
                )
                ctx.interrupt(InterruptReason.LEASE_LOST)
            return
        renewed = renewal.job
        assert renewed is not None
        ctx.job = ctx.job.evolve(
            lease_expires=renewed.lease_expires, cancel_requested=renewed.cancel_requested
        )
        if renewed.cancel_requested:
            ctx.interrupt(InterruptReason.CANCEL)

    # ── recording the outcome ─────────────────────────────────────────────────────────────
    async def _write(
        self, job: Job, transition: Callable[..., Awaitable[Landed | Refused]], finish: Finish | None = None
    ) -> bool:
        """A fenced transition of ``self.store``; False (logged) when the lease is gone or DynamoDB refused.

        ``transition`` has its arguments bound but ``entries``.

        With a ``finish``, the hooks' entries commit in one transaction with it (``runtime/hooks.py``),
        and the hooks hear of it once it landed.
        """
        try:
            entries = await entries_of(self._hooks, finish)
            outcome = await transition(entries=entries)
        except StoreError as exc:
            # The message comes back after its visibility timeout and the lease expires: the job reruns.
            self.app.logger.error("could not record outcome", extra={"job_id": job.id, "error": str(exc)})
            return False
        if isinstance(outcome, Refused):  # LEASE_LOST (JobStore reads it)
            self.app.logger.warning(
                "write refused: lease lost", extra={"job_id": job.id, "error": outcome.detail}
            )
            return False
        if outcome.confirmed:  # botocore retried after a lost answer; the first try landed
            self.app.logger.info("write confirmed after a lost answer", extra={"job_id": job.id})
        await tell_landed(self._hooks, finish)
        return True

    async def _succeeded(self, job: Job, result: Any, duration: float) -> Ack:
        stored = await payloads.store_result(self.app.arun, self.app.settings, job, result)
        params = functools.partial(
            self.store.complete,
            job,
            now=self.app.clock.now(),
            result=stored.value,
            result_ref=stored.ref,
            retention_s=self.app.settings.retention_s,
        )
        finish = Finish(job, AttemptOutcome.SUCCEEDED, result=stored.value, result_ref=stored.ref)
        if not await self._write(job, params, finish):
            return LEAVE
        self._log(
            "job succeeded",
            job.evolve(status=JobStatus.SUCCEEDED),
            duration_s=duration,
            outcome=AttemptOutcome.SUCCEEDED,
        )
        return DELETE

    async def _failed(self, spec: HandlerSpec, job: Job, exc: BaseException, queue: str) -> Ack:
        now = self.app.clock.now()
        verdict = judge_failure(spec, job, exc, now=now)
        if verdict.outcome == "cancelled":
            return await self._abort(job, verdict.reason)
        if verdict.outcome == "dead":
            return await self._dead(job, exc, reason=verdict.reason, queue=queue)
        held = verdict.delay_s > sqs.MAX_VISIBILITY_S
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
        if not await self._write(job, params, Finish(job, AttemptOutcome.RETRY, error=error)):
            return LEAVE
        self._log(
            "job retry scheduled",
            job.evolve(status=JobStatus.RETRY_SCHEDULED),
            delay_s=round(verdict.delay_s, 3),
            error=error.error_class,
            outcome=AttemptOutcome.RETRY,
        )
        # Retries re-arm the same message, so its receive count keeps meaning something;
        # beyond the 12 h cap the record holds the job and the sweeper sends it when due.
        return DELETE if held else Ack("rearm", delay_s=sqs.clamp_visibility(verdict.delay_s))

    async def _dead(self, job: Job, exc: BaseException, *, reason: str, queue: str) -> Ack:
        error = failure_record(exc)
        params = functools.partial(
            self.store.fail,
            job,
            now=self.app.clock.now(),
            error=error,
            reason=reason,
            retention_s=self.app.settings.retention_s,
            payload=job.payload,
        )
        if not await self._write(job, params, Finish(job, AttemptOutcome.DEAD, error=error)):
            return LEAVE
        self._log(
            "job dead",
            job.evolve(status=JobStatus.DEAD),
            reason=reason,
            error=error.error_class,
            outcome=AttemptOutcome.DEAD,
        )
        return dead_letter(reason, job_id=job.id, job_type=job.type, error=error, queue=queue)

    async def _abort(self, job: Job, reason: str) -> Ack:
        params = functools.partial(
            self.store.abort,
            job,
            now=self.app.clock.now(),
            reason=reason,
            retention_s=self.app.settings.retention_s,
            payload=job.payload,
        )
        if not await self._write(job, params, Finish(job, AttemptOutcome.CANCELLED)):
            return LEAVE
        self._log(
            "job cancelled",
            job.evolve(status=JobStatus.CANCELLED),
            reason=reason,
            outcome=AttemptOutcome.CANCELLED,
        )
        return DELETE
