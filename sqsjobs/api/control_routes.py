"""Flow control over HTTP: pause and resume a job type, read every limit, close a breaker by hand.

The same flows as ``sqsjobs pause|resume|limits`` (``sqsjobs.limits.namespace``), so the CLI and the API
agree on every field. What each costs: a pause or resume is one write (1 write unit); ``GET /limits``
one BatchGetItem per 100 control items (half a read unit each) and never a Scan (the CLI's ``waiting``
column needs one; ask ``GET /queues`` for per-type counts); a breaker close one consistent GetItem and
one conditional write. Every change is audited (``sqsjobs.api.audit``); a refusal changes nothing:

- an unknown type is 422 ``unknown-job-type``, a type whose workers never read a pause 422
  ``not-pausable`` (declare it ``pausable=True`` or put it under a limit);
- an unknown limit, or one without a breaker, is 404 ``limit-not-found``;
- closing a closed breaker is 409 ``invalid-state``, and so is one a worker moved between the read
  and the write (read ``GET /limits`` again and decide again).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from sqsjobs.api import responses
from sqsjobs.api.audit import audit
from sqsjobs.api.deps import AppDep, problems
from sqsjobs.api.models import LimitName, TypeName  # noqa: TC001 (FastAPI reads the annotations at runtime)
from sqsjobs.api.problems import problem
from sqsjobs.errors import ConfigurationError, InvalidTransition, RecordChanged
from sqsjobs.limits import namespace as limits_namespace

router = APIRouter(tags=["flow control"])


class PauseRequest(BaseModel):
    """``POST /types/{job_type}/pause``: why (optional, shown by ``GET /limits`` and ``sqsjobs limits``)."""

    model_config = ConfigDict(extra="forbid")

    reason: str | None = Field(None, min_length=1, max_length=500, description="Why it is paused")


class PauseResponse(BaseModel):
    """The type's pause state after the request."""

    type: str
    paused: bool
    #: ``resume`` only: False when the type was not paused (nothing changed).
    was_paused: bool | None = None


@router.post(
    "/types/{job_type}/pause",
    response_model=PauseResponse,
    responses=problems(400, 422),
    summary="Pause a job type fleet-wide",
    operation_id="pause_type",
)
async def pause_type(
    job_type: TypeName, app: AppDep, request: Request, body: PauseRequest | None = None
) -> Any:
    """Workers stop starting the type within seconds; its jobs wait, attempts untouched. Pausing again replaces the reason."""
    reason = body.reason if body else None
    try:
        await app.limits.apause(job_type, reason=reason)
    except ConfigurationError as exc:
        return problem("not-pausable", str(exc), field="job_type", instance=request.url.path)
    audit(app, request, "pause", job_type=job_type, reason=reason)
    return PauseResponse(type=job_type, paused=True)


@router.post(
    "/types/{job_type}/resume",
    response_model=PauseResponse,
    responses=problems(422),
    summary="Resume a paused job type",
    operation_id="resume_type",
)
async def resume_type(job_type: TypeName, app: AppDep, request: Request) -> Any:
    """Workers start the type again as its messages come back; ``was_paused`` says whether it was paused."""
    try:
        was = await app.limits.aresume(job_type)
    except ConfigurationError as exc:
        return problem("not-pausable", str(exc), field="job_type", instance=request.url.path)
    if was:
        audit(app, request, "resume", job_type=job_type)
    return PauseResponse(type=job_type, paused=False, was_paused=was)


@router.get(
    "/limits",
    response_model=responses.FlowStateBody,
    response_model_exclude_unset=True,
    responses=problems(422),
    summary="Paused types and every limit",
    operation_id="list_limits",
)
async def limits(
    app: AppDep,
    key: Annotated[
        list[str], Query(max_length=20, description="Show partitioned limits for these key values")
    ] = [],  # noqa: B006 (FastAPI copies the default per request)
) -> Any:
    """Per limit: slots held, starts in the rate window, breaker state (with ``until`` when open); and the paused types."""
    state = await app.arun(
        limits_namespace.state_flow(
            app.settings.table_name, app.registry, app.limits, now=app.clock.now(), keys=key
        )
    )
    return state.to_dict()


@router.post(
    "/limits/{name}/breaker/close",
    response_model=responses.BreakerClosed,
    response_model_exclude_unset=True,
    responses=problems(404, 409, 422),
    summary="Close a limit's breaker by hand",
    operation_id="close_breaker",
)
async def close_breaker(name: LimitName, app: AppDep, request: Request) -> Any:
    """The dependency is back: its jobs start at once instead of after the cooldown and a probe."""
    try:
        was = await app.arun(limits_namespace.close_breaker_flow(app.settings.table_name, app.limits, name))
    except ConfigurationError as exc:
        return problem("limit-not-found", str(exc), field="name", instance=request.url.path)
    except (InvalidTransition, RecordChanged) as exc:
        return problem("invalid-state", str(exc), field="name", instance=request.url.path)
    audit(app, request, "close_breaker", limit=name, was=was)
    return {"limit": name, "breaker": "closed", "was": was}
