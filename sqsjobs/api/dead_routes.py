"""``/dead/groups``: dead jobs grouped by error signature, and retry-the-group in two steps.

The groups are ``sqsjobs.ops.dead_groups.groups_flow`` (the attention index's dead shards and one
BatchGetItem of errors per 100 jobs; its docstring has the cost); the signature is
``sqsjobs.ops.signatures.signature``. A group retry is a dry run first, which lists the group's
job ids and changes nothing, then a confirmation with **those ids**: each is re-read and retried
with ``App.retry`` only if it is still dead with the same signature (audit entry per job, as
``sqsjobs jobs retry``); the others are listed under ``skipped`` with why. A confirmation without
ids is 422: run the dry run first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, ConfigDict, Field, StrictBool

from sqsjobs.api import responses
from sqsjobs.api.audit import audit
from sqsjobs.api.deps import AppDep, problems
from sqsjobs.api.models import MAX_ID_LENGTH
from sqsjobs.api.problems import problem
from sqsjobs.errors import JobNotFound, JobStateError, PayloadError
from sqsjobs.ops import dead_groups

if TYPE_CHECKING:
    from sqsjobs.app import App

router = APIRouter(tags=["dead jobs"])


class GroupRetryRequest(BaseModel):
    """``POST /dead/groups/retry``."""

    model_config = ConfigDict(extra="forbid")

    signature: str = Field(
        min_length=1, max_length=1024, description="The group, as GET /dead/groups names it"
    )
    dry_run: StrictBool = Field(True, description="List the group's job ids and change nothing")
    job_ids: list[Annotated[str, Field(min_length=1, max_length=MAX_ID_LENGTH)]] = Field(
        default_factory=list,
        max_length=dead_groups.RETRY_LIMIT,
        description="The confirmation: exactly the ids the dry run listed",
    )


async def retry_exact(app: App, sig: str, job_ids: list[str]) -> tuple[list[str], dict[str, str]]:
    """Retry each of ``job_ids`` still dead with signature ``sig`` (``App.retry``); the rest with why not.

    The confirmation step of a group retry, here and on the dashboard's ``/ui/dead`` page.
    """
    retried: list[str] = []
    skipped: dict[str, str] = {}
    for job_id in dict.fromkeys(job_ids):
        try:
            why = dead_groups.refusal(await app.aget(job_id, load_result=False), sig)
            if why is None:
                await app.aretry(job_id)
                retried.append(job_id)
                continue
        except JobNotFound:
            why = "no such job"
        except (JobStateError, PayloadError) as exc:
            why = str(exc)
        skipped[job_id] = why
    return retried, skipped


@router.get(
    "/dead/groups",
    response_model=responses.DeadGroups,
    response_model_exclude_unset=True,
    responses=problems(422),
    summary="Dead jobs by error signature",
    operation_id="dead_groups",
)
async def groups(
    app: AppDep,
    max_jobs: Annotated[
        int, Query(ge=1, le=5000, description="Read at most this many dead jobs, newest first")
    ] = dead_groups.DEFAULT_MAX_JOBS,
) -> Any:
    """Per signature (class and normalised message): count, first and last seen, job types, an example, job ids."""
    found = await app.arun(dead_groups.groups_flow(app.settings, app.clock.now(), max_jobs=max_jobs))
    return {
        "jobs": found.jobs,
        "truncated": found.truncated,
        "groups": [g.to_dict() for g in found.groups],
    }


@router.post(
    "/dead/groups/retry",
    response_model=responses.GroupRetry,
    response_model_exclude_unset=True,
    responses=problems(400, 422),
    summary="Retry a group of dead jobs (dry run, then the exact ids)",
    operation_id="retry_dead_group",
)
async def retry_group(body: GroupRetryRequest, app: AppDep, request: Request) -> Any:
    """Dry run: the group's job ids. Confirmation (``dry_run: false``): retries exactly ``job_ids`` that are still in the group."""
    path = request.url.path
    if body.dry_run:
        found = await app.arun(dead_groups.groups_flow(app.settings, app.clock.now()))
        group = found.find(body.signature)
        ids = group.job_ids[: dead_groups.RETRY_LIMIT] if group else []
        return {"signature": body.signature, "dry_run": True, "job_ids": ids, "truncated": found.truncated}
    if not body.job_ids:
        return problem(
            "invalid-request",
            "run the dry run first: the confirmation retries the ids it listed",
            field="job_ids",
            instance=path,
        )
    retried, skipped = await retry_exact(app, body.signature, body.job_ids)
    audit(
        app, request, "retry_dead_group", signature=body.signature, retried=len(retried), skipped=len(skipped)
    )
    return {"signature": body.signature, "dry_run": False, "retried": retried, "skipped": skipped}
