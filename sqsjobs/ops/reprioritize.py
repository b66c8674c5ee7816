"""Move waiting jobs to another priority level: the record first, then the message itself.

::

    sqsjobs priority high (--type T [--tenant X] | --id ID ...) [--yes]
    POST /jobs/priority        (dry run by default; the confirmation names the exact ids)

A waiting job's message sits in one level's SQS queue (``sqsjobs.transport.routes``: ``q``,
``q-high``, ``q-low``), and on the happy path that message is the only copy of its payload (the
record keeps its hash, not the payload: docs/payloads.md). So a move cannot simply send a new hint
built from the record. It does two things, in this order (durable state first):

1. **The record**: one conditional write per job (``store.operator.reprioritize``), landing only
   while the job is still ``queued`` or ``retry_scheduled`` and unchanged since it was read; it
   names the new level and appends an audit entry (``action: priority``, from, to, by). Every later
   hint of the job (the sweeper's, a DLQ re-dispatch, a replay) goes to that level.
2. **The message**: the old level's queue is read with ``ReceiveMessage`` (``VisibilityTimeout``
   ``HOLD_S``) until every moved job's message was found, a receive comes back empty, or
   ``MAX_RECEIVES`` receives were made. A moved job's message is sent again, unchanged but for its
   level, to the new level's queue and only then deleted from the old one; every other message is
   made visible again at once (``ChangeMessageVisibilityBatch`` to 0). If the delete fails, the old
   copy is one more hint of the job: the claim lets exactly one of them run it, the other is a
   duplicate. If the send fails, the old copy was not deleted and still carries the job.

A job whose message was not visible (a retry waiting for its time, a delayed message, one a worker
holds at this moment) keeps that message where it is: it is listed as ``left`` and its next start
comes from its old level; every hint after that follows the record. Nothing is lost either way: the
old message stays until a new one exists.

Cost: the dry run reads each listed job with one consistent ``GetItem`` (1 read unit) after
finding them, by id or by a Scan of the table (0.5 read unit per 4 KB read, the bulk cancel's:
docs/operations.md); the move writes 1 unit per job (plus the audit entry's size) and makes about
``waiting messages / 10`` receives and as many visibility changes, plus one send and one delete per
moved job. Each receive adds one to the messages' ``ApproximateReceiveCount``, so a queue whose
``maxReceiveCount`` is tight should not be moved often.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqsjobs._aws import Call, Flow
from sqsjobs.envelope import Envelope
from sqsjobs.errors import EnvelopeError
from sqsjobs.job import JobStatus
from sqsjobs.ops._common import actor
from sqsjobs.producer import route_of
from sqsjobs.store import bulk, codec, operator, requests
from sqsjobs.store.apply import Refused, apply
from sqsjobs.transport import sqs

if TYPE_CHECKING:
    from collections.abc import Callable

    from sqsjobs._clock import Clock
    from sqsjobs.config import Settings
    from sqsjobs.job import Job
    from sqsjobs.transport.queues import QueueUrls

#: The levels a job can be moved to.
LEVELS = ("high", "normal", "low")
#: What a move takes: a job that has not started.
MOVABLE = (JobStatus.QUEUED, JobStatus.RETRY_SCHEDULED)
#: Ids a dry run lists and a confirmation takes at most (a request should finish).
MAX_IDS = 200
#: Items a dry run's Scan reads at most (1,250 read units at 1 KB).
MAX_SCANNED = 10_000
#: Receives of one level's queue a move makes at most while looking for its jobs' messages.
MAX_RECEIVES = 100
#: Seconds a message read while looking stays hidden, should the release not reach SQS.
HOLD_S = 30


@dataclass(frozen=True)
class Candidate:
    """One job as a dry run or a confirmation judged it."""

    job_id: str
    #: Its status and level as read (``missing`` when there is no such job).
    status: str
    level: str
    #: Why it cannot be moved ('' when it can).
    reason: str = ""

    @property
    def waiting(self) -> bool:
        """The job has not started (whatever else keeps it from moving)."""
        return self.status in MOVABLE

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"id": self.job_id, "status": self.status, "level": self.level, "reason": self.reason}


@dataclass
class MoveReport:
    """What a confirmation did."""

    to: str
    #: Records now on the new level.
    moved: list[str] = field(default_factory=list)
    #: Of those, the jobs whose message was moved too.
    messages_moved: list[str] = field(default_factory=list)
    #: Moved records whose message was not visible: their next start comes from the old level.
    left: list[str] = field(default_factory=list)
    #: Ids not moved, with why.
    skipped: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "to": self.to,
            "moved": list(self.moved),
            "messages_moved": list(self.messages_moved),
            "left": list(self.left),
            "skipped": dict(self.skipped),
        }


def level_of(job: Job) -> str:
    """The job's level (``normal`` when the record names none)."""
    return job.priority or "normal"


def judge(settings: Settings, job: Job, to: str) -> str:
    """Why ``job`` cannot move to level ``to`` ('' when it can)."""
    if job.status not in MOVABLE:
        return f"job is {job.status.value}: only queued or retry_scheduled jobs change level"
    if job.serialize_key is not None:
        return "a serialized job's queue (FIFO, one key at a time) has no levels"
    if job.queue not in settings.priority_queues:
        return f"queue {job.queue!r} has no priority levels (priority_queues)"
    if level_of(job) == to:
        return f"already {to}"
    return ""


def _check_level(to: str) -> None:
    if to not in LEVELS:
        raise ValueError(f"priority must be one of {', '.join(LEVELS)}; got {to!r}")


def candidates_flow(settings: Settings, job_ids: list[str], to: str) -> Flow[list[Candidate]]:
    """Each id read (consistent ``GetItem``) and judged; nothing changes."""
    _check_level(to)
    out = []
    for job_id in dict.fromkeys(job_ids):
        found = yield Call("dynamodb", "get_item", requests.get(settings.table_name, job_id))
        item = found.get("Item")
        if not item:
            out.append(Candidate(job_id, "missing", "-", f"no job with id {job_id!r}"))
            continue
        job = codec.job_from_item(item)
        out.append(Candidate(job_id, job.status.value, level_of(job), judge(settings, job, to)))
    return out


def find_flow(
    settings: Settings,
    job_type: str,
    to: str,
    *,
    tenant: str | None = None,
    on_page: Callable[[int, int], None] | None = None,
) -> Flow[tuple[list[Candidate], int]]:
    """The dry run by filter: the waiting jobs of a type (and tenant), judged; and the items read.

    ``on_page(read, matched)`` is told the totals after each page (``priority --type``'s bar).

    A Scan (``store.bulk.scan_page``, the bulk cancel's filter: no index serves a type and a
    status), at most ``MAX_SCANNED`` items, for each waiting status; the first ``MAX_IDS`` matches
    are read again and judged by ``candidates_flow``.
    """
    _check_level(to)
    ids: list[str] = []
    read = 0
    for status in MOVABLE:
        start: dict[str, Any] | None = None
        while len(ids) < MAX_IDS and read < MAX_SCANNED:
            page = yield Call(
                "dynamodb",
                "scan",
                bulk.scan_page(
                    settings.table_name,
                    job_type=job_type,
                    status=status.value,
                    tenant=tenant,
                    op_id="-",  # no operation: only the status matches
                    limit=min(1000, MAX_SCANNED - read),
                    start=start,
                ),
            )
            read += int(page.get("ScannedCount", 0))
            ids += [i["id"]["S"] for i in page.get("Items", []) if i["status"]["S"] == status.value]
            if on_page is not None:
                on_page(read, len(ids))
            start = page.get("LastEvaluatedKey")
            if not start:
                break
    found = yield from candidates_flow(settings, ids[:MAX_IDS], to)
    return found, read


def move_flow(
    settings: Settings,
    queue_urls: QueueUrls,
    job_ids: list[str],
    to: str,
    clock: Clock,
    *,
    by: str | None = None,
) -> Flow[MoveReport]:
    """The confirmation: move exactly ``job_ids`` (the ones still movable) to level ``to``; see the module docstring."""
    _check_level(to)
    if len(job_ids) > MAX_IDS:
        raise ValueError(f"at most {MAX_IDS} ids per move, got {len(job_ids)}")
    by = by or actor()
    report = MoveReport(to)
    moved: dict[str, dict[str, Job]] = {}  # old route -> id -> the record after the write
    for job_id in dict.fromkeys(job_ids):
        found = yield Call("dynamodb", "get_item", requests.get(settings.table_name, job_id))
        item = found.get("Item")
        if not item:
            report.skipped[job_id] = f"no job with id {job_id!r}"
            continue
        job = codec.job_from_item(item)
        if why := judge(settings, job, to):
            report.skipped[job_id] = why
            continue
        now = clock.now()
        audit = {"action": "priority", "at": now, "by": by, "from": level_of(job), "to": to}
        write = operator.reprioritize(
            settings.table_name,
            job,
            seen_updated=operator.updated_raw(item),
            priority=None if to == "normal" else to,
            now=now,
            audit=audit,
        )
        landed = yield from apply(write)
        if isinstance(landed, Refused):
            status = codec.str_attr(landed.item, "status") if landed.item else None
            report.skipped[job_id] = f"job is {status}" if status else "job is gone"
            continue
        report.moved.append(job_id)
        moved.setdefault(route_of(job), {})[job_id] = codec.job_from_item(dict(landed.attributes or {}))
    for source, jobs in moved.items():
        found_ids = yield from _move_messages(queue_urls, source, jobs, clock.now())
        report.messages_moved += [i for i in jobs if i in found_ids]
        report.left += [i for i in jobs if i not in found_ids]
    return report


def _move_messages(queue_urls: QueueUrls, source: str, jobs: dict[str, Job], now: float) -> Flow[set[str]]:
    """Find ``jobs``' messages in route ``source``'s queue and move each to its record's level."""
    url = (yield from queue_urls.flow([source]))[source]
    done: set[str] = set()
    for _ in range(MAX_RECEIVES):
        if len(done) == len(jobs):
            break
        params = sqs.receive(url, max_messages=sqs.MAX_BATCH, wait_s=1) | {"VisibilityTimeout": HOLD_S}
        messages = (yield Call("sqs", "receive_message", params)).get("Messages", [])
        if not messages:
            break
        release: list[tuple[str, str, int]] = []
        for m in messages:
            job = _moved_job(m.get("Body", ""), jobs, done)
            if job is None:
                release.append((str(len(release)), m["ReceiptHandle"], 0))
                continue
            envelope = Envelope.from_body(m["Body"])
            yield from queue_urls.send_flow(
                route_of(job),
                dataclasses.replace(envelope, priority=job.priority).to_body(),
                delay_s=sqs.clamp_delay(job.run_at.timestamp() - now),
                tenant=job.tenant,
                trace=job.trace,
            )
            yield Call("sqs", "delete_message", {"QueueUrl": url, "ReceiptHandle": m["ReceiptHandle"]})
            done.add(job.id)
        for chunk in sqs.chunks(release):
            yield Call("sqs", "change_message_visibility_batch", sqs.change_visibility_batch(url, chunk))
    return done


def _moved_job(body: str, jobs: dict[str, Job], done: set[str]) -> Job | None:
    """The moved job whose (first found) message ``body`` is, if it is one."""
    try:
        envelope = Envelope.from_body(body)
    except EnvelopeError:
        return None
    if not envelope.has_payload or envelope.job_id in done:
        return None
    return jobs.get(envelope.job_id)
