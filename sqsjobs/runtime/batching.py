"""Batch handlers: claimed jobs of a batch type wait in a collector, then one handler call runs them all.

A batch type (``@job(batch=BatchOptions(...))``) changes one thing in the job's path: the run
stage's call of the handler. Everything around it stays each job's own::

    claim (one job, one conditional write, as always) ──▶ run stage: payload, context, timeout
        ──▶ Collectors.submit ── waits in its type's collector ──┐
                    max_size jobs wait, or max_wait_s passed since the first (Lambda: no record left)
        ◀── its own outcome ◀── ONE handler call over the whole list ◀┘
    ──▶ record stage: the job's own finish write, hooks, ack (retry, dead, DLQ as for a single job)

Only a claimed job enters a collector, and it leaves when its outcome comes back or its run ends
(timeout, shutdown, a lost lease, a cancel): a duplicate message's claim is refused before, so one
job is never in two calls. While a job waits it is a running job to its host: its lease is renewed
and its message kept hidden by the heartbeat. The host lends the collector two things: ``hold``,
told when a job starts waiting (the ECS worker sets its message aside from the ones held ahead of a
slot: a collector's own ``max_size`` bounds those), and ``call_slot``, held for the length of one
call (a call is one handler running, one slot). A call the slot refuses (a drain began) runs none
of its jobs: each is interrupted as a shutdown and released, like any job not yet started.

A job starts with its call, not with its claim: one whose deadline (``expires_after``) passed while
it waited, gathering or for the call's slot, is left out of the call and ends ``expired`` unrun, its
attempt given back (``Kernel.late``, as for a job claimed ahead of a free slot).

What a handler returns is matched to its jobs here (``outcomes``): a list in the items' order or
a mapping by job id. A job the answer gives no outcome gets ``BatchOutcomeError`` (a failed attempt,
retried by its type's policy, never lost); an answer of the wrong length, or naming jobs not in the
call, gives it to every job of the call. A call that raises fails each job's attempt with what it
raised.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqsjobs.context import InterruptReason
from sqsjobs.errors import BatchOutcomeError, PermanentError, Retry, StartTooLate
from sqsjobs.options import BatchDead, BatchItem, BatchRetry, BatchSuccess

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable
    from concurrent.futures import Executor
    from contextlib import AbstractAsyncContextManager

    from sqsjobs.context import JobContext
    from sqsjobs.delivery import Delivery
    from sqsjobs.registry import HandlerSpec
    from sqsjobs.runtime.kernel import Kernel

    #: ``hold(delivery)``: the delivery's job now waits in a collector.
    Hold = Callable[[Delivery], Awaitable[None]]
    #: ``call_slot(deliveries)``: held while one call runs; yields False when refused (a drain).
    CallSlot = Callable[[Sequence[Delivery]], AbstractAsyncContextManager[bool]]


def outcomes(items: Sequence[BatchItem[Any]], returned: Any) -> list[Any]:
    """Each item's outcome as the run stage takes it: a result, or the exception its attempt fails with."""
    if isinstance(returned, Mapping):
        ids = {item.job_id for item in items}
        extra = [k for k in returned if k not in ids]
        if extra:
            return [
                BatchOutcomeError(
                    f"the batch handler returned outcomes for jobs not in its call: {extra[:5]}"
                )
            ] * len(items)
        return [
            _one(returned[item.job_id])
            if item.job_id in returned
            else BatchOutcomeError(f"the batch handler returned no outcome for job {item.job_id}")
            for item in items
        ]
    if not isinstance(returned, Sequence) or isinstance(returned, str | bytes):
        what = f"{type(returned).__name__}, not a list of outcomes or a mapping of them by job id"
        return [BatchOutcomeError(f"the batch handler returned {what}")] * len(items)
    if len(returned) != len(items):
        error = BatchOutcomeError(
            f"the batch handler returned {len(returned)} outcomes for {len(items)} jobs"
        )
        return [error] * len(items)
    return [_one(o) for o in returned]


def _one(outcome: Any) -> Any:
    if isinstance(outcome, BatchSuccess):
        return outcome.result
    if isinstance(outcome, BatchRetry):
        return Retry(outcome.reason, delay_s=outcome.delay_s)
    if isinstance(outcome, BatchDead):
        return PermanentError(outcome.reason)
    if isinstance(outcome, Exception):
        return outcome
    return BatchOutcomeError(
        f"{type(outcome).__name__} is not an outcome (BatchSuccess, BatchRetry, BatchDead)"
    )


async def call(spec: HandlerSpec, items: list[BatchItem[Any]], pool: Executor | None) -> list[Any]:
    """One handler call: an async handler on the loop, a sync one in ``pool``; each item's outcome."""
    if spec.is_async:
        returned = await spec.fn(items)
    else:
        run = functools.partial(contextvars.copy_context().run, spec.fn, items)
        returned = await asyncio.get_running_loop().run_in_executor(pool, run)
    return outcomes(items, returned)


async def call_one(spec: HandlerSpec, payload: Any, ctx: JobContext, pool: Executor | None) -> Any:
    """A batch type's job alone (``sqsjobs.testing.run_job``): a call of one; its result, or raises."""
    (outcome,) = await call(spec, [BatchItem(payload, ctx)], pool)
    if isinstance(outcome, BaseException):
        raise outcome
    return outcome


@contextlib.asynccontextmanager
async def under(semaphore: asyncio.Semaphore) -> AsyncIterator[bool]:
    """A call slot taken from a semaphore (Lambda's records): granted once acquired, never refused."""
    async with semaphore:
        yield True


@dataclass(eq=False)
class _Waiting:
    item: BatchItem[Any]
    outcome: asyncio.Future[Any]


@dataclass
class _Collector:
    """The jobs of one type waiting for their call."""

    spec: HandlerSpec
    waiting: list[_Waiting] = field(default_factory=list)
    timer: asyncio.TimerHandle | None = None


class Collectors:
    """The collectors of one host, one per batch type (see the module docstring)."""

    def __init__(
        self,
        kernel: Kernel,
        *,
        pool: Executor | None = None,
        hold: Hold | None = None,
        call_slot: CallSlot | None = None,
        until_idle: bool = False,
    ) -> None:
        """``until_idle``: also call once no expected delivery is still on its way (Lambda's invocation)."""
        self.kernel = kernel
        self._pool = pool
        self._hold = hold
        self.call_slot = call_slot
        self._until_idle = until_idle
        self._collectors: dict[str, _Collector] = {}
        #: Deliveries of each batch type still on their way to a collector (``until_idle``), by message id.
        self._expected: dict[str, set[str]] = {}
        self._calls: set[asyncio.Task[None]] = set()
        #: Set by a drain: a job that still arrives is called with whatever waits at the next turn.
        self._draining = False

    async def submit(self, spec: HandlerSpec, payload: Any, ctx: JobContext) -> Any:
        """Wait in ``spec``'s collector for the call; this job's result, or raise what its attempt fails with."""
        assert spec.batch is not None
        collector = self._collectors.setdefault(spec.name, _Collector(spec))
        waiting = _Waiting(BatchItem(payload, ctx), asyncio.get_running_loop().create_future())
        collector.waiting.append(waiting)
        if ctx.delivery is not None:
            self._expected.get(spec.name, set()).discard(ctx.delivery.message_id)
        if len(collector.waiting) >= spec.batch.max_size or self._idle(spec.name):
            self.flush(spec.name)
        elif collector.timer is None:
            wait_s = 0.0 if self._draining else spec.batch.max_wait_s
            collector.timer = asyncio.get_running_loop().call_later(wait_s, self.flush, spec.name)
        if self._hold is not None and ctx.delivery is not None:
            await self._hold(ctx.delivery)
        try:
            return await waiting.outcome
        finally:  # its run ended first (timeout, shutdown, lost lease, cancel): it leaves the collector
            if waiting in collector.waiting:
                collector.waiting.remove(waiting)

    def expect(self, spec: HandlerSpec, message_id: str) -> None:
        """A delivery of ``spec`` is on its way (``until_idle``): no call before it arrives or ``settled``."""
        self._expected.setdefault(spec.name, set()).add(message_id)

    def settled(self, message_id: str) -> None:
        """The delivery is done with, whether its job entered a collector or not (refused, deferred)."""
        for name, expected in self._expected.items():
            if message_id in expected:
                expected.discard(message_id)
                if self._idle(name):
                    self.flush(name)

    def _idle(self, name: str) -> bool:
        return self._until_idle and not self._expected.get(name)

    def flush(self, name: str) -> None:
        """Call ``name``'s handler now with every job waiting (up to ``max_size`` per call)."""
        collector = self._collectors.get(name)
        if collector is None:
            return
        if collector.timer is not None:
            collector.timer.cancel()
            collector.timer = None
        waiting = [w for w in collector.waiting if not w.outcome.done()]
        collector.waiting.clear()
        size = collector.spec.batch.max_size if collector.spec.batch else 1
        for start in range(0, len(waiting), size):
            task = asyncio.create_task(self._call(collector.spec, waiting[start : start + size]))
            self._calls.add(task)
            task.add_done_callback(self._calls.discard)

    def flush_all(self) -> None:
        """Call every collector's handler now, and from now on without waiting (a drain)."""
        self._draining = True
        for name in list(self._collectors):
            self.flush(name)

    async def _call(self, spec: HandlerSpec, waiting: list[_Waiting]) -> None:
        deliveries = [w.item.ctx.delivery for w in waiting if w.item.ctx.delivery is not None]
        slot = self.call_slot(deliveries) if self.call_slot is not None else contextlib.nullcontext(True)
        refused = False
        try:
            async with slot as granted:
                live = [w for w in waiting if not w.outcome.done()]  # a run may end while the call waits
                if granted:  # a job starts with its call: one whose deadline passed meanwhile never starts
                    for w in live:
                        if (reason := self.kernel.late(spec, w.item.ctx.job)) is not None:
                            w.outcome.set_exception(StartTooLate(reason))
                    live = [w for w in live if not w.outcome.done()]
                if not granted:  # a drain began: not started, so released like any job waiting for a slot
                    for w in live:
                        w.item.ctx.interrupt(InterruptReason.SHUTDOWN)  # the run stage releases it
                    refused = True
                    return
                if not live:
                    return
                self.kernel.logger.info(
                    "batch handler called", extra={"job_type": spec.name, "jobs": len(live)}
                )
                try:
                    answers = await call(spec, [w.item for w in live], self._pool)
                except Exception as exc:  # the whole call failed: one failed attempt for each of its jobs
                    answers = [exc] * len(live)
                for w, answer in zip(live, answers, strict=True):
                    if w.outcome.done():
                        continue
                    if isinstance(answer, BaseException):
                        w.outcome.set_exception(answer)
                    else:
                        w.outcome.set_result(answer)
        finally:  # cancelled mid-call: no job is left waiting for an answer that never comes
            for w in [] if refused else waiting:  # refused: no answer, the runs end on their interrupt
                if not w.outcome.done():
                    w.outcome.set_exception(BatchOutcomeError("the batch call ended without an answer"))
