"""``GET /workers``: the worker registry (``sqsjobs.ops.worker_views``), as ``sqsjobs workers --json`` shows it.

One Query of the registry's partition of the sparse index and one BatchGetItem per 100 workers: no
job record is read.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from sqsjobs.api.deps import AppDep  # noqa: TC001 (FastAPI reads the annotation at runtime)
from sqsjobs.ops._common import iso
from sqsjobs.ops.worker_views import count_workers, list_workers_flow

router = APIRouter(tags=["workers"])


@router.get("/workers", summary="Live, draining and silent workers, with what each runs now")
async def workers(app: AppDep) -> Any:
    """Every registered ECS worker with its status (live, draining, silent) and the jobs it ran at its last refresh."""
    now = app.clock.now()
    found = await app.arun(list_workers_flow(app.settings, now))
    return {"at": iso(now), "counts": count_workers(found), "workers": [w.to_dict() for w in found]}
