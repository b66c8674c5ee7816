"""JobContext: what a handler gets beside its payload."""

from __future__ import annotations

import asyncio
import contextvars
import enum
import threading
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from sqsjobs.job import Progress

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from sqsjobs.delivery import Delivery
    from sqsjobs.job import Job
    from sqsjobs.retry import RetryPolicy

#: The tags of the job whose handler runs in this context (set by the worker around the handler):
#: a job the handler enqueues inherits them, its own tags winning (``producer.build_new_job``).
RUNNING_TAGS: contextvars.ContextVar[Mapping[str, str] | None] = contextvars.ContextVar(
    "sqsjobs_running_tags", default=None
)


class InterruptReason(enum.StrEnum):
    """Why the execution stopped waiting for a handler before it returned.

    A handler that simply outlives its timeout is not interrupted: no reason is set, and the
    execution records a ``JobTimeout``.
    """

    #: An operator asked to cancel the running job (seen at a heartbeat): it ends ``cancelled``.
    CANCEL = "cancel"
    #: The worker is shutting down: the job is released (queued again, the attempt given back).
    SHUTDOWN = "shutdown"
    #: A heartbeat found another owner: nothing more is written for this run.
    LEASE_LOST = "lease_lost"


@dataclass
class JobContext:
    """The running job, its deadline and its fencing token; shared by sync and async handlers."""

    #: The record as claimed (attempt and epoch already incremented).
    job: Job
    #: Id of the worker process running it.
    worker_id: str
    #: Epoch seconds after which the handler is abandoned as timed out.
    deadline: float
    #: Structured logger with the job's fields attached.
    logger: Any
    #: The SQS delivery that brought the job (None when run by ``sqsjobs.testing``).
    delivery: Delivery | None = None
    #: A chain step's view of the step before it: that step's result (None for the first step and
    #: outside chains). Read once, before the handler starts (``sqsjobs.chains.plugin``).
    previous_result: Any = None
    #: Adds items to batches (``sqsjobs.batches.namespace.ItemStream``), set by the worker.
    batches: Any = field(default=None, repr=False)
    #: Records durable steps (``sqsjobs.steps.book``): set by the worker and by ``sqsjobs.testing``.
    steps: Any = field(default=None, repr=False)
    _steps_run: Any = field(default=None, repr=False)
    #: Awaits children (``sqsjobs.children.namespace.ChildBook``): set by the worker; see ``children``.
    _children: Any = field(default=None, repr=False)
    #: Waits for signals (``sqsjobs.signals.waits.SignalBook``): set by the worker; see ``signals``.
    _signals: Any = field(default=None, repr=False)
    _cancel: threading.Event = field(default_factory=threading.Event, repr=False)
    _interrupt: asyncio.Event = field(default_factory=asyncio.Event, repr=False)
    _interrupt_reason: InterruptReason | None = field(default=None, repr=False)
    _progress: Progress | None = field(default=None, repr=False)
    _progress_written: Progress | None = field(default=None, repr=False)

    @property
    def job_id(self) -> str:
        """The job's id."""
        return self.job.id

    @property
    def attempt(self) -> int:
        """This attempt's number, from 1."""
        return self.job.attempt

    @property
    def fencing_token(self) -> str:
        """``<job id>:<epoch>``: make downstream writes conditional on it to shut out a stale run."""
        return self.job.fencing_token

    @property
    def cancel_requested(self) -> bool:
        """True once an operator asked to cancel this job, or the worker is shutting down: stop soon."""
        return self._cancel.is_set()

    @property
    def interrupt_reason(self) -> InterruptReason | None:
        """Why the execution stopped waiting for the handler, if it did; the first reason wins."""
        return self._interrupt_reason

    def progress(self, fraction: float | None = None, message: str | None = None, data: Any = None) -> None:
        """Report how far the job has come; the next lease renewal writes it (no write of its own).

        ``fraction``: done/total, 0 to 1; ``message``: a line for people (at most 500 characters);
        ``data``: small JSON (at most 2 KB). Each report replaces the one before; ``jobs get``, the
        API, the console and ``GET /jobs/{id}/events`` show the last one written. A renewal comes
        about every half lease (``lease_s / 2``): reports made between two are written as the last
        of them, and one made after the last renewal before the end is not written (docs/results.md).
        ``ValueError`` for a report out of those bounds. Safe from sync and async handlers alike.
        """
        latest = self._progress or self.job.progress  # numbering goes on from what the record shows
        number = (latest.report if latest is not None else 0) + 1
        self._progress = Progress(fraction=fraction, message=message, data=data, report=number)

    def unwritten_progress(self) -> Progress | None:
        """The latest report, if no renewal has written it yet (the worker's side of ``progress``)."""
        latest = self._progress
        return latest if latest is not self._progress_written else None

    def progress_written(self, report: Progress | None) -> None:
        """A renewal wrote ``report`` (the worker's side of ``progress``)."""
        if report is not None:
            self._progress_written = report

    def add_to_batch(
        self,
        batch_id: str,
        job_type: Any,
        payload: Any = None,
        *,
        dedupe_key: str | None = None,
        **options: Any,
    ) -> str:
        """Stream an item into batch ``batch_id`` (typically a child batch created up front); its job id.

        The item's ``parent_id`` is this job. For sync handlers (they run in a thread); an async
        handler awaits ``aadd_to_batch``. See ``Batch.add`` for ``dedupe_key`` and the options.
        """
        return str(self._stream().add(self, batch_id, job_type, payload, dedupe_key=dedupe_key, **options))

    async def aadd_to_batch(
        self,
        batch_id: str,
        job_type: Any,
        payload: Any = None,
        *,
        dedupe_key: str | None = None,
        **options: Any,
    ) -> str:
        """Async ``add_to_batch``."""
        return str(
            await self._stream().aadd(self, batch_id, job_type, payload, dedupe_key=dedupe_key, **options)
        )

    def step(
        self,
        name: str,
        fn: Callable[..., Any],
        *args: Any,
        attempts: int = 1,
        backoff: RetryPolicy | None = None,
    ) -> Any:
        """Run ``fn(*args)`` once for this job across all its attempts; its (JSON) result (docs/steps.md).

        A step an earlier attempt recorded returns that result without calling ``fn``; a new one
        runs, and its result is recorded (fenced by this run's claim) before this returns. ``name``
        is unique in a run (``StepError`` otherwise). ``fn`` raising is retried here up to
        ``attempts`` times (waits from ``backoff``), then raises into the handler: the job's retry
        policy takes over, and the next attempt resumes at this step. Called from an async handler
        (on the event loop), this returns an awaitable: ``await ctx.step(...)``, as ``astep``.
        """
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            book = self._book()
            return book.run(book.step(self, name, fn, args, attempts, backoff))
        return self.astep(name, fn, *args, attempts=attempts, backoff=backoff)

    async def astep(
        self,
        name: str,
        fn: Callable[..., Any],
        *args: Any,
        attempts: int = 1,
        backoff: RetryPolicy | None = None,
    ) -> Any:
        """Async ``step``: ``fn`` may be a coroutine function (a sync one runs in a thread)."""
        book = self._book()
        return await book.arun(book.step(self, name, fn, args, attempts, backoff))

    def sleep(self, delay: timedelta | float) -> Any:
        """End this run without using an attempt, and go on from here after ``delay`` (docs/steps.md).

        The slot (on Lambda, the invocation) is free while the job sleeps. The next run replays the
        steps before the sleep (their functions are not called again), returns from this call and
        goes on. Sleeps are told apart by their order in the run (the n-th sleep is ``sleep-<n>``).
        ``delay``: a ``timedelta`` or seconds. From an async handler: ``await ctx.sleep(...)``.
        """
        seconds = delay.total_seconds() if isinstance(delay, timedelta) else float(delay)
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return self._book().sleep(self, seconds)
        return self.asleep(seconds)

    async def asleep(self, delay: timedelta | float) -> None:
        """Async ``sleep``."""
        seconds = delay.total_seconds() if isinstance(delay, timedelta) else float(delay)
        await self._book().asleep(self, seconds)

    def create_token(self, *, timeout: timedelta | float) -> Any:
        """A wait token (``sqsjobs.steps.namespace.Token``): hand ``token.id`` to whoever will answer it.

        The same token in every run of the job (it is kept as a step). Answered by
        ``app.tokens.complete(id, value)``, ``app.tokens.fail(id, error)`` or ``POST /tokens/{id}``
        before ``timeout``. From an async handler: ``await ctx.create_token(...)``.
        """
        seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else float(timeout)
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return self._book().create_token(self, seconds)
        return self._book().acreate_token(self, seconds)

    def wait_for_token(self, token: Any) -> Any:
        """The token's answer; without one, the run ends (no attempt used, no slot held) until it comes.

        Raises ``TokenFailed`` (``app.tokens.fail``) or ``TokenTimeout`` (nobody answered in time) in the
        job. From an async handler: ``await ctx.wait_for_token(token)``.
        """
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return self._book().wait_for_token(self, token)
        return self._book().await_token(self, token)

    @property
    def children(self) -> Any:
        """Child jobs awaited without holding a slot (``sqsjobs.children.namespace.ChildCalls``; docs/children.md).

        ``ctx.children.run(type, payload)`` (one child, its result), ``ctx.children.map(type,
        payloads)`` (results in order), ``ctx.children.all(Child(...), Child(...))`` (several types
        together). Each child is an ordinary job; this run ends while they run (no attempt used) and
        the job is woken once when the last one ends, replaying its steps to here.
        """
        if self._children is None:
            raise RuntimeError(
                "this context has no children: ctx.children works in a handler run by a worker"
            )
        return self._children.calls(self)

    @property
    def signals(self) -> Any:
        """Signals waited for without holding a slot (``sqsjobs.signals.waits.SignalCalls``; docs/signals.md).

        ``ctx.signals.wait("order.paid", match={"order_id": 7}, timeout=3600)``: the data of the first
        matching ``app.signals.send`` after the call, or ``SignalTimeout``. The run ends while it
        waits (no attempt used) and the job replays its steps to here when the signal comes.
        """
        if self._signals is None:
            raise RuntimeError("this context has no signals: ctx.signals works in a handler run by a worker")
        return self._signals.calls(self)

    def _book(self) -> Any:
        if self.steps is None:
            raise RuntimeError(
                "this context has no steps: ctx.step works in a handler run by a worker or run_job"
            )
        return self.steps

    def _stream(self) -> Any:
        if self.batches is None:
            raise RuntimeError("this context has no batches: add_to_batch works in a handler run by a worker")
        return self.batches

    def interrupt(self, reason: InterruptReason) -> None:
        """Ask the execution to stop waiting for the handler; the first reason given wins."""
        if self._interrupt_reason is None:
            self._interrupt_reason = InterruptReason(reason)
        self._cancel.set()
        self._interrupt.set()
