"""Cancel one job: a waiting one ends ``cancelled``, a running one is asked to stop.

Why here and not beside enqueue: a batch item's cancel also ends its count on the batch (one
transaction, ``batches.completion``), a job with a ``notify`` target is told of its cancel in the
cancel's own transaction (``notify.plugin.told_cancel``), a parent waiting on its children
(``ctx.children``) cancels their batch once its own cancel landed, and the producer must not depend
on any of these features.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from sqsjobs._aws import Call, Flow
from sqsjobs.batches import records as batch_records
from sqsjobs.batches.completion import BatchEnv, cancel_item_flow, fail_flow, read_record_flow
from sqsjobs.children.records import waiting_batches
from sqsjobs.errors import BatchNotFound
from sqsjobs.job import JobStatus
from sqsjobs.notify.plugin import told_cancel
from sqsjobs.store import codec, operator, requests
from sqsjobs.store.apply import Landed, Refusal, Refused, apply, apply_all
from sqsjobs.transport.queues import QueueUrls

if TYPE_CHECKING:
    from sqsjobs.config import Settings
    from sqsjobs.job import Job
    from sqsjobs.registry import Registry

WAITING = (JobStatus.QUEUED, JobStatus.RETRY_SCHEDULED)


def cancel_flow(
    settings: Settings, registry: Registry, job_id: str, now: float, *, reason: str | None = None
) -> Flow[str]:
    """Cancel a waiting job (``cancelled``), or ask a running one to stop (``requested``).

    ``reason``: what a plain job's record says (default: ``cancelled by request``).

    A plain job's cancel is one conditional write. One that a batch counts or a target is told of
    is refused by it (the refusal shows the record), then cancelled in one transaction with its count
    or its delivery.
    """
    table = settings.table_name
    # ALL_NEW: the record it cancelled says whether it waited on children (no read, no extra unit).
    retention_s = settings.retention_for("", JobStatus.CANCELLED)
    write = operator.cancel(
        table, job_id, now=now, retention_s=retention_s, untold=True, reason=reason or "cancelled by request"
    )
    cancelled = yield from apply(dataclasses.replace(write, returns="ALL_NEW"))
    if isinstance(cancelled, Landed):
        yield from _cancel_children(settings, registry, job_id, cancelled.attributes or {}, now)
        return "cancelled"
    job = operator.interpret_cancel_refusal(job_id, cancelled)
    if job.status in WAITING and (job.batch is not None or job.notify is not None):
        if (yield from _cancel_with_follow_ups(settings, registry, job, now)):
            yield from _cancel_children(settings, registry, job_id, cancelled.item or {}, now)
            return "cancelled"
        job = codec.job_from_item((yield Call("dynamodb", "get_item", requests.get(table, job_id)))["Item"])
    if job.status is not JobStatus.RUNNING:
        raise operator.not_cancellable(job)
    asked = yield from apply(operator.request_cancel(table, job_id, now=now))
    if isinstance(asked, Refused):
        raise operator.not_cancellable(operator.interpret_cancel_refusal(job_id, asked))
    return "requested"


def _cancel_with_follow_ups(settings: Settings, registry: Registry, job: Job, now: float) -> Flow[bool]:
    """Cancel waiting ``job`` with its batch count and its delivery in one transaction; False if it moved on."""
    env = BatchEnv(settings, QueueUrls(settings), registry=registry)
    if job.batch is not None:  # the item's count, then its batch's check (with the delivery inside)
        return (yield from cancel_item_flow(env, job, now))
    told = told_cancel(registry, settings, job, now)
    retention_s = settings.retention_for(job.type, JobStatus.CANCELLED)
    write = operator.cancel(settings.table_name, job.id, now=now, retention_s=retention_s)
    landed = yield from apply_all([{"Update": write.transact_item()}, *told.entries()])
    if isinstance(landed, Refused):
        if landed.reason is Refusal.CONTENDED:
            raise landed.as_error()
        return False  # claimed or cancelled meanwhile
    yield from told.send_flow(env.queue_urls)
    return True


def _cancel_children(
    settings: Settings, registry: Registry, job_id: str, record: Any, now: float
) -> Flow[None]:
    """The cancelled job waited on children (``ctx.children``): their batch ends cancelled.

    Its children not started are cancelled, its running ones asked to stop (``batches.completion``).
    """
    env = BatchEnv(settings, QueueUrls(settings), registry=registry)
    for batch_id in waiting_batches(record):
        try:
            batch = yield from read_record_flow(env, batch_id)
        except BatchNotFound:
            continue
        if batch.status != batch_records.COMPLETE:
            yield from fail_flow(env, batch, f"parent job {job_id} was cancelled", now)
