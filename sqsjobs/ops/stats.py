"""Queue health: SQS depths, per job type counts by status from one Scan, and workers by status.

Workers (live, draining, silent) come from the worker registry (``ops/worker_views.py``), not the Scan.

The table has no status index any more (it cost every job index write units, all on one hot partition per
status: docs/scale.md), so the counts come from a Scan, aggregated here. The Scan keeps finished
jobs updated in the last ``window_s`` and every unfinished one (queued, retry_scheduled, running,
however old: a backlog must show), projecting only type, status and what the held, stuck and
oldest-due columns need (``attn``, ``run_at``, ``lease_expires``).

What a pass costs: a Scan is billed for every item it reads, whole (0.5 read unit per 4 KB,
eventually consistent), whatever its filter and projection, which only shrink the answer. So a
pass reads at most ``max_entries`` items (``DEFAULT_MAX_ENTRIES`` = 100,000) and says so
(``truncated``). At 1 KB per item (0.5-1 KB; halve for 0.5 KB)::

    records    one pass, whole table                  one pass, capped at 100,000 items
    1 M        1 GB / 4 KB x 0.5 = 125,000 RRU        100 MB / 4 KB x 0.5 = 12,500 RRU ($0.0016), truncated
    100 M      100 GB / 4 KB x 0.5 = 12.5 M RRU       12,500 RRU, truncated (0.1 % of the table)

``--watch`` repeats the pass: every 2 s at the cap that is 6,250 RRU/s, about $2.8 an hour on
demand ($0.125 per million RRU); use a longer ``--interval`` on a large table. A truncated pass
reads the table in its own order (the hash of random job ids), so it counts a uniform sample of the
records, not all of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqsjobs._aws import Call, Flow
from sqsjobs.errors import TransportError
from sqsjobs.job import JobStatus
from sqsjobs.ops._common import app_queues, iso
from sqsjobs.ops.worker_views import count_workers, list_workers_flow
from sqsjobs.store import schema
from sqsjobs.store.conditions import AnyOf, Compare, OneOf
from sqsjobs.store.write import render_condition
from sqsjobs.transport import routes

if TYPE_CHECKING:
    from sqsjobs.config import Settings
    from sqsjobs.registry import Registry

#: Finished jobs are counted over this window unless told otherwise.
DEFAULT_WINDOW_S = 3600.0
#: Items one stats pass reads at most (its cost bound: 12,500 read units at 1 KB).
DEFAULT_MAX_ENTRIES = 100_000
_UNFINISHED = (
    JobStatus.QUEUED.value,
    JobStatus.RETRY_SCHEDULED.value,
    JobStatus.RUNNING.value,
    JobStatus.WAITING.value,
)
_MISSING = ("AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist")
#: What the scan keeps: records updated within the window, and every unfinished one.
_RECENT_OR_UNFINISHED = AnyOf(
    (Compare("updated_at", ">=", ":since"), OneOf("status", tuple(f":u{i}" for i in range(len(_UNFINISHED)))))
)
#: Attribute placeholders of the Scan: what ``_count`` reads (the filter reuses ``#s``).
_NAMES = {
    "#t": "type",
    "#s": "status",
    "#a": "attn",
    "#r": "run_at",
    "#l": "lease_expires",
}


@dataclass
class QueueStats:
    """One logical queue and its DLQ, as SQS counts them (approximate on AWS)."""

    queue: str
    visible: int | None = None
    in_flight: int | None = None
    delayed: int | None = None
    dlq: int | None = None
    #: Visible messages per level of a queue with priority levels or serialize keys (``high``,
    #: ``normal``, ``fifo``, ``low``); the counts above add all its SQS queues up. Empty otherwise.
    levels: dict[str, int] = field(default_factory=dict)
    #: Set when the queue or DLQ could not be read (e.g. it does not exist).
    error: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return dict(self.__dict__, error=self.error or None)


@dataclass
class TypeStats:
    """Counts for one job type."""

    type: str
    counts: dict[str, int] = field(default_factory=lambda: {s.value: 0 for s in JobStatus})
    #: Of the waiting ones, how many are held in the record (not yet handed to SQS).
    held: int = 0
    #: Running jobs whose lease ran out: their worker died or stalled (the sweeper rescues them).
    expired_leases: int = 0
    #: Age of the oldest job that is due and not yet running (seconds), None when there is none.
    oldest_due_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return dict(self.__dict__)


@dataclass
class Stats:
    """A snapshot."""

    at: float
    window_s: float
    queues: list[QueueStats]
    types: list[TypeStats]
    truncated: bool = False
    #: ECS workers in the registry by status: ``{"live": n, "draining": n, "silent": n}``.
    workers: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "at": iso(self.at),
            "window_s": self.window_s,
            "truncated": self.truncated,
            "queues": [q.to_dict() for q in self.queues],
            "types": [t.to_dict() for t in self.types],
            "workers": dict(self.workers),
        }


def _attrs(response: dict[str, Any]) -> dict[str, str]:
    return dict(response.get("Attributes", {}))


def queue_stats_flow(settings: Settings, queue: str) -> Flow[QueueStats]:
    """Depths of one queue (all its levels: ``transport.routes``) and its DLQ."""
    out = QueueStats(queue)
    keys = routes.routes_of(settings, queue)
    names = [routes.queue_name(settings, key) for key in keys] + [settings.dlq_name(queue)]
    try:
        urls = []
        for name in names:
            response = yield Call("sqs", "get_queue_url", {"QueueName": name})
            urls.append(response["QueueUrl"])
        mains = []
        for url in urls[:-1]:
            main = yield Call(
                "sqs",
                "get_queue_attributes",
                {
                    "QueueUrl": url,
                    "AttributeNames": [
                        "ApproximateNumberOfMessages",
                        "ApproximateNumberOfMessagesNotVisible",
                        "ApproximateNumberOfMessagesDelayed",
                    ],
                },
            )
            mains.append(_attrs(main))
        dead = yield Call(
            "sqs",
            "get_queue_attributes",
            {"QueueUrl": urls[-1], "AttributeNames": ["ApproximateNumberOfMessages"]},
        )
    except TransportError as exc:
        if exc.code not in _MISSING:
            raise
        out.error = f"queue missing: {exc}"
        return out
    out.visible = sum(int(a.get("ApproximateNumberOfMessages", 0)) for a in mains)
    out.in_flight = sum(int(a.get("ApproximateNumberOfMessagesNotVisible", 0)) for a in mains)
    out.delayed = sum(int(a.get("ApproximateNumberOfMessagesDelayed", 0)) for a in mains)
    for key, a in zip(keys, mains, strict=True):
        if len(keys) > 1:
            out.levels[routes.split(key)[1]] = int(a.get("ApproximateNumberOfMessages", 0))
    out.dlq = int(_attrs(dead).get("ApproximateNumberOfMessages", 0))
    return out


def stats_flow(
    settings: Settings,
    registry: Registry,
    now: float,
    *,
    window_s: float = DEFAULT_WINDOW_S,
    max_entries: int = DEFAULT_MAX_ENTRIES,
) -> Flow[Stats]:
    """Queue depths and per-type counts (finished ones over the last ``window_s``).

    Reads at most ``max_entries`` records, the cost bound (see the module docstring).
    """
    if max_entries < 1:
        raise ValueError(f"max_entries must be at least 1, got {max_entries}")
    queues = []
    for queue in app_queues(registry):
        queues.append((yield from queue_stats_flow(settings, queue)))
    types: dict[str, TypeStats] = {spec.name: TypeStats(spec.name) for spec in registry}
    values: dict[str, Any] = {":since": {"N": str(round(now - window_s, 3))}}
    values |= {f":u{i}": {"S": st} for i, st in enumerate(_UNFINISHED)}
    names = dict(_NAMES)  # the filter reuses "#s" (status), a reserved word
    params: dict[str, Any] = {
        "TableName": settings.table_name,
        "ProjectionExpression": "#t, #s, #a, #r, #l",
        # The filter changes what comes back, not what is read: the cost is the same either way.
        "FilterExpression": render_condition(_RECENT_OR_UNFINISHED, names, []),
        "ExpressionAttributeNames": names,
        "ExpressionAttributeValues": values,
    }
    read = 0
    truncated = False
    start: Any = None
    while True:
        request = params | {"Limit": max_entries - read}  # never read past the cap, even within a page
        if start:
            request["ExclusiveStartKey"] = start
        page = yield Call("dynamodb", "scan", request)
        for item in page.get("Items", []):
            _count(types, item, now)
        read += int(page.get("ScannedCount", len(page.get("Items", []))))
        start = page.get("LastEvaluatedKey")
        if not start:
            break
        if read >= max_entries:
            truncated = True
            break
    workers = yield from list_workers_flow(settings, now)
    return Stats(
        at=now,
        window_s=window_s,
        queues=queues,
        types=sorted(types.values(), key=lambda t: t.type),
        truncated=truncated,
        workers=count_workers(workers),
    )


def _count(types: dict[str, TypeStats], item: dict[str, Any], now: float) -> None:
    job_type = item.get("type", {}).get("S", "?")
    status = item.get("status", {}).get("S", "?")
    t = types.setdefault(job_type, TypeStats(job_type))
    t.counts[status] = t.counts.get(status, 0) + 1
    if item.get("attn", {}).get("S", "").startswith(f"{schema.HELD}#"):
        t.held += 1
    lease = item.get("lease_expires")
    if status == JobStatus.RUNNING.value and lease is not None and float(lease["N"]) < now:
        t.expired_leases += 1
    run_at = item.get("run_at")
    if status in (JobStatus.QUEUED.value, JobStatus.RETRY_SCHEDULED.value) and run_at is not None:
        age = now - float(run_at["N"])
        if age >= 0 and (t.oldest_due_s is None or age > t.oldest_due_s):
            t.oldest_due_s = round(age, 3)
