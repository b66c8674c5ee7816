"""JobContext: what a handler gets beside its payload."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sqsjobs.job import Job
    from sqsjobs.transport.sqs import Delivery


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
    _cancel: threading.Event = field(default_factory=threading.Event, repr=False)
    _interrupt: asyncio.Event = field(default_factory=asyncio.Event, repr=False)
    _interrupt_reason: str = field(default="", repr=False)

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

    def interrupt(self, reason: str) -> None:
        """Ask the execution to stop waiting for the handler (``cancel``, ``shutdown``, ``lease_lost``)."""
        if not self._interrupt_reason:
            self._interrupt_reason = reason
        self._cancel.set()
        self._interrupt.set()
