"""The SQS message body: a small, versioned hint naming a job. The record holds everything else.

Messages stay a few dozen bytes because the payload lives in the record (the claim returns it),
which makes a duplicated, late or stale message harmless: it only says "look at job X".

A second kind, ``Fire``, is what EventBridge Scheduler (or the local firing loop of ``sqsjobs dev``)
sends for one occurrence of a schedule; the worker turns it into a job (``sqsjobs.schedules.fire``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sqsjobs.errors import EnvelopeError, UnknownEnvelopeVersion

ENVELOPE_VERSION = 1

#: Message attributes the framework sets on messages it dead-letters.
DLQ_REASON = "sqsjobs-reason"
DLQ_ERROR_CLASS = "sqsjobs-error-class"
DLQ_ERROR_MESSAGE = "sqsjobs-error-message"
DLQ_JOB_ID = "sqsjobs-job-id"
DLQ_JOB_TYPE = "sqsjobs-job-type"
DLQ_SOURCE_QUEUE = "sqsjobs-source-queue"


@dataclass(frozen=True)
class Envelope:
    """``{"v": 1, "id": ..., "type": ...}``."""

    job_id: str
    job_type: str
    version: int = ENVELOPE_VERSION

    def to_body(self) -> str:
        """Serialise for SendMessage."""
        return json.dumps(
            {"v": self.version, "id": self.job_id, "type": self.job_type}, separators=(",", ":")
        )

    @classmethod
    def from_body(cls, body: str) -> Envelope:
        """Parse a message body; ``EnvelopeError`` says why it is not one of ours."""
        return cls._from_data(_load(body), body)

    @classmethod
    def _from_data(cls, data: dict[str, Any], body: str) -> Envelope:
        job_id, job_type = data.get("id"), data.get("type")
        if not isinstance(job_id, str) or not job_id or not isinstance(job_type, str) or not job_type:
            raise EnvelopeError(f"envelope lacks a job id or type: {body[:80]!r}")
        return cls(job_id=job_id, job_type=job_type, version=data["v"])


#: EventBridge Scheduler replaces this with the occurrence's time (``2026-12-01T08:00:00Z``);
#: some emulators deliver it unchanged.
SCHEDULED_TIME = "<aws.scheduler.scheduled-time>"


@dataclass(frozen=True)
class Fire:
    """``{"v": 1, "fire": schedule, "at": time, "job": type, "payload": ...}``: one occurrence of a schedule.

    The job type and payload travel in the fire, so what runs is what was applied to Scheduler.
    """

    schedule: str
    #: The scheduled time (ISO 8601, UTC) or, before substitution, ``SCHEDULED_TIME``.
    at: str
    job_type: str
    payload: Any = None
    version: int = ENVELOPE_VERSION

    def to_body(self) -> str:
        """Serialise (canonical JSON, so a plan compares it textually)."""
        data = {
            "v": self.version,
            "fire": self.schedule,
            "at": self.at,
            "job": self.job_type,
            "payload": self.payload,
        }
        return json.dumps(data, separators=(",", ":"), sort_keys=True)

    @classmethod
    def _from_data(cls, data: dict[str, Any], body: str) -> Fire:
        schedule, at, job_type = data.get("fire"), data.get("at"), data.get("job")
        if not all(isinstance(v, str) and v for v in (schedule, at, job_type)):
            raise EnvelopeError(f"schedule fire lacks a schedule name, time or job type: {body[:80]!r}")
        return cls(str(schedule), str(at), str(job_type), data.get("payload"), data["v"])


def parse(body: str) -> Envelope | Fire:
    """Parse any sqsjobs message body: a job hint or a schedule fire."""
    data = _load(body)
    return Fire._from_data(data, body) if "fire" in data else Envelope._from_data(data, body)


def _load(body: str) -> dict[str, Any]:
    """The JSON object of a body carrying our version; ``EnvelopeError`` says why it is not one of ours."""
    try:
        data: Any = json.loads(body)
    except (ValueError, TypeError) as exc:
        raise EnvelopeError(f"message body is not JSON: {body[:80]!r}") from exc
    if not isinstance(data, dict):
        raise EnvelopeError(f"message body is not a JSON object: {body[:80]!r}")
    version = data.get("v")
    if version != ENVELOPE_VERSION:
        if isinstance(version, int) and version > ENVELOPE_VERSION:
            raise UnknownEnvelopeVersion(
                f"envelope version {version} is newer than this worker's {ENVELOPE_VERSION}"
            )
        raise EnvelopeError(f"message body has no sqsjobs envelope version: {body[:80]!r}")
    return data
