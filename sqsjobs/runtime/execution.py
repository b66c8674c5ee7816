"""Handle one delivery: claim → run → record → ack. Shared by the ECS worker and the Lambda adapter.

Delivery is at least once: SQS may hand the same message out twice, late, or after the job is
finished. None of that matters here, because ownership comes only from the conditional claim in
DynamoDB. The path is a pipeline of three stages over the frozen ``Kernel``, each in its module:

    parse ──▶ a message kind of a plug-in?  (a schedule fire, a foreign message: handled whole)
          ──▶ claim  (``runtime/claim_stage.py``: claim guards, admission, the claim, refusal → Ack)
          ──▶ run    (``runtime/run_stage.py``: payload, preparations, invoke, timeout, interrupt)
          ──▶ record (``runtime/record_stage.py``: the finish write + the finish hooks → Ack)

The record is always written before the message is touched: ``Execution.handle`` returns an
``Ack`` saying what to do with the message, and its host applies it. Features take part through
the kernel's seams (``runtime/seams.py``), never by name, and only for the jobs they declare as
theirs.

**The delivery host** (``DeliveryHost``) is what the ECS worker and the Lambda adapter share between
a receive and an ack: both hand each delivery to one ``Execution``, keep the jobs whose handler runs
(``running``: the lease renewal reads them, a shutdown interrupts them), renew those leases on an
interval, and apply the ``Ack`` each delivery ends with (``apply``). Only what differs stays in the
hosts: how messages arrive (a receive loop with slots; an event), how an ack reaches SQS (an
``AckTarget``: the worker's batched ``MessageOps``; the Lambda adapter's reply, where a delete is a
success the event source mapping deletes and a re-arm a visibility change reported as a failure),
and their deadlines (a drain; the invocation's remaining time). Deciding an ``Ack`` and applying it
stay apart, so each can be read and tested alone.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Protocol

from sqsjobs import envelope as envelope_format
from sqsjobs.delivery import LEAVE, Ack, dead_letter, failure_record
from sqsjobs.errors import EnvelopeError, HandlerNotFound
from sqsjobs.runtime.claim_stage import Claimer
from sqsjobs.runtime.kernel import kernel_of
from sqsjobs.runtime.outliving import OutlivingRuns
from sqsjobs.runtime.record_stage import Recorder
from sqsjobs.runtime.run_stage import Runner
from sqsjobs.store.job_store import JobStore
from sqsjobs.store.write_batcher import WriteBatcher
from sqsjobs.transport.lifespan import fresh_copy_instead, in_key, keep_witness

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Collection, Iterable, Sequence
    from concurrent.futures import ThreadPoolExecutor

    from sqsjobs.context import InterruptReason, JobContext
    from sqsjobs.delivery import Delivery
    from sqsjobs.job import Job
    from sqsjobs.registry import HandlerSpec
    from sqsjobs.runtime.batching import Collectors
    from sqsjobs.runtime.kernel import Kernel, SupportsKernel
    from sqsjobs.runtime.run_stage import HandlerSlot
    from sqsjobs.runtime.seams import FinishHook


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
        batches: Collectors | None = None,
        slot: HandlerSlot | None = None,
        finish_linger_s: float | None = None,
    ) -> None:
        """``default_timeout_s``, ``batches``, ``slot``: see ``Runner``; ``hooks``: every finish's hooks instead of the kernel's.

        ``finish_linger_s``: how long a finish waits for company (``Settings.finish_linger_s`` when None).
        """
        #: The kernel (an App given here is asked for its own).
        self.app = kernel = kernel_of(app)
        self.worker_id = worker_id
        #: Claims and finishes go through it: what is ready at one instant leaves in one request.
        self.writes = WriteBatcher(
            kernel.arun,
            batch=kernel.settings.batch_writes,
            logger=kernel.logger,
            finish_linger_s=kernel.settings.finish_linger_s if finish_linger_s is None else finish_linger_s,
        )
        #: The state table's operations, applied through ``writes`` (the write batcher).
        self.store = JobStore(self.writes, kernel.settings.table_name, worker_id)
        self.recorder = Recorder(kernel, worker_id, self.store, hooks)
        self.claimer = Claimer(kernel, self.recorder)
        self.runner = Runner(
            kernel,
            self.recorder,
            pool=pool,
            on_run=on_run,
            on_done=on_done,
            default_timeout_s=default_timeout_s,
            batches=batches,
            slot=slot,
        )

    async def handle(self, delivery: Delivery) -> Ack:
        """Decide and record the fate of one delivery; never raises for bad input."""
        envelope = await self.parse(delivery)
        if isinstance(envelope, Ack):
            return envelope
        if self.app.tracer is None:
            return await self._job(envelope, delivery)
        with self.app.tracer.process(
            envelope, delivery
        ) as span:  # the claim's call is inside the job's trace
            return span.acked(await self._job(envelope, delivery))

    async def parse(self, delivery: Delivery) -> envelope_format.Envelope | Ack:
        """The job message ``delivery`` carries, or the ``Ack`` of any other message.

        A malformed one goes to the DLQ; a plug-in's kind (a schedule fire, a foreign message) is
        handled whole here.
        """
        kernel = self.app
        try:
            envelope = envelope_format.parse(delivery.body)
        except EnvelopeError as exc:
            kernel.logger.warning("message rejected", extra={"queue": delivery.queue, "reason": str(exc)})
            return dead_letter(f"malformed message: {exc}", error=failure_record(exc), queue=delivery.queue)
        if isinstance(envelope, envelope_format.Envelope):
            return envelope
        kind = kernel.kinds.get(type(envelope))
        if kind is None:
            reason = f"no plug-in handles {type(envelope).__name__} messages"
            kernel.logger.warning("message rejected", extra={"queue": delivery.queue, "reason": reason})
            return dead_letter(reason, queue=delivery.queue)
        return await kind.handle(envelope, delivery)

    async def claim(
        self, envelope: envelope_format.Envelope, delivery: Delivery
    ) -> tuple[HandlerSpec, Job] | Ack:
        """Claim the job ``envelope`` names (``runtime/claim_stage.py``): its type and the job, or the ``Ack`` of a refusal."""
        try:
            spec = self.app.registry.get(envelope.job_type)
        except HandlerNotFound as exc:
            reason = f"unknown job type {envelope.job_type!r}"
            return await self.recorder.reject(envelope, delivery, exc, reason=reason)
        claimed = await self.claimer.claim(spec, envelope, delivery)
        return claimed if isinstance(claimed, Ack) else (spec, claimed)

    async def _job(self, envelope: envelope_format.Envelope, delivery: Delivery) -> Ack:
        claimed = await self.claim(envelope, delivery)
        if isinstance(claimed, Ack):
            return claimed
        spec, job = claimed
        return await self.runner.run(spec, job, delivery)

    async def renew_leases(self, running: Iterable[JobContext]) -> None:
        """Renew the lease of every job past half of it (and what its admission holds)."""
        await self.runner.renew_leases(running)


class AckTarget(Protocol):
    """What a host does with a message; ``leave`` needs nothing (the message comes back by itself)."""

    def delete(self, delivery: Delivery) -> None:
        """The message is done with."""
        ...

    def set_visibility(self, delivery: Delivery, seconds: int) -> None:
        """Hide the message for ``seconds`` (0: visible again now)."""
        ...

    async def dead_letter(self, delivery: Delivery, dlq_url: str, attributes: dict[str, str]) -> None:
        """Copy the message to the DLQ with ``attributes``, then let it go."""
        ...

    async def resend(self, delivery: Delivery, delay_s: int) -> None:
        """Send a fresh copy of the message, then let this one go (re-arm it if the send fails)."""
        ...


async def apply(ack: Ack, delivery: Delivery, dlq_url: str, target: AckTarget) -> None:
    """Act on ``delivery`` as ``ack`` says, once its record was written."""
    if ack.kind == "delete":
        target.delete(delivery)
    elif ack.kind == "rearm":
        target.set_visibility(delivery, ack.delay_s)
    elif ack.kind == "release":
        target.set_visibility(delivery, 0)
    elif ack.kind == "dead_letter":
        await target.dead_letter(delivery, dlq_url, ack.attributes)
    elif ack.kind == "resend":
        await target.resend(delivery, ack.delay_s)


class DeliveryHost:
    """One execution, the jobs it runs now, and their lease renewal."""

    def __init__(
        self,
        kernel: Kernel,
        worker_id: str,
        *,
        pool: ThreadPoolExecutor,
        default_timeout_s: Callable[[], float] | None = None,
        what: str = "message",
        batches: Collectors | None = None,
        slot: HandlerSlot | None = None,
        finish_linger_s: float | None = None,
    ) -> None:
        """``what`` names a delivery in the host's log lines (``message``; ``record`` for Lambda).

        ``slot``: the handler slot a run waits for once claimed (the ECS worker's ``Slots``); none in
        Lambda, where the event's batch size is the bound. ``finish_linger_s``: see ``Execution``.
        """
        self.kernel = kernel
        self._what = what
        #: Jobs whose handler is running, by job id.
        self.running: dict[str, JobContext] = {}
        self._outliving = OutlivingRuns(kernel)
        #: Message ids of running jobs whose message SQS no longer has (``messages_gone``).
        self._gone: set[str] = set()
        self.execution = Execution(
            kernel,
            worker_id,
            pool=pool,
            on_run=self._track,
            on_done=self._untrack,
            default_timeout_s=default_timeout_s,
            batches=batches,
            slot=slot,
            finish_linger_s=finish_linger_s,
        )

    def _track(self, ctx: JobContext) -> None:
        self.running[ctx.job.id] = ctx

    def _untrack(self, ctx: JobContext) -> None:
        self.running.pop(ctx.job.id, None)

    async def handle(self, delivery: Delivery) -> Ack:
        """The delivery's ``Ack``; an unexpected error leaves the message to come back.

        Whoever decided a re-arm, it never outlives its message (``transport/lifespan.py``), nor
        re-arms a message that is gone (``messages_gone``): a fresh copy carries the job instead.
        """
        try:
            ack = await self.execution.handle(delivery)
        except Exception:
            self.kernel.logger.exception(
                f"unexpected error handling a {self._what}; it will be redelivered",
                extra={"message_id": delivery.message_id},
            )
            return LEAVE
        finally:
            gone = delivery.message_id in self._gone
            self._gone.discard(delivery.message_id)
        if ack.kind != "rearm":  # only a re-arm can outlive its message
            return ack
        if gone:
            return fresh_copy_instead(ack, self.kernel.settings)
        return keep_witness(ack, delivery, self.kernel.clock.now(), self.kernel.settings)

    async def yielded(self, delivery: Delivery, ack: Ack, why: str = "") -> None:
        """``ack`` re-sent ``delivery``: on a FIFO queue its job lost its place in its key, which its record says.

        A fresh copy goes to the end of its group, behind the jobs enqueued after it: near the
        redrive limit (a wait that spent its receives) or for a message too old to wait, or gone
        (``why`` says otherwise: a key member sent after its head).
        """
        if ack.kind != "resend" or not in_key(delivery):
            return
        try:
            envelope = envelope_format.parse(delivery.body)
        except EnvelopeError:
            return
        if isinstance(envelope, envelope_format.Envelope):
            why = why or (
                f"received {delivery.receive_count} times, near the redrive limit"
                if ack.waits
                else "its message was too old to wait, or gone"
            )
            await self.execution.recorder.yielded(envelope.job_id, f"re-sent to the end of its key: {why}")

    def messages_gone(self, receipts: Collection[str]) -> None:
        """SQS no longer honours these held messages' receipts: their running jobs lost their witness.

        A message deleted by hand, purged, or dropped by SQS while its job runs leaves that job with
        its lease alone: if its worker dies, nothing brings it back. Each such run gets the witness
        a run outliving its message gets (``runtime/outliving.py``: its payload and an attention
        entry the sweeper follows once its lease lapses), written by the beat's ``renew_leases``
        right after the leases are renewed (a throttled write retried with backoff must not hold
        the renewals up), and its re-arm becomes a fresh copy. A receipt refused for another reason
        (the message came back and another worker received it) costs the same write and at most a
        duplicate hint, which the claim decides.
        """
        for ctx in self.running.values():
            if ctx.delivery is not None and ctx.delivery.receipt_handle in receipts:
                self._gone.add(ctx.delivery.message_id)
                self.kernel.logger.warning(
                    "message gone while its job runs (deleted, purged or dropped): the record keeps a witness",
                    extra={"job_id": ctx.job.id, "message_id": ctx.delivery.message_id},
                )

    def interrupt_all(self, reason: InterruptReason) -> None:
        """Ask every running handler to stop (a shutdown's release)."""
        for ctx in list(self.running.values()):
            ctx.interrupt(reason)

    async def renew_leases(self) -> None:
        """Renew the lease of every running job past half of it (and what its admission holds).

        A run about to outlive its message gets a witness in its record (``runtime/outliving.py``),
        and so does a run whose message is gone (``messages_gone``): a write that fails (throttled, a
        server fault) is tried again at each beat until it lands (a marked run costs nothing).
        """
        running = list(self.running.values())
        await self.execution.renew_leases(running)
        if running:
            await self._outliving.keep(running)
        if self._gone and (
            gone := [c for c in running if c.delivery is not None and c.delivery.message_id in self._gone]
        ):
            await self._outliving.lost(gone)

    async def keep_leases(
        self, interval_s: float, *, extend: Callable[[], Awaitable[None]] | None = None
    ) -> None:
        """Every ``interval_s``: ``extend`` (the held messages' visibility), then ``renew_leases``; until cancelled.

        A failed beat is logged and the next one comes on time: a lease left to run out would let
        another worker rescue a job that is still running.
        """
        while True:
            await asyncio.sleep(interval_s)
            try:
                if extend is not None:
                    await extend()
                await self.renew_leases()
            except Exception:
                self.kernel.logger.exception("heartbeat failed")
