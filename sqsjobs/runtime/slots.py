"""A worker's slots: ``concurrency`` bounds the handlers running at once, and nothing else.

A message a worker holds is in one of three places, each counted here and nowhere else:

- **ahead**: received (or being received), its claim in flight or done, waiting for a handler slot;
- **running**: its handler runs in a slot (a batch call of several messages takes one slot);
- **behind**: its handler ended; its finish write and its ack are in flight.

Claims and finishes are round trips to DynamoDB that run no user code: holding a slot through them
would leave a handler slot idle for two round trips per job. So a slot is taken just before the
handler starts and given back as soon as it ends. What the worker holds around its slots is
bounded by ``held_ahead`` (``Settings.held_ahead``): receives stop while that many messages are
ahead, or that many are behind, so a slow DynamoDB cannot make a worker hoard messages another
worker could run. ``held_ahead=0`` claims nothing ahead (a receive only for free slots), the finish
still happens outside the slot.

Unset, the bound follows the handlers: ``concurrency`` until handlers have run, and while they are
long; while they are short, as many as the slots get through in ``AHEAD_WAIT_S`` (handler time
averaged over the recent runs), up to ``SHORT_AHEAD`` — two full receives, which a worker of few
slots needs ahead to keep them busy through the round trips of the receive and the claim. A message claimed ahead
then waits a fraction of a second for its slot, never long enough to be a job another worker
should have run; and short handlers no longer wait for claims: with ``concurrency`` ahead, eight
slots of no-op jobs idled through each claim's round trip (the drain at concurrency 8 went from
about 190 to 250-320 jobs/s with 20 ahead: docs/bench.md).

Free slots go to the waiting messages in the order they were received (``Hold.ticket``), a queue
at its cap (``queue_concurrency``) letting the next queue's message pass. A queue with priority
levels receives only for slots that are free (``reserve(..., within_slots=True)``), so the order of
its handler starts stays the one its rotation picked (``runtime/levels.py``): a high job arriving
never waits behind low ones claimed ahead of it.

A batch type's job waits for its call in a collector (``runtime/batching.py``), however many slots
are free: its message is **set aside**, no longer ahead (``set_aside``), so a collector can gather
more jobs than ``held_ahead``. What is set aside is bounded by ``aside_cap`` (the largest batch's
``max_size``): receives stop while that many wait for their calls.

At a drain, ``close`` refuses every waiting and later slot request: the messages held ahead are
released without running (their hosts put them back at once), the running ones finish.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections import Counter
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Mapping, Sequence

AHEAD, ASIDE, RUNNING, BEHIND, GONE = "ahead", "aside", "running", "behind", "gone"


class Hold:
    """One message this worker holds, from its receive to its ack: where it is (``state``)."""

    __slots__ = ("queue", "state", "ticket")

    def __init__(self, queue: str, ticket: int) -> None:
        self.queue = queue
        self.ticket = ticket
        self.state = AHEAD


#: Unset ``held_ahead``: the most messages ahead of short handlers (two full receives), if more than ``concurrency``.
SHORT_AHEAD = 20
#: Unset ``held_ahead``: hold ahead what the slots run in this long, at the recent handler time.
AHEAD_WAIT_S = 0.2
#: Weight of the latest handler time in the running average the unset bound reads.
RUN_TIME_WEIGHT = 0.2


class Slots:
    """The handler slots of one worker and the bounded holds around them (see the module docstring)."""

    def __init__(
        self,
        concurrency: int,
        caps: Mapping[str, int],
        held_ahead: int | None,
        queues: int = 1,
        aside_cap: int = 0,
    ) -> None:
        """``caps``: per-queue slot caps (``queue_concurrency``); ``queues``: how many share the receives.

        ``held_ahead``: None follows the handlers' time (see the module docstring); 0: no claims
        ahead of a free slot. ``aside_cap``: the most jobs waiting in batch collectors before receives stop.
        """
        self.concurrency = concurrency
        self._caps = caps
        self._held_ahead = held_ahead
        #: Recent handler time (seconds, a running average); None until a handler has run.
        self.run_s: float | None = None
        self._queues = max(1, queues)
        self.running = 0
        self.ahead = 0
        self.behind = 0
        self.aside = 0
        self.aside_cap = aside_cap
        self.running_by_queue: Counter[str] = Counter()
        self.ahead_by_queue: Counter[str] = Counter()
        #: The most messages ever ahead, and handlers ever running, at once (the worker's gauges).
        self.peak_ahead = 0
        self.peak_running = 0
        self._tickets = itertools.count()
        #: Slot requests waiting, by ticket: a grant goes to the oldest one its queue's cap lets pass.
        self._waiting: dict[int, tuple[str, asyncio.Future[bool]]] = {}
        self._changed = asyncio.Event()
        self.closed = False

    @property
    def held_ahead(self) -> int:
        """The most messages ahead of the slots now (0: none)."""
        if self._held_ahead is not None:
            return self._held_ahead
        if self.run_s is None:
            return self.concurrency
        runs = int(self.concurrency * AHEAD_WAIT_S / max(self.run_s, 1e-4))
        return max(self.concurrency, min(SHORT_AHEAD, runs))

    def cap(self, queue: str) -> int:
        """The handlers ``queue`` may run at once."""
        return min(self._caps.get(queue, self.concurrency), self.concurrency)

    # ── receive side: places ahead ─────────────────────────────────────────────────────────
    def free_ahead(self, queue: str, *, within_slots: bool = False) -> int:
        """Messages ``queue`` may receive now (0 while too many finish, or after ``close``)."""
        bound = self.held_ahead  # read once: unset, it is worked out from the handlers' time
        behind = bound or self.concurrency  # the most messages finishing before receives stop
        if self.closed or self.behind >= behind or (self.aside and self.aside >= self.aside_cap):
            return 0
        if within_slots or not bound:
            return max(
                0,
                min(
                    self.concurrency - self.running - self.ahead,
                    self.cap(queue) - self.running_by_queue[queue] - self.ahead_by_queue[queue],
                ),
            )
        return max(
            0,
            min(
                bound - self.ahead,
                (min(self._caps[queue], bound) if queue in self._caps else bound)
                - self.ahead_by_queue[queue],
            ),
        )

    def busy(self) -> bool:
        """Anything held: a receive for a backlog may wait a moment to fetch a fuller batch."""
        return bool(self.running or self.ahead or self.behind or self.aside)

    async def until(self, ready: Callable[[], bool]) -> None:
        """Wait until ``ready()`` holds (re-checked at every change of the counts)."""
        while not ready():
            self._changed.clear()
            await self._changed.wait()

    async def reserve(self, queue: str, *, most: int, within_slots: bool = False) -> int:
        """Wait for a free place ahead and reserve up to ``most`` (a queue's share of what is free).

        Once closed it reserves one at once: the caller sees the drain and gives it back unused.
        """
        await self.until(lambda: self.closed or self.free_ahead(queue, within_slots=within_slots) >= 1)
        if self.closed:
            self._add_ahead(queue, 1)
            return 1
        free = self.free_ahead(queue, within_slots=within_slots)
        bound = self.held_ahead
        total = bound - self.ahead if bound and not within_slots else free
        n = max(1, min(most, free, total // self._queues))
        self._add_ahead(queue, n)
        return n

    def unreserve(self, queue: str, n: int) -> None:
        """Give back ``n`` reserved places a receive did not fill."""
        if n > 0:
            self._add_ahead(queue, -n)

    def set_aside(self, hold: Hold) -> None:
        """The message's job waits in a batch collector: out of the places ahead, into ``aside``."""
        if hold.state == AHEAD:
            self._add_ahead(hold.queue, -1)
            hold.state = ASIDE
            self.aside += 1

    def hold(self, queue: str) -> Hold:
        """A received message, in a place reserved ahead; its ticket orders its slot request."""
        return Hold(queue, next(self._tickets))

    # ── handler side ──────────────────────────────────────────────────────────────────────
    @contextlib.asynccontextmanager
    async def slot(
        self, holds: Sequence[Hold], interrupt: asyncio.Event | None = None
    ) -> AsyncIterator[bool]:
        """One handler slot for ``holds`` (one message, or a batch call's): True once granted.

        Yields False without a slot when ``interrupt`` is set or the worker closes first: the
        caller releases its messages without running them. On exit the messages go behind.
        """
        granted = await self._acquire(holds, interrupt)
        started = time.monotonic()
        try:
            yield granted
        finally:
            if granted:
                ran = time.monotonic() - started
                self.run_s = ran if self.run_s is None else self.run_s + RUN_TIME_WEIGHT * (ran - self.run_s)
                queue = holds[0].queue
                self.running -= 1
                self.running_by_queue[queue] -= 1
                for hold in holds:
                    hold.state = BEHIND
                self.behind += len(holds)
                self._grant()

    async def _acquire(self, holds: Sequence[Hold], interrupt: asyncio.Event | None) -> bool:
        if self.closed:
            return False
        ticket = min(hold.ticket for hold in holds)
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiting[ticket] = (holds[0].queue, future)
        self._grant()
        stop = asyncio.ensure_future(interrupt.wait()) if interrupt is not None else None
        try:
            if not future.done():
                await asyncio.wait(
                    {future} | ({stop} if stop else set()), return_when=asyncio.FIRST_COMPLETED
                )
        except BaseException:  # cancelled: a slot granted meanwhile is free again
            self._waiting.pop(ticket, None)
            if future.done() and future.result():
                self._give_back(holds)
            future.cancel()
            raise
        finally:
            if stop is not None:
                stop.cancel()
        if not future.done():  # interrupted first
            self._waiting.pop(ticket, None)
            future.cancel()
            return False
        granted = future.result()
        if granted:
            ahead = sum(hold.state == AHEAD for hold in holds)
            self.aside -= sum(hold.state == ASIDE for hold in holds)
            for hold in holds:
                hold.state = RUNNING
            self._add_ahead(holds[0].queue, -ahead)
        return granted

    def _give_back(self, holds: Sequence[Hold]) -> None:
        self.running -= 1
        self.running_by_queue[holds[0].queue] -= 1
        self._grant()

    def _grant(self) -> None:
        """Free slots to the oldest waiting requests their queues' caps let pass."""
        for ticket in sorted(self._waiting):
            if self.running >= self.concurrency:
                break
            queue, future = self._waiting[ticket]
            if self.running_by_queue[queue] >= self.cap(queue):
                continue
            del self._waiting[ticket]
            if future.done():
                continue
            self.running += 1
            self.running_by_queue[queue] += 1
            self.peak_running = max(self.peak_running, self.running)
            future.set_result(True)
        self._changed.set()

    # ── end of a hold ─────────────────────────────────────────────────────────────────────
    def release(self, hold: Hold) -> None:
        """The message left the worker (acked, or never run): its place ahead or behind is free."""
        if hold.state == AHEAD:
            self._add_ahead(hold.queue, -1)
        elif hold.state == ASIDE:
            self.aside -= 1
            self._changed.set()
        elif hold.state == BEHIND:
            self.behind -= 1
            self._changed.set()
        hold.state = GONE

    def close(self) -> None:
        """A drain: refuse every waiting and later slot request, and every receive."""
        self.closed = True
        for _queue, future in self._waiting.values():
            if not future.done():
                future.set_result(False)
        self._waiting.clear()
        self._changed.set()

    def _add_ahead(self, queue: str, n: int) -> None:
        self.ahead += n
        self.ahead_by_queue[queue] += n
        self.peak_ahead = max(self.peak_ahead, self.ahead)
        self._changed.set()
