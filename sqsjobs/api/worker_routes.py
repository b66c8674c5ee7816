"""``GET /workers`` and ``POST /workers/{id}/drain``: the worker registry (``sqsjobs.ops.worker_views``), as ``sqsjobs workers --json`` shows it.

One Query of the registry's partition of the sparse index and one BatchGetItem per 100 workers: no
job record is read.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from sqsjobs.api import responses
from sqsjobs.api.audit import actor_of, audit
from sqsjobs.api.deps import AppDep, problems
from sqsjobs.api.models import WorkerId  # noqa: TC001 (FastAPI reads the annotations at runtime)
from sqsjobs.api.problems import problem
from sqsjobs.ops._common import iso
from sqsjobs.ops.worker_views import count_workers, drain_flow, list_workers_flow

router = APIRouter(tags=["workers"])


@router.get(
    "/workers",
    response_model=responses.WorkerList,
    response_model_exclude_unset=True,
    summary="Live, draining and silent workers, with what each runs now",
)
async def workers(app: AppDep) -> Any:
    """Every registered ECS worker with its status (live, draining, silent) and the jobs it ran at its last refresh."""
    now = app.clock.now()
    found = await app.arun(list_workers_flow(app.settings, now))
    return {"at": iso(now), "counts": count_workers(found), "workers": [w.to_dict() for w in found]}


@router.post(
    "/workers/{worker_id}/drain",
    response_model=responses.DrainAccepted,
    response_model_exclude_unset=True,
    status_code=202,
    responses=problems(404, 409, 422),
    summary="Drain one worker: it stops receiving and finishes what it holds",
    operation_id="drain_worker",
)
async def drain(
    worker_id: WorkerId,
    app: AppDep,
    request: Request,
) -> Any:
    """The worker reads the request at its next registry refresh, then drains as on SIGTERM; ``GET /workers`` shows it draining, then gone."""
    outcome = await app.arun(drain_flow(app.settings, worker_id, app.clock.now(), by=actor_of(request)))
    if outcome == "not_registered":
        return problem(
            "worker-not-found",
            f"no live worker {worker_id!r} in the registry",
            field="worker_id",
            instance=request.url.path,
        )
    if outcome == "draining":
        return problem(
            "invalid-state",
            f"worker {worker_id!r} is draining already",
            field="worker_id",
            instance=request.url.path,
        )
    audit(app, request, "drain_worker", worker=worker_id)
    return {"worker": worker_id, "drain": "requested", "within_s": app.settings.registry_interval_s}
