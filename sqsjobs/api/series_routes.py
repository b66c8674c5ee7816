"""``GET /series``: the numbers behind the dashboard's charts (``sqsjobs.ops.series``), as JSON.

From the job records: one Scan capped at ``max_entries`` items (its docstring has the cost; at most
1,250 read units per call at the default 10,000 items of 1 KB). CloudWatch (the workers' EMF
metrics, GetMetricData) is not read yet: the charts are the records' on AWS too.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query

from sqsjobs.api import responses
from sqsjobs.api.deps import AppDep, problems
from sqsjobs.ops import series as series_ops

router = APIRouter(tags=["charts"])


@router.get(
    "/series",
    response_model=responses.Series,
    response_model_exclude_unset=True,
    responses=problems(422),
    summary="Starts, outcomes, waiting jobs and latencies over time",
    operation_id="job_series",
)
async def series(
    app: AppDep,
    window: Annotated[Literal["1h", "1d"], Query(description="1h: per minute; 1d: per 15 minutes")] = "1h",
    type: Annotated[
        str | None, Query(min_length=1, max_length=256, description="One job type (default: all)")
    ] = None,
    max_entries: Annotated[
        int, Query(ge=1, le=100_000, description="Records read at most")
    ] = series_ops.DEFAULT_MAX_ENTRIES,
) -> Any:
    """Per bucket: started, succeeded, failed, dead, waiting, oldest waiting; per type: p50/p95 wait and run."""
    if type is not None:
        app.registry.get(type)  # HandlerNotFound (422)
    found = await app.arun(
        series_ops.records_series_flow(
            app.settings, app.clock.now(), window=window, job_type=type, max_entries=max_entries
        )
    )
    return found.to_dict()
