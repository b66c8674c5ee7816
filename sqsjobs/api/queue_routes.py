"""``GET /queues``: depths, in flight, delayed, DLQ and the oldest waiting job per queue (``ops.stats``).

The counts are those of ``sqsjobs stats --json`` (one Scan of the table, at most
``ops.stats.DEFAULT_MAX_ENTRIES`` items: see that module for what a pass costs). Each queue also
gets ``oldest_due_s``, the age of the oldest job due and not yet running among the job types the
App routes to it. ``counts=false`` skips the Scan: SQS's depths only, a few requests per queue.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from sqsjobs.api import responses
from sqsjobs.api.deps import AppDep, problems
from sqsjobs.api.problems import problem
from sqsjobs.ops import stats as stats_ops
from sqsjobs.ops._common import app_queues, iso, parse_duration

router = APIRouter(tags=["queues"])


@router.get(
    "/queues",
    response_model=responses.QueueSnapshot,
    response_model_exclude_unset=True,
    responses=problems(422),
    summary="Queue depths and job counts",
)
async def queues(
    app: AppDep,
    window: Annotated[
        str, Query(max_length=32, description="Count finished jobs over this window (30m, 1h, 7d)")
    ] = "1h",
    counts: Annotated[
        bool, Query(description="Scan the table for per-type counts and oldest_due_s (false: depths only)")
    ] = True,
) -> Any:
    """Per queue: visible, in flight, delayed, DLQ depth and ``oldest_due_s``; per job type: counts by status."""
    try:
        window_s = parse_duration(window)
    except ValueError as exc:
        return problem("invalid-request", str(exc), field="window", instance="/queues")
    now = app.clock.now()
    if not counts:
        found = [
            await app.arun(stats_ops.queue_stats_flow(app.settings, q)) for q in app_queues(app.registry)
        ]
        return {
            "at": iso(now),
            "window_s": None,
            "truncated": False,
            "queues": [q.to_dict() | {"oldest_due_s": None} for q in found],
            "types": None,
        }
    snap: stats_ops.Stats = await app.arun(
        stats_ops.stats_flow(app.settings, app.registry, now, window_s=window_s)
    )
    queue_of = {spec.name: spec.queue for spec in app.registry}
    oldest: dict[str, float] = {}
    for t in snap.types:
        queue = queue_of.get(t.type)
        if queue is not None and t.oldest_due_s is not None:
            oldest[queue] = max(oldest.get(queue, 0.0), t.oldest_due_s)
    out = snap.to_dict()
    out["queues"] = [q.to_dict() | {"oldest_due_s": oldest.get(q.queue)} for q in snap.queues]
    return out
