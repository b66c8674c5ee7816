"""JobContext: what a handler gets beside its payload."""

from __future__ import annotations

import asyncio
import enum
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sqsjobs.delivery import Delivery
    from sqsjobs.job import Job


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
    #: outside chains). Read once, before the handler starts (``sqsjobs.workflows.chain_hook``).
    previous_result: Any = None
    #: Adds items to batches (``sqsjobs.workflows.batches.ItemStream``), set by the worker.
    batches: Any = field(default=None, repr=False)
    _cancel: threading.Event = field(default_factory=threading.Event, repr=False)
    _interrupt: asyncio.Event = field(default_factory=asyncio.Event, repr=False)
    _interrupt_reason: InterruptReason | None = field(default=None, repr=False)

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
