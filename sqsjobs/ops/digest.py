"""The dead-job digest: the last day's dead jobs grouped by type and error signature.

An operator's morning view (``sqsjobs digest``, scheduled daily by infra/ when job events are
deployed) and the same grouping of the DLQ on demand (``sqsjobs dlq list --group-by error``). A
signature is the error's class plus its message with what varies per job taken out — numbers,
ids, quoted values, addresses — so "order 123 not found" and "order 456 not found" are one line.

Cost: the dead jobs come from the sharded ``attention`` index (the listing ``jobs list --status
dead`` reads, never a scan), then their errors in ``BatchGetItem`` pages of 100 (eventually
consistent: half a read unit each). ``--publish`` sends the digest as one ``DeadJobsDigest`` event on
the App's bus (docs/events.md), where a rule can forward it to SNS or a webhook.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqsjobs.errors import ConfigurationError
from sqsjobs.events.catalogue import Event
from sqsjobs.events.publish import publish_flow
from sqsjobs.job import JobStatus
from sqsjobs.ops import inspect as inspect_ops
from sqsjobs.ops._common import iso
from sqsjobs.runtime.kernel import locate

if TYPE_CHECKING:
    from collections.abc import Iterable

    from sqsjobs._aws import Flow
    from sqsjobs.config import Settings

#: What the scheduled digest function calls (infra/ grants these, the reads on the attention index).
DIGEST_ACTIONS = ("dynamodb:Query", "dynamodb:BatchGetItem", "events:PutEvents")
#: The scheduled digest's Lambda entry point (``handler``).
DIGEST_HANDLER = f"{__name__}.handler"
#: The digest's window by default: a day.
DAY_S = 86_400.0
#: The event name of a published digest.
DIGEST_EVENT = "DeadJobsDigest"
#: Sample job ids kept per group (to inspect one).
SAMPLES = 3
#: A signature's message is cut here (a traceback pasted into a message stays one line).
MAX_SIGNATURE_CHARS = 160

#: What varies per job in an error message, in the order it is replaced: each by a placeholder.
_VARYING = [
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I), "<id>"),
    (re.compile(r"\b(?:\d{1,3}\.){3}\d{1,3}(?::\d+)?\b"), "<addr>"),
    (re.compile(r"\b(?=[0-9a-f]*\d)[0-9a-f]{12,}\b", re.I), "<id>"),
    (re.compile(r"'[^']*'|\"[^\"]*\""), "'<v>'"),
    (re.compile(r"\b\w*\d[\w.-]*\b"), "<n>"),
    (re.compile(r"\s+"), " "),
]


def signature(error_class: str | None, message: str | None) -> str:
    """``Class: message`` with numbers, ids, addresses and quoted values replaced by placeholders."""
    text = message or ""
    for pattern, placeholder in _VARYING:
        text = pattern.sub(placeholder, text)
    text = text.strip()[:MAX_SIGNATURE_CHARS]
    return f"{error_class or 'no error'}: {text}" if text else (error_class or "no error")


@dataclass
class Group:
    """The dead jobs of one type with one error signature."""

    job_type: str
    signature: str
    count: int = 0
    first: float | None = None
    last: float | None = None
    samples: list[str] = field(default_factory=list)

    def add(self, job_id: str, at: float | None) -> None:
        """Count one more job."""
        self.count += 1
        if at is not None:
            self.first = at if self.first is None else min(self.first, at)
            self.last = at if self.last is None else max(self.last, at)
        if len(self.samples) < SAMPLES:
            self.samples.append(job_id)

    def to_dict(self) -> dict[str, Any]:
        """JSON form (ISO timestamps)."""
        return {
            "type": self.job_type,
            "signature": self.signature,
            "count": self.count,
            "first": iso(self.first),
            "last": iso(self.last),
            "samples": list(self.samples),
        }


def group(rows: Iterable[tuple[str, str | None, str | None, str, float | None]]) -> list[Group]:
    """``(type, error class, message, job id, at)`` rows as groups, the largest first."""
    groups: dict[tuple[str, str], Group] = {}
    for job_type, error_class, message, job_id, at in rows:
        sig = signature(error_class, message)
        found = groups.setdefault((job_type, sig), Group(job_type, sig))
        found.add(job_id, at)
    return sorted(groups.values(), key=lambda g: (-g.count, g.job_type, g.signature))


@dataclass(frozen=True)
class Digest:
    """The digest of one window."""

    since: float
    until: float
    groups: list[Group]

    @property
    def total(self) -> int:
        """Dead jobs in the window."""
        return sum(g.count for g in self.groups)

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "since": iso(self.since),
            "until": iso(self.until),
            "total": self.total,
            "groups": [g.to_dict() for g in self.groups],
        }


def digest_flow(settings: Settings, now: float, *, window_s: float = DAY_S) -> Flow[Digest]:
    """The dead jobs that finished in the last ``window_s``, grouped."""
    rows: list[inspect_ops.JobRow] = []
    cursor: str | None = None
    while True:
        query = inspect_ops.ListQuery(
            status=JobStatus.DEAD, since_s=now - window_s, limit=inspect_ops.MAX_LIMIT, cursor=cursor
        )
        page: inspect_ops.JobPage = yield from inspect_ops.list_flow(settings, query, now)
        rows += page.rows
        cursor = page.next_cursor
        if not cursor:
            break
    items = yield from inspect_ops.batch_get_flow(settings.table_name, [r.id for r in rows], ("id", "error"))
    grouped = group(
        (
            r.type,
            _error(items.get(r.id), "class"),
            _error(items.get(r.id), "message"),
            r.id,
            r.at,
        )
        for r in rows
    )
    return Digest(now - window_s, now, grouped)


def _error(item: dict[str, Any] | None, part: str) -> str | None:
    value = (item or {}).get("error", {}).get("M", {}).get(part, {}).get("S")
    return None if value is None else str(value)


def publish_digest_flow(settings: Settings, digest: Digest) -> Flow[int]:
    """The digest as one ``DeadJobsDigest`` event on the App's bus (``ConfigurationError`` without one)."""
    if not settings.event_bus:
        raise ConfigurationError("--publish needs the App's event_bus (SQSJOBS_EVENT_BUS)")
    detail = {"app": settings.app_name, **digest.to_dict()}
    event_id = f"digest:{settings.app_name}:{int(digest.until)}"
    if len(json.dumps(detail)) > 200_000:  # PutEvents takes 256 KB an entry: the largest groups only
        detail["groups"] = detail["groups"][:100]
    return (yield from publish_flow(settings.event_bus, [Event(DIGEST_EVENT, event_id, detail)]))


def handler(event: Any, context: Any = None) -> dict[str, int]:
    """The scheduled digest (infra/: a daily EventBridge schedule): the last day's, published on the bus."""
    app = locate(os.environ.get("SQSJOBS_APP"))
    found: Digest = app.run(digest_flow(app.settings, app.clock.now()))
    app.run(publish_digest_flow(app.settings, found))
    return {"dead": found.total, "groups": len(found.groups)}
