"""``POST /jobs/priority``: move waiting jobs to another priority level, in two steps.

The dry run (the default) finds the jobs, by ids or by type (and tenant) with a Scan, and judges
each (``sqsjobs.ops.reprioritize``): nothing changes; it answers the ids that would move. The
confirmation (``dry_run: false``) takes those ids and moves exactly them: the record first (one
conditional write each, with an audit entry), then each job's message from its old level's queue
to the new one's. Refusals, and nothing changes:

- an id that is not waiting (running, finished, missing) is 409 ``invalid-transition`` (404
  ``job-not-found`` for a missing one), naming every such id: the operator decides again;
- a confirmation without ids is 422 ``invalid-request`` ("run the dry run first");
- an unknown type is 422 ``unknown-job-type``.

A job that starts between the check and its write is reported under ``skipped``. The change is
audited twice: in each record (``audit``: ``action: priority``) and as one log line
(``sqsjobs.api.audit``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field, StrictBool

from sqsjobs.api.audit import actor_of, audit
from sqsjobs.api.deps import AppDep, problems
from sqsjobs.api.models import MAX_ID_LENGTH
from sqsjobs.api.problems import problem
from sqsjobs.ops import reprioritize

if TYPE_CHECKING:
    from fastapi.responses import JSONResponse

router = APIRouter(tags=["jobs"])

Level = Literal["high", "normal", "low"]
JobId = Annotated[str, Field(min_length=1, max_length=MAX_ID_LENGTH)]


class PriorityRequest(BaseModel):
    """``POST /jobs/priority``: the new level, and which jobs (ids, or a type and tenant)."""

    model_config = ConfigDict(extra="forbid")

    to: Level = Field(description="The level to move the jobs to")
    type: str | None = Field(
        None, min_length=1, max_length=MAX_ID_LENGTH, description="The waiting jobs of this type"
    )
    tenant: str | None = Field(
        None, min_length=1, max_length=256, description="With type: only this tenant's"
    )
    job_ids: list[JobId] = Field(
        default_factory=list,
        max_length=reprioritize.MAX_IDS,
        description="These jobs; the confirmation takes the ids the dry run listed",
    )
    dry_run: StrictBool = Field(True, description="List what would move; change nothing")


class PriorityCandidate(BaseModel):
    """One job as the dry run judged it."""

    id: str
    status: str
    level: str
    reason: str = Field(description="Why it would not move ('' when it would)")


class PriorityDryRun(BaseModel):
    """What a confirmation with ``job_ids`` would move."""

    dry_run: Literal[True] = True
    to: Level
    job_ids: list[str] = Field(description="The ids that would move: confirm with exactly these")
    candidates: list[PriorityCandidate]
    read: int = Field(description="Items the Scan read (0 for a dry run by ids)")


class PriorityMoved(BaseModel):
    """What the confirmation moved."""

    dry_run: Literal[False] = False
    to: Level
    moved: list[str] = Field(description="Records now on the new level")
    messages_moved: list[str] = Field(description="Of those, the jobs whose waiting message moved too")
    left: list[str] = Field(
        description="Moved records whose message was not visible (a retry not yet due, a delayed or held "
        "message): their next start comes from the old level"
    )
    skipped: dict[str, str] = Field(description="Ids not moved, with why")


def _refusal(found: list[reprioritize.Candidate], path: str) -> JSONResponse | None:
    """409 (404 for missing ids) naming every id that is not waiting; None when all are."""
    missing = [c.job_id for c in found if c.status == "missing"]
    if missing:
        return problem("job-not-found", f"no such job: {', '.join(missing)}", field="job_ids", instance=path)
    busy = [f"{c.job_id} is {c.status}" for c in found if not c.waiting]
    if busy:
        detail = f"only queued or retry_scheduled jobs change level: {'; '.join(busy)}"
        return problem("invalid-transition", detail, field="job_ids", instance=path)
    return None


@router.post(
    "/jobs/priority",
    response_model=PriorityDryRun | PriorityMoved,
    responses=problems(400, 404, 409, 422),
    summary="Move waiting jobs to another priority level (dry run, then the exact ids)",
    operation_id="change_job_priority",
)
async def change_priority(body: PriorityRequest, app: AppDep, request: Request) -> Any:
    """Dry run: the jobs that would move. Confirmation (``dry_run: false``): moves exactly ``job_ids``."""
    path = request.url.path
    if body.type is not None:
        app.registry.get(body.type)  # HandlerNotFound (422): an unknown type matches nothing, say so
    if body.dry_run:
        if body.job_ids:
            found, read = await app.arun(reprioritize.candidates_flow(app.settings, body.job_ids, body.to)), 0
            if refused := _refusal(found, path):
                return refused
        elif body.type is not None:
            found, read = await app.arun(
                reprioritize.find_flow(app.settings, body.type, body.to, tenant=body.tenant)
            )
        else:
            return problem(
                "invalid-request", "name the jobs: job_ids, or a type", field="type", instance=path
            )
        return PriorityDryRun(
            to=body.to,
            job_ids=[c.job_id for c in found if not c.reason],
            candidates=[PriorityCandidate(**c.to_dict()) for c in found],
            read=read,
        )
    if not body.job_ids:
        detail = "run the dry run first: the confirmation moves the ids it listed"
        return problem("invalid-request", detail, field="job_ids", instance=path)
    if refused := _refusal(
        await app.arun(reprioritize.candidates_flow(app.settings, body.job_ids, body.to)), path
    ):
        return refused
    report = await app.arun(
        reprioritize.move_flow(
            app.settings, app.queue_urls, body.job_ids, body.to, app.clock, by=actor_of(request)
        )
    )
    audit(app, request, "change_priority", to=body.to, moved=report.moved, skipped=len(report.skipped))
    return PriorityMoved(**report.to_dict())
