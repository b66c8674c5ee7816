"""Queue health: SQS depths per queue, and per job type counts by status from the ``by_status`` index.

One pass per status partition (``Query`` projecting type, status and ``due``), aggregated here,
instead of one ``Select=COUNT`` query per (type, status): a COUNT query is billed for every entry
it reads anyway, so counting all types in one pass costs the same as counting one. Waiting and
running partitions are read whole (they are small when the system keeps up); finished ones only
for the last ``window_s``, because the succeeded partition holds every job of the retention
period. A pass stops after ``max_entries`` and says so (``truncated``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqsjobs._aws import Call, Flow
from sqsjobs.errors import TransportError
from sqsjobs.job import JobStatus
from sqsjobs.ops._common import app_queues, iso
from sqsjobs.store import requests as rq

if TYPE_CHECKING:
    from sqsjobs.config import Settings
    from sqsjobs.registry import Registry

#: Finished jobs are counted over this window unless told otherwise.
DEFAULT_WINDOW_S = 3600.0
#: Index entries one stats pass reads at most per partition.
DEFAULT_MAX_ENTRIES = 100_000
_WAITING = (JobStatus.QUEUED.value, JobStatus.RETRY_SCHEDULED.value, rq.HELD, JobStatus.RUNNING.value)
_FINISHED = (JobStatus.SUCCEEDED.value, JobStatus.DEAD.value, JobStatus.CANCELLED.value)
_MISSING = ("AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist")


@dataclass
class QueueStats:
    """One logical queue and its DLQ, as SQS counts them (approximate on AWS)."""

    queue: str
    visible: int | None = None
    in_flight: int | None = None
    delayed: int | None = None
    dlq: int | None = None
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

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "at": iso(self.at),
            "window_s": self.window_s,
            "truncated": self.truncated,
            "queues": [q.to_dict() for q in self.queues],
            "types": [t.to_dict() for t in self.types],
        }


def _attrs(response: dict[str, Any]) -> dict[str, str]:
    return dict(response.get("Attributes", {}))


def queue_stats_flow(settings: Settings, queue: str) -> Flow[QueueStats]:
    """Depths of one queue and its DLQ."""
    out = QueueStats(queue)
    names = [settings.queue_name(queue), settings.dlq_name(queue)]
    try:
        urls = []
        for name in names:
            response = yield Call("sqs", "get_queue_url", {"QueueName": name})
            urls.append(response["QueueUrl"])
        main = yield Call(
            "sqs",
            "get_queue_attributes",
            {
                "QueueUrl": urls[0],
                "AttributeNames": [
                    "ApproximateNumberOfMessages",
                    "ApproximateNumberOfMessagesNotVisible",
                    "ApproximateNumberOfMessagesDelayed",
                ],
            },
        )
        dead = yield Call(
            "sqs",
            "get_queue_attributes",
            {"QueueUrl": urls[1], "AttributeNames": ["ApproximateNumberOfMessages"]},
        )
    except TransportError as exc:
        if exc.code not in _MISSING:
            raise
        out.error = f"queue missing: {exc}"
        return out
    a = _attrs(main)
    out.visible = int(a.get("ApproximateNumberOfMessages", 0))
    out.in_flight = int(a.get("ApproximateNumberOfMessagesNotVisible", 0))
    out.delayed = int(a.get("ApproximateNumberOfMessagesDelayed", 0))
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
    """Queue depths and per-type counts (finished ones over the last ``window_s``)."""
    queues = []
    for queue in app_queues(registry):
        queues.append((yield from queue_stats_flow(settings, queue)))
    types: dict[str, TypeStats] = {spec.name: TypeStats(spec.name) for spec in registry}
    truncated = False
    for st in (*_WAITING, *_FINISHED):
        key = "st = :st"
        values: dict[str, Any] = {":st": {"S": st}}
        if st in _FINISHED:
            key += " AND due >= :since"
            values[":since"] = {"N": str(round(now - window_s, 3))}
        start: Any = None
        read = 0
        while True:
            params: dict[str, Any] = {
                "TableName": settings.table_name,
                "IndexName": rq.STATUS_INDEX,
                "KeyConditionExpression": key,
                "ProjectionExpression": "#t, #s, #d",
                "ExpressionAttributeNames": {"#t": "type", "#s": "status", "#d": "due"},
                "ExpressionAttributeValues": values,
            }
            if start:
                params["ExclusiveStartKey"] = start
            page = yield Call("dynamodb", "query", params)
            for item in page.get("Items", []):
                _count(types, st, item, now)
            read += len(page.get("Items", []))
            start = page.get("LastEvaluatedKey")
            if not start:
                break
            if read >= max_entries:
                truncated = True
                break
    return Stats(
        at=now,
        window_s=window_s,
        queues=queues,
        types=sorted(types.values(), key=lambda t: t.type),
        truncated=truncated,
    )


def _count(types: dict[str, TypeStats], st: str, item: dict[str, Any], now: float) -> None:
    job_type = item.get("type", {}).get("S", "?")
    status = item.get("status", {}).get("S", st)
    due = float(item["due"]["N"])
    t = types.setdefault(job_type, TypeStats(job_type))
    t.counts[status] = t.counts.get(status, 0) + 1
    if st == rq.HELD:
        t.held += 1
    if status == JobStatus.RUNNING.value and due < now:
        t.expired_leases += 1
    if status in (JobStatus.QUEUED.value, JobStatus.RETRY_SCHEDULED.value) and due <= now:
        age = now - due
        if t.oldest_due_s is None or age > t.oldest_due_s:
            t.oldest_due_s = round(age, 3)
