"""``POST /jobs/bulk-cancel``: cancel the waiting jobs of a type (and tenant) in two steps.

The dry run (the default) is ``sqsjobs jobs cancel --type T --dry-run``'s flow
(``sqsjobs.ops.bulk_cancel.bulk_cancel_flow``): a Scan of the whole table with the filters, which
reads (and is billed for) every item, 125,000 read units per million 1 KB records, and writes
nothing; it answers how many match and the first ``CONFIRM_LIMIT`` ids. The confirmation
(``dry_run: false``) takes those ids and cancels exactly them (``bulk_cancel.cancel_ids_flow``):
one conditional write each, re-checking type, status and tenant, with the bulk operation's audit
entry; a job that started, finished or changed since is skipped and said so, and one that began to
match after the dry run is not swept in. For a table too large to scan inside one request, run
``sqsjobs jobs cancel`` (resumable) instead.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field, StrictBool

from sqsjobs.api import responses
from sqsjobs.api.audit import actor_of, audit
from sqsjobs.api.deps import AppDep, problems
from sqsjobs.api.models import MAX_ID_LENGTH
from sqsjobs.api.problems import problem
from sqsjobs.job import JobStatus
from sqsjobs.ops import bulk_cancel as bulk_cancel_ops

router = APIRouter(tags=["jobs"])

#: Ids one confirmation cancels at most (and a dry run lists): a request should finish.
CONFIRM_LIMIT = 200


class BulkCancelRequest(BaseModel):
    """``POST /jobs/bulk-cancel``."""

    model_config = ConfigDict(extra="forbid")

    type: str = Field(min_length=1, max_length=MAX_ID_LENGTH, description="The job type")
    status: Literal["queued", "retry_scheduled"] = Field("queued", description="The waiting state to cancel")
    tenant: str | None = Field(None, min_length=1, max_length=256, description="Only this tenant's jobs")
    dry_run: StrictBool = Field(True, description="Count and list the matching jobs; change nothing")
    job_ids: list[Annotated[str, Field(min_length=1, max_length=MAX_ID_LENGTH)]] = Field(
        default_factory=list,
        max_length=CONFIRM_LIMIT,
        description="The confirmation: the ids the dry run listed",
    )


@router.post(
    "/jobs/bulk-cancel",
    response_model=responses.BulkCancelBody,
    response_model_exclude_unset=True,
    responses=problems(400, 422),
    summary="Cancel waiting jobs by filter (dry run, then the exact ids)",
    operation_id="bulk_cancel_jobs",
)
async def bulk_cancel(body: BulkCancelRequest, app: AppDep, request: Request) -> Any:
    """Dry run: how many jobs match and their ids. Confirmation (``dry_run: false``): cancels exactly ``job_ids``."""
    app.registry.get(body.type)  # HandlerNotFound (422): an unknown type matches nothing, say so
    spec = bulk_cancel_ops.BulkCancel(body.type, JobStatus(body.status), body.tenant, dry_run=body.dry_run)
    if body.dry_run:
        report = await app.arun(bulk_cancel_ops.bulk_cancel_flow(app.settings, app.registry, spec, app.clock))
        out = report.to_dict()
        out["job_ids"] = out["job_ids"][:CONFIRM_LIMIT]
        return out
    if not body.job_ids:
        return problem(
            "invalid-request",
            "run the dry run first: the confirmation cancels the ids it listed",
            field="job_ids",
            instance=request.url.path,
        )
    cancelled, skipped = await app.arun(
        bulk_cancel_ops.cancel_ids_flow(
            app.settings, app.registry, spec, body.job_ids, app.clock, by=actor_of(request)
        )
    )
    audit(app, request, "bulk_cancel", job_type=body.type, cancelled=len(cancelled), skipped=len(skipped))
    return {"dry_run": False, "cancelled": cancelled, "skipped": skipped}
