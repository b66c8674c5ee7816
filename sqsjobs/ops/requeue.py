"""The operator's ``replay`` transition: a dead or cancelled job back to ``queued``.

Shared by ``sqsjobs jobs retry`` (``App.retry``) and ``sqsjobs dlq replay``. Durable state first
(DESIGN §3.3): the record is re-validated against the *current* handler (an older payload upgraded
by its upcasts first, as the worker will), then moved with one conditional write (attempts reset,
job id, payload and idempotency key kept, an audit entry appended), and only then is a hint sent. If the hint is lost, the record is still ``queued`` and
the sweeper dispatches it; a re-run that finds the job already queued sends a hint again, which
is harmless because the claim decides.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import tenacity

from sqsjobs._aws import Call, Flow, retrying
from sqsjobs.errors import (
    AwsError,
    HandlerNotFound,
    InvalidTransition,
    JobNotFound,
    PayloadInvalid,
    RecordChanged,
    StoreError,
)
from sqsjobs.job import TRANSITIONS
from sqsjobs.ops._common import actor
from sqsjobs.store import requests as rq
from sqsjobs.transport import sqs

if TYPE_CHECKING:
    from sqsjobs.config import Settings
    from sqsjobs.job import Job
    from sqsjobs.registry import Registry
    from sqsjobs.transport.queues import QueueUrls

#: Re-reads when the record changed between our read and our conditional write.
CONFLICT_RETRIES = 3
REPLAYABLE = TRANSITIONS["replay"][0]

Outcome = Literal["requeued", "would_requeue", "not_replayable", "invalid", "missing"]


#: Read and write again at once (no wait: the record has already changed; a re-read shows how).
_ON_CONFLICT = tenacity.Retrying(
    stop=tenacity.stop_after_attempt(CONFLICT_RETRIES),
    retry=tenacity.retry_if_exception_type(RecordChanged),
    reraise=True,
)


@dataclass(frozen=True)
class Requeue:
    """What happened to one job."""

    job_id: str
    outcome: Outcome
    #: The record after the write (``requeued``) or as found.
    job: Job | None = None
    #: Why it was not requeued (``invalid``, ``not_replayable``).
    reason: str = ""
    #: For ``requeued``: whether the SQS hint went out (if not, the sweeper dispatches the record).
    hint_sent: bool = False


def check_replayable(registry: Registry, job: Job) -> str:
    """Why the current code would refuse to run ``job`` ('' when it would run it)."""
    try:
        spec = registry.get(job.type)
    except HandlerNotFound as exc:
        return str(exc)
    if _in_its_message(job):
        return ""  # it was cancelled while it waited: its own message, still queued, carries the payload
    if job.payload_version > spec.version:
        return f"payload version {job.payload_version} is newer than the handler's {spec.version}"
    try:
        spec.load(job.payload, job.payload_version)  # what the worker will do: upcast, then validate
    except PayloadInvalid as exc:
        return str(exc)
    return ""


def _in_its_message(job: Job) -> bool:
    """True for a job cancelled before any worker saw its message: the record lacks the payload."""
    return job.payload is None and (job.payload_size or 0) > len("null")


def hint_flow(queue_urls: QueueUrls, job: Job) -> Flow[bool]:
    """Send the job's hint now; False (not raised) when SQS refuses, since the sweeper covers it."""
    try:
        urls = yield from queue_urls.flow({job.queue})
        yield Call("sqs", "send_message", sqs.send_one(urls[job.queue], rq.envelope_of(job).to_body()))
    except AwsError:
        return False
    return True


def requeue_flow(
    job_id: str,
    *,
    settings: Settings,
    registry: Registry,
    queue_urls: QueueUrls,
    action: str,
    now: float,
    write: bool = True,
    by: str | None = None,
    note: dict[str, str | float | None] | None = None,
) -> Flow[Requeue]:
    """Move ``job_id`` from dead|cancelled to queued and send its hint.

    Args:
        job_id: the job.
        settings: where the table is.
        registry: the handlers that judge the payload (the current code, not the one that failed).
        queue_urls: where the hint goes.
        action: ``retry`` or ``replay``, written to the audit entry.
        now: the current time.
        write: False checks everything and changes nothing (``would_requeue``).
        by: who acts (default ``user@host``).
        note: extra audit fields (e.g. the DLQ message id).
    """
    table = settings.table_name

    def attempt() -> Flow[Requeue]:
        response = yield Call("dynamodb", "get_item", rq.get(table, job_id))
        item = response.get("Item")
        if not item:
            return Requeue(job_id, "missing", reason=f"no record for job {job_id}")
        job = rq.job_from_item(item)
        if job.status not in REPLAYABLE:
            return Requeue(job_id, "not_replayable", job, reason=f"job is {job.status.value}")
        problem = check_replayable(registry, job)
        if problem:
            return Requeue(job_id, "invalid", job, reason=problem)
        if not write:
            return Requeue(job_id, "would_requeue", job)
        spec = registry.get(job.type)
        audit = {
            "action": action,
            "at": now,
            "by": by or actor(),
            "from": job.status.value,
            "attempts": job.attempt,
            "reason": job.reason,
            **(note or {}),
        }
        params = rq.replay(
            table,
            job,
            seen_updated=rq.updated_raw(item),
            now=now,
            max_attempts=spec.max_attempts,
            audit=audit,
            recheck_at=now + settings.stale_after_s,  # the sweeper re-sends if this hint is lost
            pending=not _in_its_message(job),
        )
        try:
            written = yield Call("dynamodb", "update_item", params)
        except StoreError as exc:
            if not rq.is_conflict(exc):
                raise
            current = rq.interpret_replay_refusal(job_id, exc)
            if current.status in REPLAYABLE:
                raise RecordChanged from exc  # changed under us (e.g. a concurrent cancel): read again
            return Requeue(job_id, "not_replayable", current, reason=f"job is {current.status.value}")
        queued = rq.job_from_item(written["Attributes"])
        if _in_its_message(job):  # its message is still in the queue and brings it back
            return Requeue(job_id, "requeued", queued, hint_sent=False)
        sent = yield from hint_flow(queue_urls, queued)
        return Requeue(job_id, "requeued", queued, hint_sent=sent)

    try:
        return (yield from retrying(attempt, _ON_CONFLICT))
    except RecordChanged:
        raise RecordChanged(f"job {job_id} kept changing while it was being requeued; try again") from None


def retry_flow(
    job_id: str,
    *,
    settings: Settings,
    registry: Registry,
    queue_urls: QueueUrls,
    now: float,
    by: str | None = None,
) -> Flow[Job]:
    """``App.retry``: requeue one job or raise why not (``JobNotFound``, ``InvalidTransition``, ...)."""
    result = yield from requeue_flow(
        job_id, settings=settings, registry=registry, queue_urls=queue_urls, action="retry", now=now, by=by
    )
    if result.outcome == "missing":
        raise JobNotFound(f"no job with id {job_id!r} in table {settings.table_name}")
    if result.outcome == "not_replayable":
        raise InvalidTransition(
            f"job {job_id} is {result.job.status.value if result.job else '?'}; "
            f"only {' or '.join(sorted(s.value for s in REPLAYABLE))} jobs can be retried"
        )
    if result.outcome == "invalid":
        raise PayloadInvalid(f"job {job_id} cannot be retried with the current code: {result.reason}")
    assert result.job is not None
    return result.job
