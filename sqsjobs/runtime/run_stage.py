"""The run stage: a claimed job's handler, called with its payload, under its timeout, until it ends or is interrupted.

A handler can still run twice for one job when a worker loses its lease mid-run (it crashed,
stalled past the lease, or its sync thread outlived a timeout); every write of the stale run is
then refused (``LeaseLost``), and handlers that pass ``ctx.fencing_token`` to their own writes can
refuse its side effects too. Leases are renewed here (``renew_leases``, on the host's beat): a
renewal is also how a running job hears of a cancel request or of its lost lease.

How a handler is called (``invoke``: an async one on the loop, a sync one in the worker's pool)
and the error a run past its timeout records (``timeout_error``) live here, and
``sqsjobs.testing.run_job`` calls them too, so a test runs a handler exactly as the worker does.
What the run ends with goes to the record stage (``runtime/record_stage.py``), which writes it
and answers the message's ``Ack``.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
from typing import TYPE_CHECKING, Any

from sqsjobs.context import RUNNING_TAGS, InterruptReason, JobContext
from sqsjobs.delivery import LEAVE, Ack
from sqsjobs.errors import (
    Cancel,
    EncryptionError,
    JobTimeout,
    ObjectStoreError,
    PayloadInvalid,
    PayloadMissing,
    StartTooLate,
    StoreError,
)
from sqsjobs.job import JobStatus
from sqsjobs.runtime import payloads
from sqsjobs.runtime.batching import Collectors, call_one
from sqsjobs.store import sealing
from sqsjobs.store.apply import Landed, Refusal, Refused
from sqsjobs.store.codec import sealed_key

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence
    from concurrent.futures import Executor, ThreadPoolExecutor
    from contextlib import AbstractAsyncContextManager

    from sqsjobs.delivery import Delivery
    from sqsjobs.job import Job
    from sqsjobs.registry import HandlerSpec
    from sqsjobs.runtime.kernel import Kernel
    from sqsjobs.runtime.record_stage import Recorder
    from sqsjobs.runtime.seams import AdmissionGuard, RunPreparation

    #: A handler slot for a claimed job's deliveries (one, or a batch call's), ended early by the
    #: event: yields True once granted, False to release them unrun (``runtime/slots.py``).
    HandlerSlot = Callable[[Sequence[Delivery], asyncio.Event], AbstractAsyncContextManager[bool]]

#: A worker that sees a payload version newer than its handler's parks the message this long.
NEWER_VERSION_PARK_S = 60


def timeout_error(spec: HandlerSpec, timeout_s: float | None = None) -> JobTimeout:
    """The error recorded for a run of ``spec`` that outlived ``timeout_s`` (``spec.timeout_s`` if None)."""
    return JobTimeout(
        f"{spec.name} ran past its {spec.timeout_s if timeout_s is None else timeout_s:g} s timeout"
    )


async def invoke(spec: HandlerSpec, payload: Any, ctx: JobContext, *, pool: Executor | None = None) -> Any:
    """Call the handler: an async one on the loop, a sync one in ``pool`` (the loop's default if None)."""
    if spec.batch is not None:  # a batch type's job alone: a call of one (runtime/batching.py)
        return await call_one(spec, payload, ctx, pool)
    if spec.is_async:
        return await spec.fn(payload, ctx)
    loop = asyncio.get_running_loop()
    call = functools.partial(contextvars.copy_context().run, spec.fn, payload, ctx)
    return await loop.run_in_executor(pool, call)


class Runner:
    """Runs claimed jobs for one worker (see the module docstring)."""

    def __init__(
        self,
        kernel: Kernel,
        recorder: Recorder,
        *,
        pool: ThreadPoolExecutor | None = None,
        on_run: Callable[[JobContext], None] | None = None,
        on_done: Callable[[JobContext], None] | None = None,
        default_timeout_s: Callable[[], float] | None = None,
        batches: Collectors | None = None,
        slot: HandlerSlot | None = None,
    ) -> None:
        """``default_timeout_s``: the timeout of a run whose type has none of its own, asked as it starts.

        ``batches``: where a batch type's jobs wait for their shared call (the host's, which lends it
        slots; one of its own if None).

        The Lambda adapter answers with the invocation's remaining time (less its margin), so such a
        job runs there instead of waiting for an invocation as long as ``DEFAULT_TIMEOUT_S`` (the
        answer when None).

        ``slot``: what a claimed job waits for just before its handler starts, and gives back as soon
        as it ends (``Worker``'s ``Slots``: ``concurrency`` bounds handlers, not claims or finishes).
        Until granted the job is tracked (``on_run``), so its lease is renewed and a drain, a cancel
        or a lost lease ends the wait. A batch type's job takes none here: its call asks one slot for all
        its jobs (``runtime/batching.py``).
        """
        self.kernel = kernel
        self.recorder = recorder
        self._pool = pool
        self._on_run = on_run
        self._on_done = on_done
        self._default_timeout_s = default_timeout_s
        self.batches = batches or Collectors(kernel, pool=pool)
        self._slot = slot

    async def run(self, spec: HandlerSpec, job: Job, delivery: Delivery | None) -> Ack:
        """Run the claimed ``job`` and record how it ended; the ``Ack`` its message is worth."""
        prepared = await self.prepare(spec, job, delivery)
        if isinstance(prepared, Ack):
            return prepared
        payload, fields = prepared
        kernel, recorder = self.kernel, self.recorder
        timeout_s = (
            spec.run_timeout_s(self._default_timeout_s()) if self._default_timeout_s else spec.timeout_s
        )
        ctx = JobContext(
            job=job,
            worker_id=recorder.worker_id,
            deadline=kernel.clock.now() + timeout_s,
            logger=kernel.logger,
            delivery=delivery,
            **fields,
        )
        if self._on_run:
            self._on_run(ctx)
        try:
            return await self._outcome(spec, job, payload, ctx, delivery, timeout_s)
        finally:
            if self._on_done:
                self._on_done(ctx)

    async def prepare(
        self, spec: HandlerSpec, job: Job, delivery: Delivery | None
    ) -> tuple[Any, dict[str, Any]] | Ack:
        """What a claimed job's handler is called with: its payload and the context fields the features add.

        Or the ``Ack`` of a job that cannot start: a payload newer than the handler (released), one
        that no longer validates (dead), an S3 object or a feature's read that failed (retried).
        An HTTP worker's lease (``sqsjobs.remote``) is made of the same.
        """
        kernel, recorder = self.kernel, self.recorder
        if job.payload_version > spec.version:
            await recorder.release(job)
            return Ack("rearm", delay_s=NEWER_VERSION_PARK_S)
        try:  # upcast first; S3 is read only for a payload kept there
            stored = (
                job.payload  # the message's own, in the clear: nothing to read or open
                if job.payload_ref is None and sealed_key(job.payload) is None
                else await payloads.load(kernel.arun, kernel.settings.table_name, job)
            )
            payload = spec.load(stored, job.payload_version)
        except (PayloadInvalid, PayloadMissing) as exc:  # which: validation, an upcast step, the S3 object
            queue = delivery.queue if delivery else job.queue
            return await recorder.dead(job, exc, reason=payloads.unusable(exc), queue=queue)
        except (
            ObjectStoreError,
            EncryptionError,
        ) as exc:  # S3 or KMS did not answer: a passing fault, retried
            return await recorder.failed(spec, job, exc, delivery)
        fields: dict[str, Any] = dict(kernel.context)
        preparations: list[RunPreparation] = kernel.concerned(kernel.preparations, job.type, job)
        try:  # e.g. a chain step reads the step before's result, or stops if its chain was cancelled
            for preparation in preparations:
                fields.update(await preparation.prepare(job))
        except Exception as exc:  # Cancel: cancelled; a failed read: the type's retry policy
            return await recorder.failed(spec, job, exc, delivery)
        return payload, fields

    async def _outcome(
        self,
        spec: HandlerSpec,
        job: Job,
        payload: Any,
        ctx: JobContext,
        delivery: Delivery | None,
        timeout_s: float,
    ) -> Ack:
        clock, recorder = self.kernel.clock, self.recorder
        run: asyncio.Future[Any] | None = None
        ended = False
        late: str | None = None
        async with self._slot_for(spec, delivery, ctx) as granted:
            if granted and self._slot is not None:  # it waited ahead of the slot: may it still start?
                late = self.kernel.late(spec, job)
                if late is None and not await self._lease_holds(ctx):
                    granted = False  # its lease lapsed while it waited: the job may be another's now
            if granted and late is None:
                started = clock.now()
                ctx.deadline = started + timeout_s  # the timeout runs from the start, not the claim
                # A tagged job's handler runs with its tags in context: the jobs it enqueues inherit them.
                inherit = RUNNING_TAGS.set(job.tags) if job.tags else None
                run = asyncio.ensure_future(
                    invoke(spec, payload, ctx, pool=self._pool)
                    if spec.batch is None
                    else self.batches.submit(
                        spec, payload, ctx
                    )  # one call for many jobs (runtime/batching.py)
                )
                if inherit is not None:
                    RUNNING_TAGS.reset(inherit)
                interrupted = asyncio.ensure_future(ctx._interrupt.wait())
                try:
                    await asyncio.wait(
                        {run, interrupted}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED
                    )
                finally:
                    interrupted.cancel()
                ended = run.done()
                if not ended:
                    run.cancel()  # an async handler stops; a sync one's thread runs on, fenced by the lease
                duration = round(clock.now() - started, 4)
        # The slot is free again: what follows is the finish, outside it.
        if late is not None:
            return await recorder.expire_claimed(job, late)
        if run is None or not ended:
            reason = ctx.interrupt_reason
            if reason is InterruptReason.SHUTDOWN or (
                run is None and reason is None
            ):  # a drain, before the start
                return await recorder.shutdown_release(job)
            if reason is InterruptReason.LEASE_LOST:
                recorder.log("job lost its lease", job)
                return LEAVE
            if reason is InterruptReason.CANCEL:
                return await recorder.abort(job, "cancelled while running")
            # No reason: nothing interrupted the handler, its timeout ran out.
            return await recorder.failed(spec, job, timeout_error(spec, timeout_s), delivery)
        exc = run.exception()
        if isinstance(exc, StartTooLate):  # its deadline passed while it waited for its batch call
            return await recorder.expire_claimed(job, exc.reason)
        if exc is None:
            result = run.result()
            if result is None:  # nothing to keep: no S3 check
                return await recorder.succeeded(job, None, None, duration)
            settings = self.kernel.settings
            stored = await payloads.store_result(
                self.kernel.arun, settings, job, result, encrypt=sealing.key_of(spec, settings)
            )
            return await recorder.succeeded(job, stored.value, stored.ref, duration)
        if not isinstance(exc, Cancel):  # a cancel is an expected outcome, not an error
            self.kernel.logger.info(
                "handler raised",
                extra={"job_id": job.id, "error": f"{type(exc).__name__}: {exc}", "duration_s": duration},
            )
        if (owner := self.kernel.outcomes.get(type(exc))) is not None:  # e.g. a durable sleep
            return await owner.record(job, exc, delivery, recorder)
        return await recorder.failed(spec, job, exc, delivery)

    async def _lease_holds(self, ctx: JobContext) -> bool:
        """Whether a job that waited for its slot still owns its record; renewed first if past half its lease.

        The heartbeat renews the leases of waiting jobs too, but a beat that came late (a stalled
        process, a slow DynamoDB) can let one lapse, and a copy of the job's message claimed
        meanwhile by another worker runs it: starting it here as well would run it twice at once.
        So a job past half its lease is renewed before it starts (one write, only after a long
        wait); any refusal, a cancel request, or a failed write with the lease already over, and it
        does not start (its message comes back; its claim decides).
        """
        now = self.kernel.clock.now()
        expires = ctx.job.lease_expires
        if expires is None or expires.timestamp() - now >= self.kernel.settings.lease_s / 2:
            return True
        renewal = await self._renew(ctx, now)
        if renewal is None and expires.timestamp() > self.kernel.clock.now():
            return True  # the write failed, the lease still runs: as the heartbeat would, try later
        if not isinstance(renewal, Landed):
            self.recorder.log("job lost its lease while it waited for a slot", ctx.job)
            ctx.interrupt(InterruptReason.LEASE_LOST)
            return False
        return ctx.interrupt_reason is None  # a cancel request the renewal showed: it does not start

    def _slot_for(
        self, spec: HandlerSpec, delivery: Delivery | None, ctx: JobContext
    ) -> AbstractAsyncContextManager[bool]:
        if self._slot is None or delivery is None or spec.batch is not None:  # a batch call takes its own
            return contextlib.nullcontext(True)
        return self._slot([delivery], ctx._interrupt)

    # ── leases of long jobs (ECS heartbeat and Lambda alike) ──────────────────────────────────
    async def renew_leases(self, running: Iterable[JobContext], *, reported: bool = False) -> None:
        """Renew the lease of every job past half of it; a renewal shows a cancel request or a lost lease.

        ``reported``: also renew now each job with a progress report no renewal wrote yet (an HTTP
        worker's heartbeat that carries one: the heartbeat's write is the report's).
        """
        kernel = self.kernel
        now = kernel.clock.now()
        running = list(running)
        for _, watch in kernel.watches:  # each looks at its own running jobs; notes ride on renewals
            if mine := [
                c.job for c in running if watch in kernel.concerned(kernel.watches, c.job.type, c.job)
            ]:
                await watch.look(mine, now)
        half = kernel.settings.lease_s / 2
        due = [
            ctx
            for ctx in running
            if (ctx.job.lease_expires is not None and ctx.job.lease_expires.timestamp() - now < half)
            or (reported and ctx.unwritten_progress() is not None)
        ]
        await asyncio.gather(*(self._renew(ctx, now) for ctx in due))
        by_guard: dict[int, tuple[AdmissionGuard, list[str]]] = {}
        for ctx in due:  # each guard renews what its own jobs' admissions hold
            for guard in kernel.concerned(kernel.guards, ctx.job.type, ctx.job):
                by_guard.setdefault(id(guard), (guard, []))[1].append(ctx.job.id)
        for guard, ids in by_guard.values():
            await guard.renew(ids, now)

    async def _renew(self, ctx: JobContext, now: float) -> Landed | Refused | None:
        """Renew ``ctx``'s lease and act on the answer (a lost lease, a cancel request); None: the write failed."""
        report = ctx.unwritten_progress()  # the handler's latest report rides on the renewal
        watches = self.kernel.concerned(self.kernel.watches, ctx.job.type, ctx.job)
        notes = {name: value for watch in watches for name, value in watch.notes(ctx.job).items()}
        try:
            renewal = await self.recorder.store.heartbeat(
                ctx.job, now=now, lease_s=self.kernel.settings.lease_s, progress=report, notes=notes
            )
        except StoreError:
            return None
        if isinstance(renewal, Refused):  # MOVED_ON: the outcome landed while this renewal was in flight
            if (
                renewal.reason is Refusal.LEASE_LOST
                and renewal.job
                and renewal.job.status is JobStatus.CANCELLED
            ):
                # cancelled under the run (a newer enqueue replaced it): told as a cancel request is
                self.kernel.logger.warning("job cancelled while it ran", extra={"job_id": ctx.job.id})
                ctx.interrupt(InterruptReason.CANCEL)
            elif renewal.reason is Refusal.LEASE_LOST:
                self.kernel.logger.warning(
                    "lease lost at heartbeat", extra={"job_id": ctx.job.id, "error": renewal.detail}
                )
                ctx.interrupt(InterruptReason.LEASE_LOST)
            return renewal
        renewed = renewal.job
        assert renewed is not None
        ctx.progress_written(report)
        for watch in watches if notes else ():
            watch.written(ctx.job)
        ctx.job = ctx.job.evolve(
            lease_expires=renewed.lease_expires, cancel_requested=renewed.cancel_requested
        )
        if renewed.cancel_requested:
            ctx.interrupt(InterruptReason.CANCEL)
        return renewal
