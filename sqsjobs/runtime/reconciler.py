"""The DLQ reconciler, run by every sweep: redriven jobs are re-dispatched or made dead, one copy per dead job.

SQS moves a message to its queue's DLQ after ``maxReceiveCount`` receives, whatever the record says:
a job deferred again and again (a limit, a pause, a breaker), a retry re-armed while not due, a
message that kept meeting another owner's lease. Its record still says ``queued``, ``retry_scheduled``
or ``running``, and nothing would ever bring it back. Every DLQ of the App is read (the standard DLQ
of each logical queue, where its priority levels redrive too, and a serialized queue's FIFO backstop
DLQ), and each message is judged by its job's record:

==========================================  ===================================================
record                                      what the reconciler does
==========================================  ===================================================
queued, retry_scheduled, or running with    re-dispatch: count it in the record
an expired lease, re-dispatched fewer       (``dlq_redispatches``), send the message's body
than ``redispatch_limit`` times             back to the job's queue (FIFO: same group, new
                                            dedup id), delete the DLQ copy
the same, at the limit                      ``dead`` (the ``reject`` transition), reason "SQS
                                            redrove its message to the DLQ after N receives",
                                            payload kept; the copy stays as the job's one copy
running with a live lease                   left for a later pass (its owner is at work)
requeued (replay, retry) after the copy     copy deleted: a newer message carries the job
was sent; waiting (a chain step, its
predecessor sends its hint); succeeded,
cancelled, expired
dead                                        one copy kept per job (a worker's copy with its
                                            reason first, then the lowest message id: the same
                                            choice after any restart), the others deleted
a schedule fire SQS redrove (no worker      sent back to its queue (a worker then enqueues the
turned it into its job), sent back fewer   occurrence's job, idempotently) with the count on
than ``redispatch_limit`` times             the message; at the limit, or from a FIFO backstop
                                            DLQ, left
no record, not a job, not an envelope       left: that is what a DLQ is for
==========================================  ===================================================

A FIFO backstop DLQ holds nothing for long: the copy a dead job keeps is moved (sent, then deleted)
into the logical queue's standard DLQ with the reason attached, where ``sqsjobs dlq`` and the DLQ
alarm count it, and where it blocks no message group. So after a pass a DLQ holds one message per
dead job plus what is not a job: its depth counts dead jobs.

Crash safety: the record is written first (conditional on the record as read), then SQS is called
(send, then delete). A reconciler killed in between leaves the DLQ copy, which the next pass finds
with the record already moved on and finishes; a lost hint is impossible, since the copy is deleted
only after the send.

Cost: each pass asks each DLQ its depth (one GetQueueAttributes). An empty DLQ costs nothing more;
nor does one whose depth equals what the process's last scan of it left there (one message per dead
job), except one scan every ``RESCAN_S``. A scan costs one ReceiveMessage per ten messages, one
strongly consistent GetItem per message (one read unit per 4 KB of record) and, for each message it
leaves, a tenth of a ChangeMessageVisibilityBatch; a re-dispatch adds one UpdateItem (write units
for the whole record: 1 for a record of up to 1 KB), one SendMessage and one DeleteMessage; a death
one UpdateItem (the record with its payload), a duplicate, finished or replayed copy one
DeleteMessage.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from sqsjobs import envelope as envelope_format
from sqsjobs._aws import Call, Flow
from sqsjobs.errors import EnvelopeError
from sqsjobs.job import JobStatus
from sqsjobs.store import redrive
from sqsjobs.store.apply import Refused, apply
from sqsjobs.store.codec import job_from_item
from sqsjobs.store.operator import audit_entries
from sqsjobs.store.requests import get
from sqsjobs.transport import dead_letters, routes, sqs
from sqsjobs.transport.queues import dlq_key

if TYPE_CHECKING:
    from sqsjobs.config import Settings
    from sqsjobs.job import Job
    from sqsjobs.registry import Registry
    from sqsjobs.store.codec import Item
    from sqsjobs.transport.dead_letters import DlqDepth, DlqMessage, Scan
    from sqsjobs.transport.queues import QueueUrls

#: Fresh hints a job gets after SQS redrove its message, before its record is made dead.
REDISPATCH_LIMIT = 3
#: A DLQ whose depth did not change since this process last scanned it is scanned again after this.
RESCAN_S = 600.0
_LIVE = frozenset({JobStatus.QUEUED, JobStatus.RETRY_SCHEDULED, JobStatus.RUNNING})
_REQUEUES = frozenset({"replay", "retry"})


@dataclass(frozen=True)
class DlqScope:
    """Which DLQs the reconciler reads and its bounds: the App's logical queues and redrive count."""

    queues: tuple[str, ...]
    #: The redrive policy's ``maxReceiveCount``, for the dead record's reason (None: not known).
    receives: int | None = None
    redispatch_limit: int = REDISPATCH_LIMIT

    @classmethod
    def of(cls, registry: Registry, settings: Settings) -> DlqScope:
        """Every queue of the registry's handlers; the count ``sqsjobs provision`` sets on them."""
        receives = settings.max_receive_count or registry.max_attempts() + settings.receive_slack
        return cls(tuple(registry.queues() or ["default"]), receives)


@dataclass
class ReconcileReport:
    """What one pass over the DLQs did (job ids, or counts of messages)."""

    redispatched: list[str] = field(default_factory=list)
    #: Schedule fires (their DLQ message ids) sent back to their queue to become their occurrence's job.
    refired: list[str] = field(default_factory=list)
    #: Records made dead because SQS redrove their message and the re-dispatch limit was reached.
    dead: list[str] = field(default_factory=list)
    #: Dead jobs' copies moved from a FIFO backstop DLQ into the standard DLQ.
    moved: list[str] = field(default_factory=list)
    #: Copies deleted: another copy of a dead job, or a job finished, replayed or waiting.
    deleted: int = 0
    #: Messages left in place: one per dead job, what is not a job, a job someone holds.
    left: int = 0
    #: DLQs not scanned because their depth was what the last scan left.
    unchanged: int = 0

    @property
    def acted(self) -> bool:
        """True when the pass changed anything."""
        return bool(self.redispatched or self.refired or self.dead or self.moved or self.deleted)


@dataclass
class _Memo:
    """What this process's last scan of one DLQ left there, and when."""

    settled: int
    at: float


#: Per ``QueueUrls`` (so per App, for as long as it lives): DLQ url → its last scan's memo.
_MEMOS: weakref.WeakKeyDictionary[QueueUrls, dict[str, _Memo]] = weakref.WeakKeyDictionary()


@dataclass
class _Pass:
    settings: Settings
    queue_urls: QueueUrls
    now: float
    scope: DlqScope
    report: ReconcileReport
    scan: Scan = field(default_factory=dead_letters.Scan)
    #: Copies of dead jobs seen in the standard DLQ, by job id: one is kept at the end.
    dead_copies: dict[str, list[DlqMessage]] = field(default_factory=dict)
    #: Set when a message was left that a later pass must look at again (a lease, a refused write).
    unsettled: bool = False


def reconcile_flow(
    settings: Settings, queue_urls: QueueUrls, now: float, scope: DlqScope
) -> Flow[ReconcileReport]:
    """One pass over every DLQ of ``scope.queues`` (each FIFO backstop before its standard DLQ)."""
    report = ReconcileReport()
    memos = _MEMOS.setdefault(queue_urls, {})
    for queue, url, backstop in (yield from dead_letters.dlqs_flow(queue_urls, scope.queues)):
        depth = yield from dead_letters.one_depth_flow(queue, url, backstop=backstop)
        memo = memos.get(url)
        if depth.visible == 0:
            memos.pop(url, None)
            continue
        if memo is not None and memo.settled == depth.visible and now - memo.at < RESCAN_S:
            report.unchanged += 1
            continue
        run = _Pass(settings, queue_urls, now, scope, report)
        left = yield from _scan(run, depth)
        if run.unsettled:
            memos.pop(url, None)
        else:
            memos[url] = _Memo(left, now)
    return report


def _scan(run: _Pass, depth: DlqDepth) -> Flow[int]:
    """Judge every message of one DLQ; returns how many it left there."""
    hide = dead_letters.hide_for(depth.visible)
    left_before = run.report.left
    try:
        while True:
            batch = yield from dead_letters.scan_flow(depth, run.scan, hide_s=hide)
            if not batch:
                break
            for m in batch:
                yield from _judge(run, m)
        for copies in run.dead_copies.values():
            keep = min(copies, key=lambda c: (c.redriven, c.message_id))
            run.report.left += 1
            for copy in copies:
                if copy is not keep:
                    yield from _delete(run, copy)
    except GeneratorExit:
        raise  # closed by its driver: held messages come back when their hide time ends
    except BaseException:  # an error, or a cancellation (a sweeper stopping): hand back what it hid
        yield from dead_letters.release_flow(run.scan)
        raise
    yield from dead_letters.release_flow(run.scan)
    return run.report.left - left_before


def _judge(run: _Pass, m: DlqMessage) -> Flow[None]:
    """Decide one message by its job's record (see the module's table)."""
    try:
        parsed = envelope_format.parse(m.body)
    except EnvelopeError:  # not an envelope at all: decode said so already
        parsed = None
    if isinstance(parsed, envelope_format.Fire) and m.redriven and not m.backstop and _names_its_time(parsed):
        yield from _refire(run, m)
        return
    if m.malformed or not isinstance(parsed, envelope_format.Envelope):
        run.report.left += 1
        return
    found = yield Call("dynamodb", "get_item", get(run.settings.table_name, parsed.job_id))
    item = found.get("Item")
    if item is None:
        run.report.left += 1
        return
    job = job_from_item(item)
    if job.status is JobStatus.DEAD:
        yield from _dead_copy(run, m, job)
    elif job.status not in _LIVE or _requeued_since(job, m):
        yield from _delete(run, m)
    elif job.status is JobStatus.RUNNING and job.lease_expires and job.lease_expires.timestamp() > run.now:
        run.report.left += 1
        run.unsettled = True
    elif redrive.redispatches(item) < run.scope.redispatch_limit:
        yield from _redispatch(run, m, job, item)
    else:
        yield from _make_dead(run, m, parsed, redrive.redispatches(item))


def _requeued_since(job: Job, m: DlqMessage) -> bool:
    """True when an operator requeued the job after this copy was sent: a newer message carries it."""
    times = [float(e["at"]) for e in audit_entries(job) if e.get("action") in _REQUEUES and e.get("at")]
    return bool(times) and max(times) > m.sent_at


def _redispatch(run: _Pass, m: DlqMessage, job: Job, item: Item) -> Flow[None]:
    """Count the re-dispatch in the record, send the message's body back to its queue, delete the copy."""
    write = redrive.count_redispatch(run.settings.table_name, item)
    if isinstance((yield from apply(write)), Refused):  # moved on since the read: the next pass sees where
        run.report.left += 1
        run.unsettled = True
        return
    yield from run.queue_urls.send_flow(
        routes.job_route(job.queue, job.priority, job.serialize_key),
        m.body,
        delay_s=sqs.clamp_delay(job.run_at.timestamp() - run.now),
        tenant=job.tenant,
        serialize_key=job.serialize_key,
        trace=job.trace,
    )
    yield from dead_letters.delete_flow(m, run.scan)
    run.report.redispatched.append(job.id)


def _names_its_time(fire: envelope_format.Fire) -> bool:
    """True when the fire carries its occurrence's time: sent again, it still names the same job.

    (One without it has its occurrence derived from when it was sent, which a new send would change.)
    """
    try:
        datetime.fromisoformat(fire.at.replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


def _refire(run: _Pass, m: DlqMessage) -> Flow[None]:
    """Send a redriven schedule fire back to its queue (its job's enqueue is idempotent), a bounded number of times.

    A fire has no record: it becomes its occurrence's job when a worker meets it, and a worker that
    could not enqueue (AWS failing) leaves it for the next receive until SQS redrives it. The
    occurrence must not be lost for that; its job's idempotency key (schedule and occurrence) makes
    a fire sent back harmless when the job exists after all. The count travels on the message, and
    a fire sent back ``redispatch_limit`` times stays in the DLQ for an operator.
    """
    if m.fire_redispatches >= run.scope.redispatch_limit:
        run.report.left += 1
        return
    key = routes.route(m.queue)
    urls = yield from run.queue_urls.flow([key])
    params = sqs.send_one(urls[key], m.body)
    params["MessageAttributes"] = {
        envelope_format.FIRE_REDISPATCHES: {"DataType": "Number", "StringValue": str(m.fire_redispatches + 1)}
    }
    params |= routes.message_fields(key, tenant=None, serialize_key=None, fair=run.settings.fair_queues)
    yield Call("sqs", "send_message", params)
    yield from dead_letters.delete_flow(m, run.scan)
    run.report.refired.append(m.message_id)


def _make_dead(
    run: _Pass, m: DlqMessage, envelope: envelope_format.Envelope, redispatched: int
) -> Flow[None]:
    """Make the record dead (SQS redrove it past the re-dispatch limit); this copy is then the dead job's."""
    reason = redrive.reason(run.scope.receives, redispatched)
    write = redrive.redriven(
        run.settings.table_name,
        envelope,
        now=run.now,
        reason=reason,
        retention_s=run.settings.retention_for(envelope.job_type, JobStatus.DEAD),
    )
    landed = yield from apply(write)
    if isinstance(landed, Refused) or landed.attributes is None:
        run.report.left += 1  # claimed or finished meanwhile (or this write landed and its answer
        run.unsettled = True  # was lost): the next pass sees the record as it is now
        return
    run.report.dead.append(envelope.job_id)
    yield from _dead_copy(run, m, job_from_item(dict(landed.attributes)))


def _dead_copy(run: _Pass, m: DlqMessage, job: Job) -> Flow[None]:
    """A dead job's copy: collected for the keep-one choice, or moved out of a FIFO backstop DLQ."""
    if not m.backstop:
        run.dead_copies.setdefault(job.id, []).append(m)
        return
    urls = yield from run.queue_urls.flow([m.queue])
    error = job.last_error
    attributes = {
        envelope_format.DLQ_REASON: job.reason or dead_letters.REDRIVEN,
        envelope_format.DLQ_JOB_ID: job.id,
        envelope_format.DLQ_JOB_TYPE: job.type,
        envelope_format.DLQ_SOURCE_QUEUE: routes.queue_name(run.settings, routes.route(m.queue, routes.FIFO)),
    }
    if error is not None:
        attributes |= {
            envelope_format.DLQ_ERROR_CLASS: error.error_class,
            envelope_format.DLQ_ERROR_MESSAGE: error.message,
        }
    standard = urls[dlq_key(m.queue)]
    yield Call("sqs", "send_message", sqs.send_one(standard, m.body, attributes=attributes))
    yield from dead_letters.delete_flow(m, run.scan)
    run.report.moved.append(job.id)


def _delete(run: _Pass, m: DlqMessage) -> Flow[None]:
    yield from dead_letters.delete_flow(m, run.scan)
    run.report.deleted += 1
