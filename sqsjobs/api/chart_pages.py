"""The dashboard's ``/ui/charts`` page: the series of ``sqsjobs.ops.series`` drawn by ``sqsjobs.api.charts``.

Started, succeeded, failed and dead jobs per minute over the last hour (per 15 minutes over the
last day), for every type or one; jobs waiting and the oldest waiting job's age over the same
window; p50 and p95 queue wait and run time per type. The numbers come from
``sqsjobs.api.series_routes.series_flow``, as ``GET /series``'s: on the emulators one refresh is one
capped Scan of the records (the same bound as the overview's: ``max_entries``, 1,250 read units at
10,000 items); on AWS one GetMetricData of the workers' EMF metrics (``sqsjobs.ops.cloudwatch_series``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import APIRouter
from fastapi.responses import HTMLResponse

from sqsjobs.api import charts, dashboard_views
from sqsjobs.api.dashboard_views import Html, h, join
from sqsjobs.api.series_routes import series_flow
from sqsjobs.ops import series as series_ops

if TYPE_CHECKING:
    from collections.abc import Mapping

    from sqsjobs.app import App


def _seconds(value: float | int | None) -> str:
    return "-" if value is None else f"{value:.2f} s" if value < 120 else f"{value / 60:.1f} min"


def _picker(types: list[str], window: str, job_type: str | None) -> Html:
    windows = join(
        Html(f'<option value="{h(w)}"{" selected" if w == window else ""}>{h(w)}</option>')
        for w in series_ops.WINDOWS
    )
    options = Html('<option value="">all types</option>') + join(
        Html(f'<option value="{h(t)}"{" selected" if t == job_type else ""}>{h(t)}</option>') for t in types
    )
    return Html(
        '<form method="get" action="/ui/charts" class="replay">'
        f'<label>window <select name="window">{windows}</select></label>'
        f'<label>type <select name="type">{options}</select></label>'
        '<button type="submit" id="show-charts">show</button></form>'
    )


def charts_body(found: series_ops.Series, types: list[str], window: str, job_type: str | None) -> Html:
    """The picker, the three charts and the latency table."""
    per = "minute" if found.bucket_s == 60 else f"{found.bucket_s / 60:.0f} minutes"
    counts = charts.bars(
        f"jobs per {per}", found.counts, start=found.start, bucket_s=found.bucket_s, ident="chart-counts"
    )
    waiting = charts.line(
        "jobs waiting",
        "waiting",
        [float(v) for v in found.waiting],
        start=found.start,
        bucket_s=found.bucket_s,
        ident="chart-waiting",
        unit="jobs",
    )
    oldest = charts.line(
        "oldest waiting job",
        "oldest waiting (s)",
        found.oldest_waiting_s,
        start=found.start,
        bucket_s=found.bucket_s,
        ident="chart-oldest",
        unit="seconds",
    )
    rows = [
        [
            t,
            _seconds(v["wait"]["p50"]),
            _seconds(v["wait"]["p95"]),
            v["wait"]["n"],
            _seconds(v["run"]["p50"]),
            _seconds(v["run"]["p95"]),
            v["run"]["n"],
        ]
        for t, v in found.latency.items()
    ]
    latency = (
        dashboard_views.table(
            ["type", "wait p50", "wait p95", "started", "run p50", "run p95", "attempts"],
            rows,
            cls="counts latency",
        )
        if rows
        else Html('<p class="muted">Nothing started in this window.</p>')
    )
    capped = f" Capped: only {found.read} records read, a sample of the table." if found.truncated else ""
    scope = job_type or "all types"
    return dashboard_views.section(
        f"Charts: {scope}, last {window}",
        Html(
            _picker(types, window, job_type)
            + counts
            + waiting
            + oldest
            + Html("<h2>Wait and run time</h2>")
            + latency
        ),
        note=(
            f"From CloudWatch (GetMetricData, {found.metrics} metrics): the workers' EMF counts and timings "
            "per type, SQS's visible messages and oldest message age per queue."
            if found.source == "cloudwatch"
            else f"From the job records (one Scan, {found.read} read): attempts' starts and outcomes from their "
            f"history, waiting jobs from creation and first start. Wait includes a requested delay.{capped}"
        ),
        anchor="charts",
    )


def chart_router(app: App, *, refresh_s: float, max_entries: int, headers: Mapping[str, str]) -> APIRouter:
    """``/ui/charts?window=1h|1d&type=T``."""
    router = APIRouter(include_in_schema=False)
    secure = dict(headers)

    @router.get("/ui/charts", response_class=HTMLResponse)
    async def charts_page(window: str = "1h", type: str = "") -> HTMLResponse:
        types = sorted(spec.name for spec in app.registry)
        if window not in series_ops.WINDOWS or (type and type not in types):
            body = dashboard_views.section(
                "Bad filter",
                Html(
                    f"<p>window is one of {h(', '.join(series_ops.WINDOWS))}; type is a registered job type.</p>"
                ),
            )
            return HTMLResponse(dashboard_views.page("charts", body), status_code=400, headers=secure)
        found = await app.arun(
            series_flow(app, window=window, job_type=type or None, max_entries=max_entries)
        )
        page = dashboard_views.page(
            "charts", charts_body(found, types, window, type or None), refresh_s=refresh_s
        )
        return HTMLResponse(page, headers=secure)

    return router
