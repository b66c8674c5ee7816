"""The SQS message body: a small, versioned hint naming a job. The record holds everything else.

Messages stay a few dozen bytes because the payload lives in the record (the claim returns it),
which makes a duplicated, late or stale message harmless: it only says "look at job X".
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
        job_id, job_type = data.get("id"), data.get("type")
        if not isinstance(job_id, str) or not job_id or not isinstance(job_type, str) or not job_type:
            raise EnvelopeError(f"envelope lacks a job id or type: {body[:80]!r}")
        return cls(job_id=job_id, job_type=job_type, version=version)
