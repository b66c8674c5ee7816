"""``GET /series``: the numbers behind the dashboard's charts (``sqsjobs.ops.series``), as JSON.

Where the numbers come from is ``Settings.charts_source`` (``series_source``): on AWS CloudWatch,
the EMF metrics the workers emit, read with GetMetricData (``sqsjobs.ops.cloudwatch_series``: priced
per metric requested, 10 per job type and 2 per SQS queue, whatever the table size); on the
emulators, which ingest no EMF, the job records: one Scan capped at ``max_entries`` items
(``sqsjobs.ops.series``: at most 1,250 read units per call at the default 10,000 items of 1 KB).
The answer's ``source`` says which, ``read`` and ``metrics`` what it cost. The dashboard's charts
page reads through ``series_flow`` too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from fastapi import APIRouter, Query

from sqsjobs.api import responses
from sqsjobs.api.deps import AppDep, problems
from sqsjobs.errors import AwsError
from sqsjobs.ops import series as series_ops
from sqsjobs.ops._common import app_queues
from sqsjobs.ops.cloudwatch_series import cloudwatch_series_flow
from sqsjobs.transport import routes

if TYPE_CHECKING:
    from sqsjobs._aws import Flow
    from sqsjobs.app import App

router = APIRouter(tags=["charts"])


def series_flow(
    app: App, *, window: str, job_type: str | None, max_entries: int = series_ops.DEFAULT_MAX_ENTRIES
) -> Flow[series_ops.Series]:
    """The charts' series of ``window`` (one type, or all the App registers) from the App's source.

    With ``charts_source=auto``, a role that may not call ``cloudwatch:GetMetricData`` (infra's API
    function is not granted it: the action takes no resource but ``*``) reads the records instead,
    and the answer's ``source`` says so; with ``cloudwatch`` it is an error, as asked.
    """
    now = app.clock.now()
    if series_ops.series_source(app.settings) == "cloudwatch":
        types = [job_type] if job_type else sorted(spec.name for spec in app.registry)
        queues = [app.registry.get(job_type).queue] if job_type else app_queues(app.registry)
        names = [
            routes.queue_name(app.settings, k) for q in queues for k in routes.routes_of(app.settings, q)
        ]
        try:
            return (
                yield from cloudwatch_series_flow(
                    now,
                    window=window,
                    job_types=types,
                    queues=names,
                    namespace=app.telemetry.metrics.namespace,
                    service=app.telemetry.metrics.service,
                )
            )
        except AwsError as exc:
            if app.settings.charts_source == "cloudwatch" or exc.code not in series_ops.ACCESS_DENIED:
                raise
    return (
        yield from series_ops.records_series_flow(
            app.settings, now, window=window, job_type=job_type, max_entries=max_entries
        )
    )


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
        int, Query(ge=1, le=100_000, description="Records read at most (the records' source)")
    ] = series_ops.DEFAULT_MAX_ENTRIES,
) -> Any:
    """Per bucket: started, succeeded, failed, dead, waiting, oldest waiting; per type: p50/p95 wait and run."""
    if type is not None:
        app.registry.get(type)  # HandlerNotFound (422)
    found = await app.arun(series_flow(app, window=window, job_type=type, max_entries=max_entries))
    return found.to_dict()
