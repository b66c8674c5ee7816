"""Receiving a logical queue that has several SQS queues: priority levels and a FIFO queue for serialize keys.

SQS cannot long-poll several queues in one request, and a worker must not hold a slot in a long poll
of a low level while a high job waits. So each route (``sqsjobs.transport.routes``) that looks empty
has a **watch**: one long poll (``receive_wait_s``) that asks for as many messages as the queue has
free slots (at least one) and holds no slot. What a watch brings waits in a small stash (held, so
the heartbeat extends it) and marks its route as having a backlog; the receive loop then takes
slots and fills them route by route, highest level first: the stash, then short receives
(``WaitTimeSeconds=0``) of routes with a backlog. A route whose receive comes back short goes back
to its watch. So:

- a high job enqueued while low ones wait is received by the high watch at once and takes the next
  free slot, before any waiting low job;
- of every ``lower_priority_every`` batches the loop takes, one starts with the lower levels (they
  take turns), so a lower level with work is never starved;
- an idle worker keeps one long poll open per route (three for a queue with priorities: the price
  of opting in), and a busy one polls only the routes with a backlog;
- the per-queue slot cap (``queue_concurrency``) covers all routes of the queue: they share one
  reservation;
- the loop picks only for slots that are free (``Slots.reserve(within_slots=True)``): no job is
  claimed ahead of a free slot, so a high job arriving never waits behind low ones claimed before
  it, and handlers start in the order the rotation picked. The finish still happens outside the slot.

FIFO route: SQS hands out a group's messages only while none of them is in flight, but one receive
may return several messages of one group, in order. The worker runs them one after another: the
next starts when the one before it ended with its message deleted (succeeded, dead, discarded);
when it stays in the queue instead (a retry's re-arm, a lease held elsewhere, not due, a release),
the rest go back at once (visibility 0) and SQS keeps them behind it, so the key keeps its order.
Members waiting in the worker hold no slot: nobody else could run them anyway. A head whose job
only waits (deferred, not due, asleep: ``Ack.waits``) is held in place, in flight and slotless,
and asked again after its wait (``_head``): a re-arm would spend a receive per wait, and near the
redrive limit a fresh copy would go to the back of its group.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from typing import TYPE_CHECKING, Any, Protocol

from sqsjobs.delivery import RELEASE
from sqsjobs.errors import AwsError
from sqsjobs.transport import lifespan, routes, sqs

if TYPE_CHECKING:
    from collections.abc import Callable

    from sqsjobs.config import Settings
    from sqsjobs.delivery import Ack, Delivery
    from sqsjobs.runtime.kernel import Kernel
    from sqsjobs.transport.sqs import MessageOps


class Host(Protocol):
    """What a ``LevelReceiver`` uses of its worker (``sqsjobs.runtime.worker.Worker``): slots, held messages, runs."""

    kernel: Kernel
    settings: Settings
    _stopping: bool
    _held: dict[str, Delivery]
    _tasks: set[asyncio.Task[Any]]
    _ops: MessageOps

    async def poll(
        self, queue: str, url: str, *, max_messages: int, wait_s: int, group_ids: bool = False
    ) -> list[Delivery]:
        """One ReceiveMessage a drain lets return (``Worker.poll``)."""
        ...

    async def _reserve(self, queue: str, *, within_slots: bool = False) -> int: ...
    async def _reserve_one(self, queue: str) -> None: ...
    async def _unreserve(self, queue: str, n: int) -> None: ...
    def _free(self, queue: str) -> int: ...
    def _hold(self, delivery: Delivery) -> None: ...
    async def _yielded(self, delivery: Delivery, ack: Ack) -> None: ...
    async def _close_polls(self) -> None: ...
    async def _apply(self, delivery: Delivery, ack: Ack, dlq_url: str) -> None: ...
    async def _process(
        self, delivery: Delivery, dlq_url: str, *, place: Callable[[Ack], Ack | None] | None = None
    ) -> Ack: ...


#: Acks after which a FIFO group's next message may run: its message left the queue.
_GONE = ("delete", "dead_letter")


class LevelReceiver:
    """The receive side of one logical queue with more than one route."""

    def __init__(self, worker: Host, queue: str, urls: dict[str, str], dlq_url: str) -> None:
        self.w = worker
        self.queue = queue
        self.routes = routes.routes_of(worker.settings, queue)
        self.urls = {key: urls[key] for key in self.routes}
        self.dlq_url = dlq_url
        self.every = worker.settings.lower_priority_every
        self.stash: dict[str, list[Delivery]] = {key: [] for key in self.routes}
        self.backlog: set[str] = set()
        #: Set while a route's watch should poll (no backlog, nothing stashed).
        self.idle = {key: asyncio.Event() for key in self.routes}
        self.wake = asyncio.Event()
        #: Batches started so far: every ``every``-th starts with the lower levels.
        self.batches = 0
        #: Running FIFO groups, by (route, group id), with their members waiting in this worker.
        self.groups: dict[tuple[str, str], deque[Delivery]] = {}
        #: When each FIFO message held here was received (clock seconds), by receipt handle: SQS
        #: keeps a message in flight at most ``MAX_VISIBILITY_S`` after its receive.
        self.received: dict[str, float] = {}
        #: Set once the receive loop ended (the worker stops): heads waiting in place let go.
        self.stopped = asyncio.Event()

    async def run(self) -> None:
        """Receive until the worker stops; then put back what was received and not started."""
        for event in self.idle.values():
            event.set()
        watches = [asyncio.create_task(self._watch(key)) for key in self.routes]
        try:
            while not self.w._stopping:
                await self._once()
        finally:
            self.stopped.set()
            for task in watches:
                task.cancel()
            await asyncio.gather(*watches, return_exceptions=True)
            for key in self.routes:
                self._release(self.stash[key])
                self.stash[key] = []

    def order(self) -> list[str]:
        """Routes in the order this batch serves them: by level, routes of one level taking turns.

        Every ``every``-th batch the lower levels come first (they, too, take turns), so they progress
        while the top level stays busy.
        """
        ranks = sorted({routes.rank(key) for key in self.routes})
        ordered: list[str] = []
        for r in ranks:
            group = [key for key in self.routes if routes.rank(key) == r]
            turn = self.batches % len(group)
            ordered += group[turn:] + group[:turn]
        if len(ranks) > 1 and self.batches % self.every == self.every - 1:
            top = [key for key in ordered if routes.rank(key) == ranks[0]]
            lower = [key for key in ordered if routes.rank(key) != ranks[0]]
            turn = (self.batches // self.every) % len(lower)
            ordered = lower[turn:] + lower[:turn] + top
        return ordered

    async def _once(self) -> None:
        self.wake.clear()
        n = await self.w._reserve(self.queue, within_slots=True)
        picked: list[Delivery] = []
        try:
            for key in self.order():
                if len(picked) >= n:
                    break
                take = self.stash[key][: n - len(picked)]
                del self.stash[key][: len(take)]
                picked += take
                want = n - len(picked)
                if want and key in self.backlog:
                    got = await self._receive(key, want, wait_s=0)
                    picked += got
                    if len(got) < want:
                        self.backlog.discard(key)
                if key not in self.backlog and not self.stash[key]:
                    self.idle[key].set()
        except BaseException:
            self._release(picked)
            await asyncio.shield(self.w._unreserve(self.queue, n))
            raise
        if self.w._stopping:
            self._release(picked)
            await self.w._unreserve(self.queue, n)
            return
        starts = [d for d in picked if self._admit(d)]
        await self.w._unreserve(self.queue, n - len(starts))
        for delivery in starts:
            self._start(delivery)
        if picked:
            self.batches += 1
            await asyncio.sleep(
                0.001
            )  # the claims go out before the next receive (worker.CLAIM_HEAD_START_S)
        else:
            await self.wake.wait()

    async def _watch(self, key: str) -> None:
        """Long-poll ``key`` while it looks empty; stash what comes and hand the route to the loop."""
        while True:
            await self.idle[key].wait()
            want = max(1, min(sqs.MAX_BATCH, self.w._free(self.queue)))
            got = await self._receive(key, want, wait_s=self.w.settings.receive_wait_s)
            if got:
                self.stash[key] += got
                self.backlog.add(key)
                self.idle[key].clear()
                self.wake.set()

    async def _receive(self, key: str, n: int, *, wait_s: int) -> list[Delivery]:
        try:  # the worker's poll: a drain lets it return and releases what it brings
            got = await self.w.poll(self.queue, self.urls[key], max_messages=n, wait_s=wait_s, group_ids=True)
        except AwsError as exc:
            self.w.kernel.logger.warning("receive failed", extra={"queue": self.queue, "error": str(exc)})
            await asyncio.sleep(1.0)
            return []
        now = self.w.kernel.clock.now()
        for delivery in got:
            self.w._held[delivery.receipt_handle] = delivery
            if _group(delivery) is not None:
                self.received[delivery.receipt_handle] = now
        return got

    def _admit(self, delivery: Delivery) -> bool:
        """True to start it now; False for a FIFO message whose group is running here (it waits, slotless)."""
        group = _group(delivery)
        if group is None:
            return True
        if group in self.groups:
            self.groups[group].append(delivery)
            return False
        self.groups[group] = deque()
        return True

    def _start(self, delivery: Delivery) -> None:
        self.w._hold(delivery)  # in the place reserved for it: it waits for its slot in the order picked
        task = asyncio.create_task(self._run(delivery))
        self.w._tasks.add(task)
        task.add_done_callback(self.w._tasks.discard)

    async def _run(self, delivery: Delivery) -> None:
        group = _group(delivery)
        if group is None:
            await self.w._process(delivery, self.dlq_url)
            return
        try:
            ack = await self._head(delivery, group)
        finally:
            self.received.pop(delivery.receipt_handle, None)
        await self._next_in_group(group, ack)

    async def _head(self, delivery: Delivery, group: tuple[str, str]) -> Ack:
        """Run a group's head; while its job only waits (``Ack.waits``), keep it here, in flight, and ask again.

        A deferred, not yet due or sleeping head whose ack were applied would come back through a
        receive, and each receive counts toward the redrive limit, which a long wait would reach:
        near it the message must be replaced by a fresh copy, which SQS puts at the back of the
        group, behind the jobs enqueued after it. Held here instead, it stays in flight (the
        heartbeat extends it: a visibility change is no receive) and so stays the group's head; its
        members go back to SQS at once, behind it, and the job is asked again after its wait, in a
        slot, as a new receive would. It lets go (visible at once: still the head, one receive) when
        the worker stops or when SQS's cap on one receive's time in flight comes near.
        """
        received = self.received.get(delivery.receipt_handle, self.w.kernel.clock.now())
        kept: list[Ack] = []

        def place(ack: Ack) -> Ack | None:
            applied = lifespan.in_place(
                ack,
                now=self.w.kernel.clock.now(),
                received=received,
                visibility_timeout_s=self.w.settings.visibility_timeout_s,
                stopping=self.stopped.is_set(),
            )
            if applied is None:  # waits here: the members go back behind it at once
                kept.append(ack)
                self._release(list(self.groups[group]))
                self.groups[group].clear()
            return applied

        while True:
            kept.clear()
            ack = await self.w._process(delivery, self.dlq_url, place=place)
            if not kept:
                return ack
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(ack.delay_s):
                    await self.stopped.wait()
            if not self.stopped.is_set():
                await self.w._reserve_one(self.queue)  # asked again in a slot, as a receive would be
                if not self.w._stopping:
                    self.w._hold(delivery)
                    continue
                await self.w._unreserve(self.queue, 1)
            # Let go once this worker's open polls returned: released before, it would be theirs,
            # and put back unstarted, one more receive for nothing. Near the redrive limit the
            # job's last ack is a fresh copy, which keeps it out of a DLQ (not its place).
            await self.w._close_polls()
            let_go = ack if ack.kind == "resend" else RELEASE
            await self.w._apply(delivery, let_go, self.dlq_url)
            return let_go

    async def _next_in_group(self, group: tuple[str, str], ack: Ack) -> None:
        waiting = self.groups[group]
        if ack.kind in _GONE and waiting and not self.w._stopping:
            nxt = waiting.popleft()
            await self.w._reserve_one(self.queue)
            if not self.w._stopping:
                self._start(nxt)
                return
            await self.w._unreserve(self.queue, 1)
            waiting.appendleft(nxt)
        del self.groups[group]
        if ack.kind == "resend":
            # The head was re-sent to the back of its group: its members follow it there, in order,
            # so the key keeps the order of what this worker holds, and none nears the redrive limit.
            for member in waiting:
                self.received.pop(member.receipt_handle, None)
                if member.receipt_handle in self.w._held:  # held until the copy's delete lands
                    await self.w._ops.resend(member, 0)
                    await self.w._yielded(member, ack)
            return
        # The message stays (or the worker stops): SQS keeps the rest behind it, in order.
        self._release(list(waiting))

    def _release(self, deliveries: list[Delivery]) -> None:
        for delivery in deliveries:
            self.received.pop(delivery.receipt_handle, None)
            if delivery.receipt_handle in self.w._held:  # held until the release lands
                with contextlib.suppress(Exception):
                    self.w._ops.set_visibility(delivery, 0)


def _group(delivery: Delivery) -> tuple[str, str] | None:
    group = delivery.attributes.get("MessageGroupId")
    if group is None or not delivery.queue_url.endswith(".fifo"):
        return None
    return (delivery.queue_url, str(group))
