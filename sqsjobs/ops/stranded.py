"""Find records that break the witness rule: unfinished, and nothing will ever bring them back.

``sqsjobs doctor --stranded``. Every record that is not terminal must have a witness (``WITNESSES``
in ``sqsjobs/job.py``): a message, an attention entry, a live lease, or a chain step's predecessor.
A Scan (``store/stranded_scan.py``, one segment per thread) returns the unfinished records without an
attention entry; of those, a record is reported when what should bring it back cannot any more::

    queued, retry_scheduled   due more than ``grace_s`` ago and still not claimed (default: the 12 h
                              a message can be hidden at most, by one re-arm); certain once due
                              longer ago than the queues keep a message (``message_retention_s``)
    running                   lease expired more than a visibility timeout + a lease ago: the
                              owner's message would have come back and rescued it by then
    waiting                   a chain step whose predecessor is finished without unblocking it, or
                              gone (one BatchGetItem per 100 such steps)

What the Scan cannot see is the message itself: a job of a paused type, or behind a backlog older
than ``grace_s``, is reported though its message is still on its way; the reason says so.
Cost: docs/lifecycle.md, "Finding stranded records".
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqsjobs._aws import Call, Flow
from sqsjobs.chains.records import step_job_id
from sqsjobs.job import TERMINAL, JobStatus
from sqsjobs.ops.retention import duration
from sqsjobs.retry import MAX_VISIBILITY_S
from sqsjobs.store import batched, stranded_scan
from sqsjobs.store.codec import av_s

if TYPE_CHECKING:
    from collections.abc import Callable

    from sqsjobs.config import Settings

#: Scan segments read at once, one thread each (a Scan page reads up to 1 MB).
DEFAULT_SEGMENTS = 4
#: A due job no claim took within this long is reported: one re-arm hides a message 12 h at most.
DEFAULT_GRACE_S = float(MAX_VISIBILITY_S)


@dataclass(frozen=True)
class Stranded:
    """A record with no witness, and why the audit thinks so."""

    id: str
    type: str
    queue: str
    status: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        """JSON form."""
        return {
            "id": self.id,
            "type": self.type,
            "queue": self.queue,
            "status": self.status,
            "reason": self.reason,
        }


@dataclass
class Audit:
    """What one pass found and read."""

    stranded: list[Stranded] = field(default_factory=list)
    #: Items the Scan read (and billed), and the read units DynamoDB said it consumed (0 if it did not say).
    scanned: int = 0
    read_units: float = 0.0
    segments: int = DEFAULT_SEGMENTS

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "ok": not self.stranded,
            "stranded": [s.to_dict() for s in self.stranded],
            "scanned": self.scanned,
            "read_units": self.read_units,
            "segments": self.segments,
        }


def judge(record: stranded_scan.Unwitnessed, settings: Settings, now: float, grace_s: float) -> str | None:
    """Why ``record`` has no witness left, or None while something may still bring it back."""
    if record.status in (JobStatus.QUEUED, JobStatus.RETRY_SCHEDULED) and record.run_at is not None:
        late = now - record.run_at
        if late > settings.message_retention_s:
            return (
                f"due {duration(late)} ago, longer than the queues keep a message "
                f"({duration(settings.message_retention_s)}), and no attention entry: nothing will bring it"
            )
        if late > grace_s:
            return (
                f"due {duration(late)} ago, not claimed and no attention entry: its message is gone "
                "(unless its type is paused or its queue has a backlog that old)"
            )
    bound = settings.visibility_timeout_s + settings.lease_s
    if record.status is JobStatus.RUNNING and record.lease_expires is not None:
        lapsed = now - record.lease_expires
        if lapsed > bound:
            return (
                f"lease expired {duration(lapsed)} ago (> visibility timeout + lease, {duration(bound)}) and "
                "no claim rescued it: its owner is gone and so is its message"
            )
    return None


def segment_flow(
    settings: Settings,
    now: float,
    grace_s: float,
    segment: int,
    segments: int,
    on_page: Callable[[int], None] | None = None,
) -> Flow[tuple[list[Stranded], list[stranded_scan.Unwitnessed], int, float]]:
    """One segment, every page: the stranded records, the waiting steps to look into, items and units read.

    ``on_page``: told the items each page read, as it comes (a progress bar's count).
    """
    found: list[Stranded] = []
    waiting: list[stranded_scan.Unwitnessed] = []
    scanned, units = 0, 0.0
    start = None
    while True:
        page = yield Call(
            "dynamodb",
            "scan",
            stranded_scan.scan_request(settings.table_name, segment=segment, segments=segments, start=start),
        )
        scanned += int(page.get("ScannedCount", 0))
        units += float(page.get("ConsumedCapacity", {}).get("CapacityUnits", 0.0))
        if on_page is not None:
            on_page(int(page.get("ScannedCount", 0)))
        for item in page.get("Items", []):
            record = stranded_scan.unwitnessed(item)
            if record.status is JobStatus.WAITING:
                waiting.append(record)
                continue
            reason = judge(record, settings, now, grace_s)
            if reason is not None:
                found.append(Stranded(record.id, record.type, record.queue, record.status.value, reason))
        start = page.get("LastEvaluatedKey")
        if not start:
            return found, waiting, scanned, units


def predecessors_flow(settings: Settings, steps: list[stranded_scan.Unwitnessed]) -> Flow[list[Stranded]]:
    """Waiting chain steps whose predecessor is finished (it neither unblocked nor dropped them) or gone."""
    before = {s.id: step_job_id(s.chain_id, s.chain_step - 1) for s in steps if s.chain_id and s.chain_step}
    wanted = [{"id": av_s(i)} for i in sorted(set(before.values()))]
    items = yield from batched.get_items(settings.table_name, wanted, attributes=("id", "status"))
    statuses = {item["id"]["S"]: item.get("status", {}).get("S", "?") for item in items}
    found = []
    for step in steps:
        previous = before.get(step.id)
        status = statuses.get(previous) if previous else None
        if previous is not None and status is not None and JobStatus(status) not in TERMINAL:
            continue  # the predecessor is unfinished: its own witness stands for both
        what = f"step {previous} is {status}" if status else f"step {previous or '(none)'} does not exist"
        found.append(
            Stranded(
                step.id,
                step.type,
                step.queue,
                step.status.value,
                f"waits on its chain's previous step, but {what}: nothing will unblock or drop it",
            )
        )
    return found


def find_stranded(
    run: Callable[[Flow[Any]], Any],
    settings: Settings,
    now: float,
    *,
    segments: int = DEFAULT_SEGMENTS,
    grace_s: float = DEFAULT_GRACE_S,
    on_page: Callable[[int], None] | None = None,
) -> Audit:
    """Scan the table in ``segments`` parallel segments with ``run`` (``App.run``) and judge what it returns.

    ``on_page`` is told the items each page read, from the segments' threads (a minutes-long Scan
    of a large table shows its progress: ``doctor --stranded``'s bar).
    """
    if segments < 1:
        raise ValueError(f"segments must be at least 1, got {segments}")
    result = Audit(segments=segments)
    with ThreadPoolExecutor(max_workers=segments, thread_name_prefix="sqsjobs-audit") as pool:
        parts = list(
            pool.map(
                lambda n: run(segment_flow(settings, now, grace_s, n, segments, on_page)), range(segments)
            )
        )
    waiting: list[stranded_scan.Unwitnessed] = []
    for found, steps, scanned, units in parts:
        result.stranded += found
        waiting += steps
        result.scanned += scanned
        result.read_units += units
    if waiting:
        result.stranded += run(predecessors_flow(settings, waiting))
    result.stranded.sort(key=lambda s: (s.type, s.id))
    return result
