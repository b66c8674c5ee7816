"""Cancel one job: a waiting one ends ``cancelled``, a running one is asked to stop.

Why here and not beside enqueue: a batch item's cancel also ends its count on the batch (one
transaction, ``workflows.completion``), and the producer must not depend on the workflow features.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqsjobs._aws import Call, Flow
from sqsjobs.job import JobStatus
from sqsjobs.store import codec, operator, requests
from sqsjobs.store.apply import Landed, Refused, apply
from sqsjobs.transport.queues import QueueUrls
from sqsjobs.workflows.completion import BatchEnv, cancel_item_flow

if TYPE_CHECKING:
    from sqsjobs.config import Settings


def cancel_flow(settings: Settings, job_id: str, now: float) -> Flow[str]:
    """Cancel a waiting job (``cancelled``), or ask a running one to stop (``requested``)."""
    cancelled = yield from apply(
        operator.cancel(settings.table_name, job_id, now=now, retention_s=settings.retention_s)
    )
    if isinstance(cancelled, Landed):
        return "cancelled"
    job = operator.interpret_cancel_refusal(job_id, cancelled)
    if job.batch is not None and job.status in (JobStatus.QUEUED, JobStatus.RETRY_SCHEDULED):
        # A batch item: refused above, cancelled here with its count on the batch (one transaction).
        env = BatchEnv(settings, QueueUrls(settings))
        if (yield from cancel_item_flow(env, job, now)):
            return "cancelled"
        job = codec.job_from_item(
            (yield Call("dynamodb", "get_item", requests.get(settings.table_name, job_id)))["Item"]
        )
    if job.status is not JobStatus.RUNNING:
        raise operator.not_cancellable(job)
    asked = yield from apply(operator.request_cancel(settings.table_name, job_id, now=now))
    if isinstance(asked, Refused):
        raise operator.not_cancellable(operator.interpret_cancel_refusal(job_id, asked))
    return "requested"
