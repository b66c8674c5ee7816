"""``/leases``: the HTTP worker protocol, so a worker in any language runs external job types (docs/http-workers.md).

``POST /leases`` (``lease_jobs``) long-polls up to 20 s and answers jobs already claimed, each with
its payload, attempt, deadline and a sealed lease; ``POST /leases/heartbeat`` (``heartbeat_lease``)
keeps the lease and says whether a cancel was requested; ``POST /leases/complete``
(``complete_lease``) and ``POST /leases/fail`` (``fail_lease``) end the run. A lease that no longer
holds its job is a 409 ``lease-conflict`` with the record's state; one altered or not issued here is
a 400 ``lease-invalid``. The server keeps nothing between requests (``sqsjobs.remote.lease_server``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Body, Request
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from sqsjobs.api.deps import AppDep, problems
from sqsjobs.api.models import check_json
from sqsjobs.api.problems import problem
from sqsjobs.errors import (
    ConfigurationError,
    PermanentRemoteError,
    RemoteError,
    RetryRemoteError,
)
from sqsjobs.job import MAX_PROGRESS_DATA_BYTES, MAX_PROGRESS_MESSAGE_CHARS, Progress
from sqsjobs.remote.lease_server import MAX_JOBS, MAX_WAIT_S, LeaseServer

if TYPE_CHECKING:
    from sqsjobs.remote.lease_server import Leased

router = APIRouter(tags=["http workers"])

Sealed = Annotated[
    str, Field(min_length=16, max_length=1_500_000, description="The lease, as lease_jobs gave it")
]


class LeaseRequest(BaseModel):
    """The body of ``POST /leases``."""

    model_config = ConfigDict(extra="forbid")

    worker_id: str = Field(
        pattern=r"^[A-Za-z0-9._:@-]{1,100}$",
        description="Who asks: written into each job's record as its owner (http:<worker_id>)",
    )
    types: list[Annotated[str, Field(min_length=1, max_length=200)]] = Field(
        min_length=1, max_length=50, description="External job types this worker runs"
    )
    max_jobs: int = Field(default=1, ge=1, le=MAX_JOBS, description="At most this many jobs in the answer")
    wait_s: float = Field(
        default=MAX_WAIT_S, ge=0, le=MAX_WAIT_S, description="Wait this long for a first job (long poll)"
    )


class LeasedJob(BaseModel):
    """One claimed job: run it, heartbeat before ``lease_expires``, then complete or fail its lease."""

    lease: str = Field(description="Opaque and signed: send it back with each heartbeat and the end")
    job_id: str
    type: str
    attempt: int = Field(description="This run's attempt, from 1")
    max_attempts: int | None
    fencing_token: str = Field(description="<job id>:<epoch>: make downstream writes conditional on it")
    payload: Any = Field(description="The payload, upgraded to the type's version and validated")
    previous_result: Any = Field(default=None, description="A chain step's: the step before's result")
    created_at: datetime
    deadline: datetime = Field(description="Past this the run is a timeout (the type's timeout)")
    lease_expires: datetime = Field(description="Heartbeat before this, or another worker may run the job")
    heartbeat_every_s: float = Field(description="How often to heartbeat")
    tenant: str | None = None
    parent_id: str | None = None
    root_id: str | None = None


class Leases(BaseModel):
    """``POST /leases``: the jobs claimed for this worker (none when the wait ended empty)."""

    leases: list[LeasedJob]


class ProgressReport(BaseModel):
    """How far the run has come (as ``ctx.progress``): written by this heartbeat's renewal."""

    model_config = ConfigDict(extra="forbid")

    fraction: float | None = Field(None, ge=0, le=1, allow_inf_nan=False, description="Done over total")
    message: str | None = Field(None, max_length=MAX_PROGRESS_MESSAGE_CHARS)
    data: Any = Field(None, description=f"Small JSON, at most {MAX_PROGRESS_DATA_BYTES} bytes")

    @model_validator(mode="after")
    def _bounded(self) -> ProgressReport:
        Progress(self.fraction, self.message, check_json(self.data))  # ValueError: 422 naming what is wrong
        return self


class LeaseHeld(BaseModel):
    """The body of a heartbeat: the lease, and optionally a progress report."""

    model_config = ConfigDict(extra="forbid")

    lease: Sealed
    progress: ProgressReport | None = Field(
        None, description="The run's progress; the record shows it (GET /jobs/{id}, its events)"
    )


class HeartbeatAnswer(BaseModel):
    """``POST /leases/heartbeat``."""

    lease_expires: datetime
    cancel_requested: bool = Field(description="Stop the run and fail its lease with cancelled: true")
    heartbeat_every_s: float


class Completion(BaseModel):
    """The body of ``POST /leases/complete``."""

    model_config = ConfigDict(extra="forbid")

    lease: Sealed
    result: Any = Field(default=None, description="The job's result (JSON); large ones go to S3")

    @field_validator("result")
    @classmethod
    def _plain_json(cls, value: Any) -> Any:
        return check_json(value)  # a result is read back by callers, chains and consoles: a payload's bounds


class ReportedError(BaseModel):
    """What the worker's handler raised."""

    model_config = ConfigDict(extra="forbid")

    type: str = Field(default="Error", min_length=1, max_length=200, description="Its class, e.g. TypeError")
    message: str = Field(default="", max_length=10_000)
    stack: str | None = Field(default=None, max_length=20_000)


class Failure(BaseModel):
    """The body of ``POST /leases/fail``."""

    model_config = ConfigDict(extra="forbid")

    lease: Sealed
    error: ReportedError = Field(default_factory=ReportedError)
    retryable: bool = Field(default=True, description="False: the job is dead at once (a permanent error)")
    retry_after_s: float | None = Field(
        default=None, ge=0, le=43_200, description="Run again after this long (attempts still count)"
    )
    cancelled: bool = Field(default=False, description="The run stopped because a cancel was requested")


class Finished(BaseModel):
    """``POST /leases/complete`` and ``/leases/fail``: the job's status now."""

    job_id: str
    status: str = Field(description="succeeded, retry_scheduled, dead or cancelled")
    attempt: int


def _server(app: Any) -> LeaseServer:
    server: LeaseServer = app.state.sqsjobs_leases
    return server


def _when(epoch_s: float) -> datetime:
    return datetime.fromtimestamp(epoch_s, UTC)


def _beat_every(app: Any) -> float:
    """A third of the shorter of the record's lease and the message's visibility: two beats may be lost."""
    settings = app.settings
    return round(min(float(settings.lease_s), float(settings.visibility_timeout_s)) / 3, 3)


def _leased_job(app: Any, leased: Leased) -> LeasedJob:
    job = leased.job
    return LeasedJob(
        lease=leased.lease,
        job_id=job.id,
        type=job.type,
        attempt=job.attempt,
        max_attempts=job.max_attempts,
        fencing_token=job.fencing_token,
        payload=leased.payload,
        previous_result=leased.context.get("previous_result"),
        created_at=job.created_at,
        deadline=_when(leased.deadline),
        lease_expires=_when(leased.lease_expires),
        heartbeat_every_s=_beat_every(app),
        tenant=job.tenant,
        parent_id=job.parent_id,
        root_id=job.root_id,
    )


@router.post(
    "/leases",
    response_model=Leases,
    responses=problems(422),
    summary="Lease jobs of external types: each already claimed for this worker",
    operation_id="lease_jobs",
)
async def lease_jobs(app: AppDep, request: Request, body: Annotated[LeaseRequest, Body()]) -> Any:
    """Long-polls up to ``wait_s`` for up to ``max_jobs`` jobs; each is claimed by the same conditional write a Python worker makes."""
    server = _server(request.app)
    try:  # the types are checked before anything is received
        leased = await server.lease(body.worker_id, body.types, max_jobs=body.max_jobs, wait_s=body.wait_s)
    except ConfigurationError as exc:
        return problem("unknown-job-type", str(exc), field="types", instance=request.url.path)
    return Leases(leases=[_leased_job(app, one) for one in leased])


@router.post(
    "/leases/heartbeat",
    response_model=HeartbeatAnswer,
    responses=problems(400, 409, 422),
    summary="Keep a lease: the job stays this worker's, its message hidden",
    operation_id="heartbeat_lease",
)
async def heartbeat_lease(app: AppDep, request: Request, body: Annotated[LeaseHeld, Body()]) -> Any:
    """Renews the record's lease and the message's visibility; answers whether a cancel was requested."""
    report = body.progress
    progress = None if report is None else Progress(report.fraction, report.message, report.data)
    beat = await _server(request.app).heartbeat(body.lease, progress)  # LeaseConflict: 409 lease-conflict
    return HeartbeatAnswer(
        lease_expires=_when(beat.lease_expires),
        cancel_requested=beat.cancel_requested,
        heartbeat_every_s=_beat_every(app),
    )


@router.post(
    "/leases/complete",
    response_model=Finished,
    responses=problems(400, 409, 422),
    summary="End a lease's run with its result",
    operation_id="complete_lease",
)
async def complete_lease(request: Request, body: Annotated[Completion, Body()]) -> Any:
    """The fenced finish (only the lease's own claim can land it), then the message's delete."""
    ended = await _server(request.app).complete(body.lease, body.result)
    return Finished(job_id=ended.job.id, status=ended.status.value, attempt=ended.job.attempt)


@router.post(
    "/leases/fail",
    response_model=Finished,
    responses=problems(400, 409, 422),
    summary="End a lease's run with an error: retried, dead or cancelled by the type's policy",
    operation_id="fail_lease",
)
async def fail_lease(request: Request, body: Annotated[Failure, Body()]) -> Any:
    """Retried with the type's backoff (or ``retry_after_s``) until its attempts run out; ``retryable: false`` is dead at once."""
    reported = body.error
    error: RemoteError
    if not body.retryable:
        error = PermanentRemoteError(reported.message, error_class=reported.type, stack=reported.stack)
    elif body.retry_after_s is not None:
        error = RetryRemoteError(
            reported.message, delay_s=body.retry_after_s, error_class=reported.type, stack=reported.stack
        )
    else:
        error = RemoteError(reported.message, error_class=reported.type, stack=reported.stack)
    ended = await _server(request.app).fail(body.lease, error, cancelled=body.cancelled)
    return Finished(job_id=ended.job.id, status=ended.status.value, attempt=ended.job.attempt)
