"""Schedules over HTTP: make, change, pause, resume, delete and list schedules at runtime.

The same verbs as ``app.schedules`` and ``sqsjobs schedules create|...`` (``sqsjobs.schedules.runtime``:
what each costs), under the API's guard like every other route (a ``viewer`` token may only read;
a browser's change must come from the API's own origin). Every change is audited. A runtime schedule
lives in the app's runtime Scheduler group, which ``sqsjobs schedules apply`` never touches:

- a schedule AWS or sqsjobs would refuse (expression, time zone, tenant, overlap, catch-up window,
  job type, payload) is 422 ``invalid-schedule``;
- a name the tenant already has is 409 ``schedule-exists``; an unknown one 404 ``schedule-not-found``.

``GET /schedules`` lists the runtime schedules (one tenant's with ``?tenant=``) and the declared ones,
each with its last fire, the job it made and that job's status, and its next fire times.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from sqsjobs.api.audit import audit
from sqsjobs.api.deps import AppDep, problems
from sqsjobs.api.problems import problem
from sqsjobs.errors import ConfigurationError
from sqsjobs.schedules.spec import DEFAULT_CATCHUP_S, MIN_CATCHUP_S

router = APIRouter(tags=["schedules"])

ScheduleName = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[0-9a-zA-Z_.-]+$")]
TenantQuery = Annotated[
    str | None,
    Query(min_length=1, max_length=48, pattern=r"^[0-9a-zA-Z_-]+$", description="The schedule's tenant"),
]
Overlap = Literal["allow_all", "skip", "buffer_one", "cancel_previous"]


class ScheduleCreate(BaseModel):
    """``POST /schedules``: give exactly one of ``cron``, ``rate`` and ``at``."""

    model_config = ConfigDict(extra="forbid")

    name: ScheduleName
    tenant: str | None = Field(None, min_length=1, max_length=48, pattern=r"^[0-9a-zA-Z_-]+$")
    job: str = Field(min_length=1, max_length=128, description="The registered job type each fire enqueues")
    cron: str | None = Field(None, max_length=256, examples=["cron(0 2 * * ? *)"])
    rate: str | None = Field(None, max_length=256, examples=["rate(10 minutes)"])
    at: str | None = Field(None, max_length=256, examples=["2030-12-01T09:00:00"])
    timezone: str = Field("UTC", max_length=64)
    payload: Any = None
    overlap: Overlap = "allow_all"
    catchup_window_s: float | None = Field(
        DEFAULT_CATCHUP_S,
        ge=MIN_CATCHUP_S,
        le=366 * 86_400,
        description="Fires older than this when handled, or missed while paused, are not made (null: no window)",
    )
    paused: bool = False


class ScheduleUpdate(BaseModel):
    """``PATCH /schedules/{name}``: only what changes (one of ``cron``, ``rate``, ``at`` at most)."""

    model_config = ConfigDict(extra="forbid")

    job: str | None = Field(None, min_length=1, max_length=128)
    cron: str | None = Field(None, max_length=256)
    rate: str | None = Field(None, max_length=256)
    at: str | None = Field(None, max_length=256)
    timezone: str | None = Field(None, max_length=64)
    payload: Any = None
    overlap: Overlap | None = None
    catchup_window_s: float | None = Field(None, ge=MIN_CATCHUP_S, le=366 * 86_400)


class ScheduleBody(BaseModel):
    """One schedule: its definition, its state, its last fire and the job it made, its next fires."""

    name: str
    tenant: str | None
    kind: Literal["runtime", "declared"]
    expression: str
    timezone: str
    job: str
    overlap: str
    catchup_s: float | None = Field(description="The catch-up window in seconds (null: none)")
    state: Literal["active", "paused"]
    payload: Any = None
    created_at: str | None = None
    paused_at: str | None = None
    last_slot: str | None = Field(None, description="The latest occurrence that made a job (UTC)")
    last_fired_at: str | None = None
    last_job: str | None = None
    last_outcome: str | None = Field(None, description="That job's status now")
    fires: int = 0
    skipped: int = Field(0, description="Occurrences the overlap policy (or a pause) did not make")
    missed: int = Field(0, description="Occurrences older than the catch-up window")
    next_fires: list[str] = []


class ScheduleList(BaseModel):
    """Runtime schedules (one tenant's, if asked), then the declared ones."""

    runtime: list[ScheduleBody]
    declared: list[ScheduleBody]


class ScheduleDeleted(BaseModel):
    """``DELETE /schedules/{name}``."""

    name: str
    tenant: str | None
    deleted: bool


def _invalid(exc: ConfigurationError, request: Request) -> Any:
    return problem("invalid-schedule", str(exc), field="name", instance=request.url.path)


@router.post(
    "/schedules",
    status_code=201,
    response_model=ScheduleBody,
    responses=problems(409, 422),
    summary="Make a schedule at runtime",
    operation_id="create_schedule",
)
async def create_schedule(body: ScheduleCreate, app: AppDep, request: Request) -> Any:
    """In the app's runtime Scheduler group (``schedules apply`` never touches it); fires begin at once."""
    try:
        made = await app.schedules.acreate(
            body.name,
            job=body.job,
            cron=body.cron,
            rate=body.rate,
            at=body.at,
            timezone=body.timezone,
            payload=body.payload,
            tenant=body.tenant,
            overlap=body.overlap,
            catchup_window=body.catchup_window_s,
            paused=body.paused,
        )
    except ConfigurationError as exc:
        return _invalid(exc, request)
    audit(app, request, "schedule_create", schedule=body.name, tenant=body.tenant)
    return made.to_dict()


@router.get(
    "/schedules",
    response_model=ScheduleList,
    responses=problems(422),
    summary="Runtime and declared schedules with their last fire",
    operation_id="list_schedules",
)
async def list_schedules(
    app: AppDep,
    tenant: TenantQuery = None,
    count: Annotated[int, Query(ge=0, le=20, description="Next fire times per schedule")] = 3,
) -> Any:
    """A tenant's runtime schedules (every tenant's without ``tenant``), and the declared ones without it."""
    made = await app.schedules.alist(tenant=tenant, count=count)
    declared = [] if tenant is not None else await app.schedules.adeclared(count=count)
    return {"runtime": [v.to_dict() for v in made], "declared": [v.to_dict() for v in declared]}


@router.get(
    "/schedules/{name}",
    response_model=ScheduleBody,
    responses=problems(404, 422),
    summary="One runtime schedule",
    operation_id="get_schedule",
)
async def get_schedule(name: ScheduleName, app: AppDep, tenant: TenantQuery = None) -> Any:
    """Its definition, state, last fire (the job it made and its status) and next fire times."""
    return (await app.schedules.adescribe(name, tenant=tenant)).to_dict()


@router.patch(
    "/schedules/{name}",
    response_model=ScheduleBody,
    responses=problems(404, 422),
    summary="Change a runtime schedule",
    operation_id="update_schedule",
)
async def update_schedule(
    name: ScheduleName, body: ScheduleUpdate, app: AppDep, request: Request, tenant: TenantQuery = None
) -> Any:
    """What is not given stays; so do its state and history."""
    changes = body.model_dump(exclude_unset=True)
    if "catchup_window_s" in changes:
        changes["catchup_window"] = changes.pop("catchup_window_s")
    try:
        changed = await app.schedules.aupdate(name, tenant=tenant, **changes)
    except ConfigurationError as exc:
        return _invalid(exc, request)
    audit(app, request, "schedule_update", schedule=name, tenant=tenant, fields=sorted(changes))
    return changed.to_dict()


@router.post(
    "/schedules/{name}/pause",
    response_model=ScheduleBody,
    responses=problems(404, 422),
    summary="Pause a runtime schedule",
    operation_id="pause_schedule",
)
async def pause_schedule(
    name: ScheduleName, app: AppDep, request: Request, tenant: TenantQuery = None
) -> Any:
    """It stops firing; a resume makes what it missed within its catch-up window."""
    paused = await app.schedules.apause(name, tenant=tenant)
    audit(app, request, "schedule_pause", schedule=name, tenant=tenant)
    return paused.to_dict()


@router.post(
    "/schedules/{name}/resume",
    response_model=ScheduleBody,
    responses=problems(404, 422),
    summary="Resume a runtime schedule",
    operation_id="resume_schedule",
)
async def resume_schedule(
    name: ScheduleName, app: AppDep, request: Request, tenant: TenantQuery = None
) -> Any:
    """It fires again; each fire it missed within its catch-up window is made now (through its overlap policy)."""
    resumed = await app.schedules.aresume(name, tenant=tenant)
    audit(app, request, "schedule_resume", schedule=name, tenant=tenant)
    return resumed.to_dict()


@router.delete(
    "/schedules/{name}",
    response_model=ScheduleDeleted,
    responses=problems(422),
    summary="Delete a runtime schedule",
    operation_id="delete_schedule",
)
async def delete_schedule(
    name: ScheduleName, app: AppDep, request: Request, tenant: TenantQuery = None
) -> Any:
    """``deleted`` is False when there was none (nothing changed)."""
    deleted = await app.schedules.adelete(name, tenant=tenant)
    if deleted:
        audit(app, request, "schedule_delete", schedule=name, tenant=tenant)
    return {"name": name, "tenant": tenant, "deleted": deleted}
