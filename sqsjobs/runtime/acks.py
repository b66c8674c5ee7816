"""Acks: what to do with an SQS message once the job's record has been written (DESIGN §3.3).

The execution decides an ``Ack`` for each delivery; the ECS worker and the Lambda adapter apply it
(delete, re-arm, release, dead-letter or leave the message). It lives apart from the execution so
that schedule fires, which end in the same acks, need not import the execution.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass, field
from typing import Literal

from sqsjobs import envelope as env
from sqsjobs.job import FailureRecord


@dataclass(frozen=True)
class Ack:
    """What to do with the message once the record is written."""

    #: ``delete``: done with; ``rearm``: hide for ``delay_s`` (a retry or an early hint);
    #: ``dead_letter``: copy to the DLQ with ``attributes``, then delete; ``release``: visible now;
    #: ``leave``: do nothing (another worker owns the job, or the record could not be written).
    kind: Literal["delete", "rearm", "dead_letter", "release", "leave"]
    delay_s: int = 0
    attributes: dict[str, str] = field(default_factory=dict)


DELETE = Ack("delete")
LEAVE = Ack("leave")
RELEASE = Ack("release")


def dead_letter(
    reason: str, *, job_id: str = "", job_type: str = "", error: FailureRecord | None = None, queue: str = ""
) -> Ack:
    """An Ack that copies the message to the DLQ with the reason in its attributes."""
    attrs = {env.DLQ_REASON: reason, env.DLQ_SOURCE_QUEUE: queue}
    if job_id:
        attrs[env.DLQ_JOB_ID] = job_id
    if job_type:
        attrs[env.DLQ_JOB_TYPE] = job_type
    if error is not None:
        attrs[env.DLQ_ERROR_CLASS] = error.error_class
        attrs[env.DLQ_ERROR_MESSAGE] = error.message
    return Ack("dead_letter", attributes=attrs)


def failure_record(exc: BaseException) -> FailureRecord:
    """Class, message and the last frames of the traceback, truncated to keep the item small."""
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__, limit=-3))
    return FailureRecord(error_class=type(exc).__name__, message=str(exc)[:1000], traceback=tb[-2000:])
