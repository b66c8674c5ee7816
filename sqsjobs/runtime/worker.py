"""The asyncio worker for containers (ECS): receive, run with bounded concurrency, heartbeat, drain.

Delivery is at least once (see ``sqsjobs.runtime.execution``): the worker never trusts a message, it asks
the record. ``concurrency`` bounds the handlers running at once; claims ahead of a free slot and
finishes after it hold no slot, and how many messages wait around the slots is bounded
(``held_ahead``, ``runtime/slots.py``), so none sits invisible in a long buffer. One heartbeat loop
extends every held message in batches of ten and renews the record's lease only for jobs that
outlive half of it (claimed jobs waiting for a slot too). A message stays held until its delete has
landed, not merely been decided: a delete waiting in ``MessageOps``' batch or in a slow request is
extended too, so a finished job's message never comes back to a second worker (and a dead letter is
never copied twice). A running job's message whose extension SQS refuses (deleted by hand, purged)
is gone: its job gets a witness in its record instead (``DeliveryHost.messages_gone``).

Each worker registers itself in the worker registry (``sqsjobs workers``, ``runtime/presence.py``):
one write per ``registry_interval_s``, ``draining`` when the drain starts, deleted at exit.

Tracking the running jobs, renewing their leases and applying each ``Ack`` are the delivery host's
(``runtime/execution.py``), shared with the Lambda adapter.

Shutdown (SIGTERM/SIGINT): stop receiving, release the jobs claimed ahead without running them
(record back to ``queued``, message visible at once), let running jobs finish until
``drain_timeout_s``, then release the rest (record back to ``queued`` without using up the
attempt, message visible again), flush pending acks (the heartbeat still extending what waits for its
delete) and return. A sync handler's thread cannot be killed: after release its late writes are
refused by the fence.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import socket
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from sqsjobs._aws import Call, one
from sqsjobs.context import InterruptReason
from sqsjobs.errors import AwsError, ConfigurationError
from sqsjobs.runtime.batching import Collectors
from sqsjobs.runtime.execution import DeliveryHost, apply
from sqsjobs.runtime.health_probe import HealthProbe
from sqsjobs.runtime.kernel import kernel_of
from sqsjobs.runtime.levels import LevelReceiver
from sqsjobs.runtime.presence import Presence
from sqsjobs.runtime.protection import TaskProtection
from sqsjobs.runtime.slots import Slots
from sqsjobs.transport import routes, sqs
from sqsjobs.transport.queues import dlq_key
from sqsjobs.transport.sqs import MessageOps

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Sequence

    from sqsjobs.context import JobContext
    from sqsjobs.delivery import Ack, Delivery
    from sqsjobs.runtime.kernel import Kernel, SupportsKernel
    from sqsjobs.runtime.slots import Hold

#: Pause after a failed receive before the next one.
RECEIVE_ERROR_BACKOFF_S = 1.0
#: After a receive, the loop waits this long before its next one, so the new jobs' claims go out
#: first. A single yield is not enough: the claim is built and signed in the job's task, but aiohttp
#: writes the request body from a task of its own (before Python 3.12), which would otherwise run
#: only after this loop had built and signed its next receive (~0.6 ms). A timer lets the steps
#: that are ready run first, however many turns of the loop they take within it.
CLAIM_HEAD_START_S = 0.001
#: At shutdown, pending deletes and visibility changes get this long; a hung AWS call (botocore
#: waits out a 30 s read timeout, then retries) must not hold the exit past the platform's kill.
ACK_FLUSH_TIMEOUT_S = 5.0
#: At shutdown, an open long poll gets its wait time plus this long to return (a network margin).
POLL_RETURN_MARGIN_S = 2.0


def make_worker_id() -> str:
    """``host-pid-random``: unique per process, readable in the record's ``lease_owner``."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


class Worker:
    """Runs the App's jobs from its queues until told to stop."""

    def __init__(
        self,
        app: Kernel | SupportsKernel,
        *,
        queues: list[str] | None = None,
        concurrency: int | None = None,
        worker_id: str | None = None,
    ) -> None:
        """``app``: the App (or its kernel) whose jobs this worker runs."""
        self.kernel = kernel = kernel_of(app)
        self.settings = kernel.settings
        self.queues = queues or kernel.registry.worker_queues() or ["default"]
        if remote := sorted(set(self.queues) & set(kernel.registry.external_queues())):
            raise ConfigurationError(
                f"queue {remote[0]!r} carries external job types: HTTP workers lease them (POST /leases), "
                "a Python worker does not receive from it"
            )
        self.concurrency = concurrency or self.settings.concurrency
        if self.concurrency < 1:
            raise ConfigurationError(f"concurrency must be at least 1, got {self.concurrency}")
        self.worker_id = worker_id or make_worker_id()
        self._pool = ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="sqsjobs-handler")
        self._ops = MessageOps(
            kernel.arun, linger_s=kernel.settings.ack_linger_s, logger=kernel.logger, settled=self._settled
        )
        #: The handler slots and the bounded places ahead of and behind them (``runtime/slots.py``).
        self.slots = Slots(
            self.concurrency,
            self.settings.queue_concurrency,
            self.settings.held_ahead,
            len(self.queues),
            aside_cap=max((spec.batch.max_size for spec in kernel.registry if spec.batch), default=0),
        )
        # A batch type's job waits for its call set aside (not ahead of a slot); the call takes one
        # slot for all its jobs (runtime/batching.py).
        self._batches = Collectors(
            kernel, pool=self._pool, hold=self._set_aside, call_slot=lambda ds: self._slot(ds, None)
        )
        self._host = DeliveryHost(
            kernel, self.worker_id, pool=self._pool, batches=self._batches, slot=self._slot
        )
        #: Messages received and not yet settled (their delete or visibility change has not landed),
        #: by receipt handle: the heartbeat extends them (``MessageOps.extend`` leaves out a pending
        #: re-arm or release).
        self._held: dict[str, Delivery] = {}
        #: Where each held message is (ahead, running, behind), by receipt handle.
        self._holds: dict[str, Hold] = {}
        #: Queues whose last receive came back with every message it asked for: they may hold more.
        self._backlog: set[str] = set()
        #: Set when the drain begins: receive loops stop even if their cancellation was swallowed.
        self._stopping = False
        self._tasks: set[asyncio.Task[Any]] = set()
        #: ReceiveMessage requests in flight: a drain lets them return (``poll``).
        self._polls: set[asyncio.Future[list[Delivery]]] = set()
        #: Jobs this process has finished handling (any outcome), for tests and the dev runner.
        self.handled = 0
        self.presence = Presence(
            kernel,
            worker_id=self.worker_id,
            pid=os.getpid(),
            queues=self.queues,
            concurrency=self.concurrency,
            running=lambda: list(self._running),
        )
        self._protection = TaskProtection.for_worker(kernel, busy=lambda: bool(self._held))
        #: Outside an ECS task there is no agent, so nothing to tell it: the job path skips the calls.
        self._protecting = self._protection.url is not None
        self._health = HealthProbe.for_worker(kernel, self.worker_id, self.queues[0])

    @property
    def _running(self) -> dict[str, JobContext]:
        """Jobs whose handler is running, by job id (the host tracks them)."""
        return self._host.running

    # ── lifecycle ──────────────────────────────────────────────────────────────────────────
    async def run(self, stop: asyncio.Event) -> None:
        """Work until ``stop`` is set, then drain and return."""
        # A queue with priority levels or serialize keys has several SQS queues (``runtime/levels.py``).
        routed = {q: routes.routes_of(self.settings, q) for q in self.queues}
        urls = await self.kernel.arun(
            self.kernel.queue_urls.flow([k for q in self.queues for k in routed[q]])
        )
        receivers = [
            asyncio.create_task(
                self._receive_loop(q, urls[q], urls[dlq_key(q)])
                if len(routed[q]) == 1
                else LevelReceiver(self, q, urls, urls[dlq_key(q)]).run()
            )
            for q in self.queues
        ]
        heartbeat = asyncio.create_task(
            self._host.keep_leases(self.settings.heartbeat_interval_s, extend=self._extend_held)
        )
        metrics = asyncio.create_task(self._metrics_loop())
        self._protection.start(self.settings.heartbeat_interval_s)
        self._health.start(receivers)
        self.kernel.logger.info(
            "worker started",
            extra={"worker": self.worker_id, "queues": self.queues, "concurrency": self.concurrency},
        )
        # An operator's drain request, read from the worker registry, stops it as SIGTERM does.
        self.presence.on_drain = stop.set
        try:
            await self.presence.start()
            await stop.wait()
        finally:
            await self._shutdown(receivers, heartbeat)
            metrics.cancel()
            await asyncio.gather(metrics, return_exceptions=True)
            self.kernel.metrics.flush()

    async def _metrics_loop(self) -> None:
        """A container has no invocation end: EMF metrics leave on an interval (and at shutdown)."""
        while True:
            await asyncio.sleep(self.settings.metrics_interval_s)
            self.kernel.metrics.flush()

    def run_forever(self) -> None:
        """Run until SIGTERM or SIGINT (a second signal skips the drain wait)."""

        async def main() -> None:
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self._on_signal, stop)
            await self.run(stop)

        asyncio.run(main())

    def _on_signal(self, stop: asyncio.Event) -> None:
        if stop.is_set():
            self.kernel.logger.warning("second stop signal: releasing running jobs now")
            self._host.interrupt_all(InterruptReason.SHUTDOWN)
        stop.set()

    async def _shutdown(self, receivers: list[asyncio.Task[None]], heartbeat: asyncio.Task[None]) -> None:
        self.kernel.logger.info(
            "worker draining", extra={"worker": self.worker_id, "running": len(self._running)}
        )
        self._stopping = True
        # Jobs claimed ahead are released now (visible at once for the next worker), never started.
        self.slots.close()
        self._health.draining()
        self.presence.draining()
        for r in receivers:
            r.cancel()
        await asyncio.gather(*receivers, return_exceptions=True)
        self._batches.flush_all()  # jobs waiting for a batch call run now, not after their max wait
        # Running jobs finish while the open polls return (and release what they bring).
        await asyncio.gather(self._drain_jobs(), self._close_polls())
        self._host.interrupt_all(InterruptReason.SHUTDOWN)
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=10)
        try:
            # The heartbeat beats on meanwhile: a delete slower than the visibility timeout must
            # not let its message come back to another worker before it lands.
            await asyncio.wait_for(self._ops.drain(), ACK_FLUSH_TIMEOUT_S)
        except TimeoutError:
            # Every record is final already; a message whose ack is dropped comes back and is
            # deleted (or re-armed) by the claim it fails. Exiting on time matters more.
            self.kernel.logger.warning("acks not flushed before exit; those messages will be redelivered")
        heartbeat.cancel()
        await asyncio.gather(heartbeat, return_exceptions=True)
        await self.presence.close()
        await self._protection.close()
        await self._health.close()
        self._pool.shutdown(wait=False, cancel_futures=True)
        await self.kernel.aclose()
        self.kernel.logger.info("worker stopped", extra={"worker": self.worker_id, "handled": self.handled})

    async def _drain_jobs(self) -> None:
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=self.settings.drain_timeout_s)

    async def _close_polls(self) -> None:
        """Wait for the open long polls to return: SQS answers each within its ``receive_wait_s``."""
        if self._polls:
            await asyncio.wait(set(self._polls), timeout=self.settings.receive_wait_s + POLL_RETURN_MARGIN_S)

    @property
    def abandoned_threads(self) -> bool:
        """True when a sync handler outlived its release (the process should exit without joining it)."""
        return any(t.is_alive() for t in getattr(self._pool, "_threads", ())) and self.slots.running == 0

    # ── receiving ─────────────────────────────────────────────────────────────────────────
    async def _reserve(self, queue: str, *, within_slots: bool = False) -> int:
        """Wait for free places ahead and reserve them (``within_slots``: only for free slots)."""
        slots = self.slots
        target = min(sqs.MAX_BATCH, slots.cap(queue))
        if (
            slots.busy()
            and queue in self._backlog
            and slots.free_ahead(queue, within_slots=within_slots) < target
        ):
            # Busy with a backlog: give finishing jobs a moment so one receive fetches a fuller
            # batch. Without one (the last receive came back short), waiting would only keep the
            # next message waiting for the poll: go back to the long poll with the places free now.
            # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation that
            # races the inner wait's completion (cpython gh-86296), and the loop would live on.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.settings.receive_gather_s):
                    await slots.until(lambda: slots.free_ahead(queue, within_slots=within_slots) >= target)
        return await slots.reserve(queue, most=sqs.MAX_BATCH, within_slots=within_slots)

    def _free(self, queue: str) -> int:
        """Messages a priority queue's watch may bring now: as many as it has free slots."""
        return self.slots.free_ahead(queue, within_slots=True)

    async def _reserve_one(self, queue: str) -> None:
        """Wait for one free slot and reserve a place for it (a FIFO group's next job, ``runtime/levels.py``)."""
        await self.slots.reserve(queue, most=1, within_slots=True)

    async def _unreserve(self, queue: str, n: int) -> None:
        self.slots.unreserve(queue, n)

    def _hold(self, delivery: Delivery) -> None:
        """A received message in a place reserved ahead: the heartbeat extends it from now on."""
        self._held[delivery.receipt_handle] = delivery
        self._holds[delivery.receipt_handle] = self.slots.hold(delivery.queue)

    @contextlib.asynccontextmanager
    async def _slot(
        self, deliveries: Sequence[Delivery], interrupt: asyncio.Event | None
    ) -> AsyncIterator[bool]:
        """A handler slot for ``deliveries`` (the run stage asks, ``Runner``); False: release them."""
        holds = [self._holds[d.receipt_handle] for d in deliveries if d.receipt_handle in self._holds]
        if not holds:  # not received by this worker's loops: nothing to count
            yield True
            return
        async with self.slots.slot(holds, interrupt) as granted:
            yield granted

    async def poll(
        self, queue: str, url: str, *, max_messages: int, wait_s: int, group_ids: bool = False
    ) -> list[Delivery]:
        """One ReceiveMessage that a drain lets finish instead of abandoning it.

        Cancelling a long poll on this side does not close it on SQS's side: SQS would still hand it
        the next message, which would then stay invisible for a whole visibility timeout with no
        process to run it. So the request runs in a task of its own, shielded from the receive
        loop's cancellation; the drain waits for it (``_shutdown``), and what it brings after the
        drain began is released at once (visibility 0), never started.
        """
        params = sqs.receive(url, max_messages=max_messages, wait_s=wait_s)
        if group_ids:
            params["MessageSystemAttributeNames"] = [*params["MessageSystemAttributeNames"], "MessageGroupId"]
        request = asyncio.ensure_future(self._received(queue, url, params))
        self._polls.add(request)
        request.add_done_callback(self._poll_done)
        return await asyncio.shield(request)

    async def _received(self, queue: str, url: str, params: dict[str, Any]) -> list[Delivery]:
        response = await self.kernel.arun(one(Call("sqs", "receive_message", params)))
        got = sqs.deliveries(queue, url, response)
        if self._stopping:  # received as the drain began: not started, so released at once
            for delivery in got:
                self._ops.set_visibility(delivery, 0)
            return []
        return got

    def _poll_done(self, request: asyncio.Future[list[Delivery]]) -> None:
        self._polls.discard(request)
        if not request.cancelled():
            request.exception()  # retrieved: a receive loop cancelled by the drain no longer awaits it

    async def _receive_loop(self, queue: str, url: str, dlq_url: str) -> None:
        # Shutdown cancels this task; the flag also ends it if a library swallowed that cancellation.
        while not self._stopping:
            n = await self._reserve(queue)
            try:
                got = await self.poll(queue, url, max_messages=n, wait_s=self.settings.receive_wait_s)
            except asyncio.CancelledError:
                await asyncio.shield(self._unreserve(queue, n))
                raise
            except AwsError as exc:
                await self._unreserve(queue, n)
                self.kernel.logger.warning("receive failed", extra={"queue": queue, "error": str(exc)})
                await asyncio.sleep(RECEIVE_ERROR_BACKOFF_S)
                continue
            if self._stopping:  # the drain began: nothing received is started, all is released at once
                for delivery in got:
                    self._ops.set_visibility(delivery, 0)
                await self._unreserve(queue, n)
                return
            if len(got) == n:
                self._backlog.add(queue)
            else:
                self._backlog.discard(queue)
            await self._unreserve(queue, n - len(got))
            if not got:  # let the loops this release woke take the slots before this one asks again
                await asyncio.sleep(0)
            for delivery in got:
                self._hold(delivery)
                task = asyncio.create_task(self._process(delivery, dlq_url))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            if got and self._protecting:
                self._protection.notify()
            if got:
                # Each new job's start waits for its claim; nothing waits for the next poll.
                await asyncio.sleep(CLAIM_HEAD_START_S)

    async def _process(
        self, delivery: Delivery, dlq_url: str, *, place: Callable[[Ack], Ack | None] | None = None
    ) -> Ack:
        """Handle ``delivery`` in its slot and apply its ack (the one ``place`` returns for it, if given).

        ``place`` returning None keeps the message held as it is (the heartbeat extends it): a
        serialize key's head waiting in place (``runtime/levels.py``).
        """
        try:
            ack = await self._host.handle(delivery)
            self.handled += 1
            applied = ack if place is None else place(ack)
            if applied is not None:
                await self._apply(delivery, applied, dlq_url)
                ack = applied
        finally:
            hold = self._holds.pop(delivery.receipt_handle, None)
            if hold is not None:
                self.slots.release(hold)
        return ack

    async def _set_aside(self, delivery: Delivery) -> None:
        """Its job waits in a batch collector: not ahead of a slot any more (``Slots.set_aside``)."""
        hold = self._holds.get(delivery.receipt_handle)
        if hold is not None:
            self.slots.set_aside(hold)

    async def _apply(self, delivery: Delivery, ack: Ack, dlq_url: str) -> None:
        """Act on the message after the record was written; it stays held until that lands (``_settled``)."""
        try:
            await apply(ack, delivery, dlq_url, self._ops)
        finally:
            if not self._ops.holds(delivery):  # nothing to wait for: a leave, a dead letter whose copy failed
                self._settled(delivery)
        await self._host.yielded(delivery, ack)

    async def _yielded(self, delivery: Delivery, ack: Ack) -> None:
        """A key member re-sent after its head (``runtime/levels.py``): its record says it lost its place."""
        await self._host.yielded(delivery, ack, why="sent after its key's head, which was re-sent")

    def _settled(self, delivery: Delivery) -> None:
        """Its delete or visibility change landed (or failed for good): the heartbeat lets it go."""
        if self._held.pop(delivery.receipt_handle, None) is not None and self._protecting:
            self._protection.notify()

    # ── heartbeat ─────────────────────────────────────────────────────────────────────────
    async def heartbeat_once(self) -> None:
        """Extend every held message, and renew the leases about to run out."""
        await self._extend_held()
        await self._host.renew_leases()

    async def _extend_held(self) -> None:
        held = list(self._held.values())
        if held:
            gone = await self._ops.extend(held, self.settings.visibility_timeout_s)
            for receipt in gone:
                self._held.pop(receipt, None)
            if gone:  # deleted by hand, purged, dropped: their running jobs need another witness
                self._host.messages_gone(gone)
