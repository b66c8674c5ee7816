"""``/jobs``: enqueue, read, list, cancel and retry jobs, over the App's async producer API and ``ops.inspect``.

The same flows as ``sqsjobs enqueue`` and ``sqsjobs jobs get|list|cancel|retry``; each JSON answer
is the CLI's ``--json`` document, so the two agree on every field.

``POST /jobs`` answers in the enqueue's round trip: a job due now also costs one
GetQueueAttributes, for ``queue_depth`` and ``estimated_start`` (the depth over the drain rate this
process measured from those reads: ``sqsjobs.api.drain``; see ``EnqueueResponse``), made while the
message and the record are on their way. A job without an idempotency key or dedup mode is new, so
its answer needs no read; with one, the record is read back after the enqueue (one strongly
consistent GetItem), since a repeat answers with where that job already is.
"""

from __future__ import annotations

import weakref
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Body, Query, Request, Response

from sqsjobs._aws import Call, Flow, together
from sqsjobs.api import responses
from sqsjobs.api.audit import actor_of, audit, retry_by
from sqsjobs.api.deps import AppDep, problems
from sqsjobs.api.drain import DrainMeter
from sqsjobs.api.models import (
    CancelResponse,
    EnqueueRequest,
    EnqueueResponse,
    EstimateBasis,
    JobId,
    RetryRequest,
    RetryResponse,
    notify_json,
    since_seconds,
)
from sqsjobs.api.problems import MISSING_QUEUE, problem
from sqsjobs.dedupe.modes import of_fields
from sqsjobs.errors import JobNotFound, PayloadError, TransportError, WaitTimeout
from sqsjobs.job import JobStatus
from sqsjobs.ops import inspect as inspect_ops
from sqsjobs.ops import job_views
from sqsjobs.ops._common import iso
from sqsjobs.ops.requeue import KEEP
from sqsjobs.producer import JobRequest
from sqsjobs.store import waiting

router = APIRouter(tags=["jobs"])


def depth_flow(app_urls: Any, queue: str) -> Flow[tuple[int, int]]:
    """Messages in ``queue`` now, visible and in flight (SQS's approximate counts)."""
    urls = yield from app_urls.flow([queue])
    answer = yield Call(
        "sqs",
        "get_queue_attributes",
        {
            "QueueUrl": urls[queue],
            "AttributeNames": ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        },
    )
    attributes = answer.get("Attributes", {})
    return (
        int(attributes.get("ApproximateNumberOfMessages", 0)),
        int(attributes.get("ApproximateNumberOfMessagesNotVisible", 0)),
    )


#: One drain meter per App this process serves.
_METERS: weakref.WeakKeyDictionary[Any, DrainMeter] = weakref.WeakKeyDictionary()


def meter_of(app: Any) -> DrainMeter:
    """The drain meter of the API of ``app`` in this process."""
    meter = _METERS.get(app)
    if meter is None:
        meter = _METERS[app] = DrainMeter()
    return meter


@router.post(
    "/jobs",
    status_code=202,
    response_model=EnqueueResponse,
    responses=problems(400, 409, 413, 422),
    summary="Enqueue a job",
)
async def enqueue(body: EnqueueRequest, app: AppDep, response: Response) -> Any:
    """Validate the payload against the job type's handler, enqueue the job, and say when it may start.

    The job type must be one this App registers. With an ``idempotency_key`` a repeat returns the
    same job (same payload) or 409 (another payload).
    """
    app.registry.get(body.type)  # HandlerNotFound (422) before anything is sent
    request = JobRequest(
        body.type,
        body.payload,
        idempotency_key=body.idempotency_key,
        delay=body.delay,
        run_at=body.run_at,
        queue=body.queue,
        tenant=body.tenant,
        priority=body.priority,
        serialize_key=body.serialize_key,
        dedupe=of_fields(body),
        notify=notify_json(body.notify),
        tags=body.tags or None,
    )
    [job] = app.producer.build([request])  # the App's own enqueue path: build, then send_flow
    due_now = not job.held and job.run_at <= job.now
    flows: list[Flow[Any]] = [app.producer.send_flow([job])]
    if due_now:  # the queue's depth is read while the job is enqueued: no round trip of its own
        flows.append(depth_flow(app.queue_urls, job.queue))
    outcomes = await app.arun(together(*flows))
    try:
        job_id = outcomes[0].get()[0]  # a dedup mode may name another (live, first) job
    except TransportError as exc:
        if body.queue is None or exc.code not in MISSING_QUEUE:
            raise
        return problem(
            "no-such-queue",
            f"queue {body.queue!r} does not exist for this App ({exc}); omit queue to use the handler's",
            field="queue",
            instance="/jobs",
        )
    status, run_at, later = JobStatus.QUEUED, datetime.fromtimestamp(job.run_at, UTC), not due_now
    keyed = body.idempotency_key is not None or job.policy is not None
    if keyed or job_id != job.id:  # a repeat or a dedup mode: the job is where its record says
        recorded = await app.aget(job_id, load_result=False)
        status, run_at = recorded.status, recorded.run_at
        later = run_at.timestamp() > job.now
    estimated: datetime | None = None
    depth: int | None = None
    now = datetime.fromtimestamp(job.now, UTC)  # the estimate counts from the enqueue, as run_at does
    basis: EstimateBasis | None = None
    if status in (JobStatus.QUEUED, JobStatus.RETRY_SCHEDULED):
        if later:
            estimated, basis = run_at, EstimateBasis(method="run_at")
        elif status is JobStatus.QUEUED and due_now and outcomes[1].error is None:
            # An estimate: a depth SQS could not give leaves it unknown, not the enqueue failed.
            visible, in_flight = outcomes[1].value
            depth = visible
            meter = meter_of(app)
            meter.sent(job.queue)
            drain = meter.observe(job.queue, visible + in_flight)
            # the job's own message is at the back (read while it was on its way: one fewer at most)
            ahead = max(visible - 1, 0)
            if ahead == 0:
                estimated, basis = now, EstimateBasis(method="nothing_ahead", ahead=0)
            elif drain is not None:
                estimated = now + timedelta(seconds=ahead / drain.per_s)
                basis = EstimateBasis(
                    method="depth_over_drain_rate",
                    ahead=ahead,
                    drain_per_s=round(drain.per_s, 3),
                    observed_s=round(drain.span_s, 1),
                    samples=drain.samples,
                )
    response.headers["Location"] = f"/jobs/{job_id}"
    return EnqueueResponse(
        id=job_id,
        type=job.type,
        queue=job.queue,
        status=status.value,
        run_at=run_at,
        estimated_start=estimated,
        queue_depth=depth,
        deduplicated=getattr(job_id, "deduplicated", False),
        replaced=getattr(job_id, "replaced", None),
        estimate=basis,
    )


@router.get(
    "/jobs/{job_id}",
    response_model=responses.JobRecord,
    response_model_exclude_unset=True,
    responses=problems(404, 422),
    summary="One job's record",
)
async def get_job(
    job_id: JobId,
    app: AppDep,
    wait: Annotated[
        float,
        Query(
            ge=0,
            le=waiting.MAX_HTTP_WAIT_S,
            description="Seconds to wait for the job to end (long poll): the answer comes as soon as it "
            "is terminal, or after this long with the record as it is then",
        ),
    ] = 0,
) -> dict[str, Any]:
    """The job's record, as ``sqsjobs jobs get --json``: status, attempts, times, result, error, history, audit.

    With ``wait`` the request is held until the job ends (``App.await_result``'s reads, see
    docs/results.md) or ``wait`` seconds passed; a job still running then is answered as it is
    (200, a status that is not terminal), so a client simply asks again.
    """
    if wait <= 0:
        try:
            return job_views.job_to_dict(await app.aget(job_id))
        except JobNotFound:
            if app.settings.archive_days <= 0:
                raise
            return job_views.job_to_dict(await app.archive.aget(job_id))  # its record is gone: archived?
    try:
        job = await app.await_result(job_id, timeout=wait)
    except WaitTimeout as exc:
        job = exc.last
    return job_views.job_to_dict(job)


@router.delete(
    "/jobs/{job_id}", response_model=CancelResponse, responses=problems(404, 409, 422), summary="Cancel a job"
)
async def cancel_job(job_id: JobId, app: AppDep, request: Request) -> CancelResponse:
    """Cancel a waiting job, or ask a running one to stop at its next heartbeat; 409 when it has finished."""
    outcome = await app.acancel(job_id)
    audit(app, request, "cancel_job", job_id=job_id, outcome=outcome)
    return CancelResponse(id=job_id, result="cancelled" if outcome == "cancelled" else "requested")


@router.post(
    "/jobs/{job_id}/retry",
    response_model=RetryResponse,
    responses=problems(400, 404, 409, 413, 422),
    summary="Retry a dead or cancelled job",
)
async def retry_job(
    job_id: JobId, app: AppDep, request: Request, body: Annotated[RetryRequest | None, Body()] = None
) -> Any:
    """Put a dead or cancelled job back in its queue: attempts reset, same id and key, audit entry kept.

    With ``payload`` the job runs with it instead of its own (validated by the job's handler; 422
    when it refuses it). Without, 409 when the current code refuses the job's own payload.
    """
    payload = body.payload if body is not None and "payload" in body.model_fields_set else KEEP
    if payload is not KEEP:
        # Validated here first too, for the handler's errors field by field (the retry says one line).
        job = await app.aget(job_id, load_result=False)
        if job.type in app.registry:
            app.registry.get(job.type).dump(payload)
    try:
        job = await app.arun(retry_by(app, job_id, actor_of(request), payload))
    except PayloadError as exc:
        if payload is not KEEP:
            raise  # the corrected payload is at fault: 422 (or 413) naming it
        return problem("payload-refused", str(exc), field="job_id", instance=f"/jobs/{job_id}/retry")
    audit(app, request, "retry_job", job_id=job_id, replaced_payload=payload is not KEEP)
    return RetryResponse(
        id=job.id,
        status=job.status.value,
        queue=job.queue,
        max_attempts=job.max_attempts,
        payload_hash=job.payload_hash,
        payload_version=job.payload_version,
    )


@router.get(
    "/jobs",
    response_model=responses.JobPage,
    response_model_exclude_unset=True,
    responses=problems(422),
    summary="List jobs, newest first",
)
async def list_jobs(
    app: AppDep,
    job_type: Annotated[
        str | None, Query(alias="type", max_length=256, description="Only this job type")
    ] = None,
    status: Annotated[JobStatus | None, Query(description="Only jobs in this state")] = None,
    queue: Annotated[str | None, Query(max_length=64, description="Only this logical queue")] = None,
    tenant: Annotated[str | None, Query(max_length=256, description="Only this tenant")] = None,
    tag: Annotated[
        str | None,
        Query(
            pattern=r"^[A-Za-z0-9_.:/-]{1,64}=[^\x00-\x1f]{1,256}$",
            description="Only jobs with this tag, name=value (read from the tags index, newest first)",
        ),
    ] = None,
    since: Annotated[
        str | None,
        Query(
            max_length=64,
            description="Only jobs updated this recently: 30m, 2h, 7d, or an ISO 8601 instant (default "
            "24h; status=dead: finished this recently, default all)",
        ),
    ] = None,
    cursor: Annotated[
        str | None, Query(max_length=8192, description="The next_cursor of the previous page")
    ] = None,
    limit: Annotated[
        int, Query(ge=1, le=inspect_ops.MAX_LIMIT, description="Rows per page")
    ] = inspect_ops.DEFAULT_LIMIT,
) -> Any:
    """One page of jobs, as ``sqsjobs jobs list --json``; follow ``next_cursor`` with the same filters.

    ``status=dead`` reads the attention index, ``tag`` the tags index; every other listing scans the table within the
    window, a bounded number of items per call, so a page may be short (or empty) with a cursor.
    """
    now = app.clock.now()
    since_s = None
    if since is not None:
        try:
            since_s = since_seconds(since, now)
        except ValueError as exc:
            return problem("invalid-request", str(exc), field="since", instance="/jobs")
    query = inspect_ops.ListQuery(status, job_type, queue, tenant, since_s, limit, cursor, tag=tag)
    page: inspect_ops.JobPage = await app.arun(inspect_ops.list_flow(app.settings, query, now))
    return {
        "jobs": [r.to_dict() for r in page.rows],
        "next_cursor": page.next_cursor,
        "index": page.index,
        "read": page.read,
        "since": iso(page.since),
    }
