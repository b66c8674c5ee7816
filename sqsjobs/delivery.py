"""The delivery model: a received message (``Delivery``), what to do with it (``Ack``), a run's end (``Finish``).

These three sit below both the transport, which receives deliveries and applies acks, and the
runtime, which decides them: the execution writes the job's record first, then returns an ``Ack``
saying what the message is now worth, and its host (``sqsjobs.runtime.execution.apply``) applies it. Features
plugged into the runtime (schedule fires, foreign messages, limits, batches, chains) decide acks
and read finishes through this module too, without importing the runtime.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from sqsjobs import envelope as envelope_format
from sqsjobs.job import FailureRecord

if TYPE_CHECKING:
    from collections.abc import Mapping

    from sqsjobs.job import AttemptOutcome, Job


@dataclass(frozen=True)
class Delivery:
    """One received message: the envelope's wrapper, with what SQS said about this delivery."""

    #: Logical queue name and its URL.
    queue: str
    queue_url: str
    message_id: str
    receipt_handle: str
    body: str
    #: ``ApproximateReceiveCount`` (informational; attempts live in the record).
    receive_count: int
    #: ``SentTimestamp`` in epoch seconds.
    sent_at: float
    attributes: Mapping[str, Any] = field(default_factory=dict)
    message_attributes: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Ack:
    """What to do with the message once the record is written."""

    #: ``delete``: done with; ``rearm``: hide for ``delay_s`` (a retry or an early hint);
    #: ``dead_letter``: copy to the DLQ with ``attributes``, then delete; ``release``: visible now;
    #: ``leave``: do nothing (another worker owns the job, or the record could not be written);
    #: ``resend``: replace it with a fresh copy (receive count 1, ``delay_s`` where the queue takes
    #: one) before SQS's redrive would take it: a job that only waits keeps its witness.
    kind: Literal["delete", "rearm", "dead_letter", "release", "leave", "resend"]
    delay_s: int = 0
    attributes: dict[str, str] = field(default_factory=dict)
    #: The job only waits ``delay_s`` (deferred by a limit, a pause or a breaker; not due; asleep):
    #: its message need not come back through a receive. An ECS worker keeps a serialize key's
    #: head in place instead of applying the ack (``runtime/levels.py``), so the key keeps its order.
    waits: bool = False


DELETE = Ack("delete")
LEAVE = Ack("leave")
RELEASE = Ack("release")


def dead_letter(
    reason: str, *, job_id: str = "", job_type: str = "", error: FailureRecord | None = None, queue: str = ""
) -> Ack:
    """An Ack that copies the message to the DLQ with the reason in its attributes."""
    attrs = {envelope_format.DLQ_REASON: reason, envelope_format.DLQ_SOURCE_QUEUE: queue}
    if job_id:
        attrs[envelope_format.DLQ_JOB_ID] = job_id
    if job_type:
        attrs[envelope_format.DLQ_JOB_TYPE] = job_type
    if error is not None:
        attrs[envelope_format.DLQ_ERROR_CLASS] = error.error_class
        attrs[envelope_format.DLQ_ERROR_MESSAGE] = error.message
    return Ack("dead_letter", attributes=attrs)


def failure_record(exc: BaseException) -> FailureRecord:
    """Class, message and the last frames of the traceback, truncated to keep the item small.

    An error an HTTP worker reported (``RemoteError``) keeps the class and stack it sent.
    """
    error_class = getattr(exc, "error_class", None) or type(exc).__name__
    stack = getattr(exc, "stack", None)
    tb = (
        stack
        if stack is not None
        else "".join(traceback.format_exception(type(exc), exc, exc.__traceback__, limit=-3))
    )
    return FailureRecord(
        error_class=str(error_class)[:200], message=str(exc)[:1000], traceback=str(tb)[-2000:]
    )


@dataclass(frozen=True)
class Finish:
    """One run's end (or a job's end without a run), as the worker is about to record it."""

    #: The job as this run claimed it (its claim token fences the finish write).
    job: Job
    #: ``succeeded``, ``retry``, ``dead``, ``cancelled``, ``released`` or ``expired``.
    outcome: AttemptOutcome
    #: The handler's result as stored in the record (None when in S3: see ``result_ref``).
    result: Any = None
    result_ref: str | None = None
    #: Why the attempt failed (retry, dead).
    error: FailureRecord | None = None
