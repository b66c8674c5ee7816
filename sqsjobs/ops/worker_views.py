"""The worker registry read back: which ECS workers run, what each runs now, which went silent.

``drain_flow`` asks one worker to drain through its registry item (``POST /workers/{id}/drain``,
the dashboard's *drain* button). ``list_workers_flow`` is what ``sqsjobs workers``, ``sqsjobs stats``, ``GET /workers`` and the
dashboard call. It reads the registry items only (``sqsjobs.store.workers``): one Query of the
``workers`` partition of the attention index for their ids, then BatchGetItem (100 ids a request),
eventually consistent. No job record is read, however large the table (docs/scale.md).

What a listing costs: the Query returns ~100-byte keys, 0.5 read unit per 4 KB of them; each item
read by BatchGetItem is rounded up to 4 KB: 0.5 read unit. For 100 workers: 0.5 + 100 x 0.5 = 50.5
RRU, $0.0000063 on demand.

A worker's status is judged by its own refresh interval (stored in its item)::

    live      refreshed within the last SILENT_INTERVALS intervals, state running
    draining  refreshed within them, state draining (it got SIGTERM and finishes its jobs)
    silent    no refresh for longer: killed, stalled or cut off; its TTL removes it later

An item past its ``expires_at`` is not listed: AWS deletes expired items within days, not at once.
The Lambda adapter registers nothing: a Lambda "worker" is the function, seen in CloudWatch.
"""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqsjobs._aws import Call, Flow
from sqsjobs.ops._common import iso
from sqsjobs.ops.inspect import batch_get_flow
from sqsjobs.store import presence_items
from sqsjobs.store.apply import Refused, apply
from sqsjobs.store.codec import num_attr, str_attr
from sqsjobs.store.schema import TTL_ATTRIBUTE

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from sqsjobs.config import Settings


class WorkerStatus(enum.StrEnum):
    """What a listing says about a worker."""

    LIVE = "live"
    DRAINING = "draining"
    SILENT = "silent"


@dataclass(frozen=True)
class WorkerInfo:
    """One registered worker process, as of its last refresh."""

    #: The worker id: the ``lease_owner`` of the jobs it runs.
    id: str
    host: str
    pid: int
    #: The sqsjobs version it runs.
    version: str
    queues: tuple[str, ...]
    job_types: tuple[str, ...]
    concurrency: int
    #: Epoch seconds.
    started_at: float
    #: Its last refresh (epoch seconds, its own clock).
    last_seen: float
    status: WorkerStatus
    #: Ids of the jobs it ran at its last refresh (at most ``MAX_RUNNING_LISTED``).
    running: tuple[str, ...]
    #: How many jobs it ran at its last refresh (exact, even when ``running`` is cut short).
    running_count: int
    #: Its refresh interval.
    interval_s: float
    #: When its item expires (TTL), epoch seconds.
    expires_at: float
    #: Refresh writes since it registered.
    refreshes: int

    def to_dict(self) -> dict[str, Any]:
        """JSON form (ISO timestamps)."""
        return {
            "id": self.id,
            "status": self.status.value,
            "host": self.host,
            "pid": self.pid,
            "version": self.version,
            "queues": list(self.queues),
            "job_types": list(self.job_types),
            "concurrency": self.concurrency,
            "started_at": iso(self.started_at),
            "last_seen": iso(self.last_seen),
            "running": list(self.running),
            "running_count": self.running_count,
            "interval_s": self.interval_s,
            "expires_at": iso(self.expires_at),
            "refreshes": self.refreshes,
        }


def status_of(*, state: str, last_seen: float, interval_s: float, now: float) -> WorkerStatus:
    """Silent after ``SILENT_INTERVALS`` of its interval without a refresh; else what it said."""
    if now - last_seen > presence_items.SILENT_INTERVALS * interval_s:
        return WorkerStatus.SILENT
    return WorkerStatus.DRAINING if state == presence_items.DRAINING else WorkerStatus.LIVE


def _strings(item: Mapping[str, Any], name: str) -> tuple[str, ...]:
    return tuple(v["S"] for v in item.get(name, {}).get("L", []))


def _n(item: Mapping[str, Any], name: str, default: float = 0.0) -> float:
    value = num_attr(item, name)
    return default if value is None else value


def worker_from_item(item: Mapping[str, Any], now: float) -> WorkerInfo:
    """Decode a registry item."""
    interval = _n(item, "interval_s", 30.0)
    last_seen = _n(item, "last_seen")
    state = str_attr(item, "state") or presence_items.RUNNING
    return WorkerInfo(
        id=item["id"]["S"].removeprefix(presence_items.WORKER_PREFIX),
        host=str_attr(item, "host") or "?",
        pid=int(_n(item, "pid")),
        version=str_attr(item, "version") or "?",
        queues=_strings(item, "queues"),
        job_types=_strings(item, "job_types"),
        concurrency=int(_n(item, "concurrency")),
        started_at=_n(item, "started_at"),
        last_seen=last_seen,
        status=status_of(state=state, last_seen=last_seen, interval_s=interval, now=now),
        running=_strings(item, "running"),
        running_count=int(_n(item, "running_count")),
        interval_s=interval,
        expires_at=_n(item, TTL_ATTRIBUTE),
        refreshes=int(_n(item, "refreshes")),
    )


def list_workers_flow(settings: Settings, now: float) -> Flow[list[WorkerInfo]]:
    """Every registered worker not yet expired, oldest first (by start time, then id)."""
    table = settings.table_name
    ids: list[str] = []
    start: Any = None
    while True:
        page = yield Call("dynamodb", "query", presence_items.query_workers(table, start))
        ids += presence_items.worker_ids(page)
        start = page.get("LastEvaluatedKey")
        if not start:
            break
    if not ids:
        return []
    items = yield from batch_get_flow(table, ids, presence_items.WORKER_ATTRIBUTES)
    # An item deleted between the Query and the read is simply missing; one past its TTL is gone.
    found = [worker_from_item(item, now) for item in items.values() if _n(item, TTL_ATTRIBUTE, now + 1) > now]
    return sorted(found, key=lambda w: (w.started_at, w.id))


def count_workers(workers: Iterable[WorkerInfo]) -> dict[str, int]:
    """``{"live": n, "draining": n, "silent": n}``."""
    counts = Counter(w.status for w in workers)
    return {s.value: counts.get(s, 0) for s in WorkerStatus}


def drain_flow(settings: Settings, worker_id: str, now: float, *, by: str) -> Flow[str]:
    """Ask one worker to drain: ``requested``, ``not_registered`` or ``draining`` (already).

    One conditional UpdateItem on its registry item (1 write unit). The worker reads the request
    back from its next refresh, within ``Settings.registry_interval_s``, then stops receiving,
    finishes what it holds and exits, as on SIGTERM: the listing shows it ``draining``, then gone.
    A worker the platform restarts (ECS keeps its desired count) comes back as a new worker id.
    """
    write = presence_items.request_drain(settings.table_name, worker_id, now=now, by=by)
    asked = yield from apply(write)
    if isinstance(asked, Refused):
        return "not_registered" if asked.item is None else "draining"
    return "requested"
