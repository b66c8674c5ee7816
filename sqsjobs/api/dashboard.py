"""The web dashboard: server-rendered pages at ``/`` and ``/ui/...`` over the operator flows.

``dashboard_router(app)`` returns a FastAPI router; the HTTP API mounts it behind its auth
dependency, so the pages and their POST endpoints need the same token as the JSON routes. Nothing
here is a second implementation: every number comes from the flows the CLI uses
(``sqsjobs.ops.stats``, ``.inspect``, ``.dlq``, ``.replay``, ``App.retry``), and the HTML is
rendered by ``sqsjobs.api.dashboard_views``. No build step: one stylesheet and one small script,
served from the package, re-fetch the page every ``refresh_s`` seconds (paused while a form is
being filled in or the tab is hidden).

What one refresh of ``/`` costs (see docs/dashboard.md): one ``GetQueueAttributes`` per queue and
DLQ; the dead shards of the attention index (32 small Queries) and one BatchGetItem for their
errors; and one Scan capped at ``max_entries`` items (1,250 read units at 10,000 items of 1 KB),
the same capped Scan as ``sqsjobs stats``, which the page says when it is truncated.

POSTs change state, so each one must come from the dashboard's own pages: the API's browser guard
(``sqsjobs.api.security``) refuses any cross-origin write before a route runs. A filtered replay
is two steps: the dry run lists the jobs, and the confirmation
replays only those ids (a job that died after the dry run is not swept in).
"""

from __future__ import annotations

from importlib import resources
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, quote

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from sqsjobs.api import dashboard_views, dead_views
from sqsjobs.api.audit import actor_of, audit, retry_by
from sqsjobs.api.chart_pages import chart_router
from sqsjobs.api.control_pages import control_router
from sqsjobs.api.dead_routes import retry_exact
from sqsjobs.api.job_pages import job_search_router
from sqsjobs.api.job_timeline import timeline_section
from sqsjobs.api.models import JobId, WorkerId  # noqa: TC001 (FastAPI reads the annotations at runtime)
from sqsjobs.api.priority_pages import priority_router
from sqsjobs.api.schedule_pages import schedule_router
from sqsjobs.api.security import PAGE_POLICY
from sqsjobs.api.workflow_pages import workflow_router
from sqsjobs.errors import JobNotFound, JobStateError, PayloadError, SqsJobsError
from sqsjobs.job import JobStatus
from sqsjobs.ops import dead_groups, job_views
from sqsjobs.ops import dlq as dlq_ops
from sqsjobs.ops import inspect as inspect_ops
from sqsjobs.ops import replay as replay_ops
from sqsjobs.ops import stats as stats_ops
from sqsjobs.ops._common import app_queues, parse_duration
from sqsjobs.ops.worker_views import drain_flow, list_workers_flow

if TYPE_CHECKING:
    from sqsjobs.app import App

#: Seconds between two refreshes of a page (the script's default; the router can be told otherwise).
DEFAULT_REFRESH_S = 5.0
#: Records the overview's Scan reads at most per refresh: 1,250 read units at 1 KB, about $0.00016.
DEFAULT_MAX_ENTRIES = 10_000
#: Dead jobs listed on the overview (one page of the attention index).
DEAD_SHOWN = 20
#: Jobs one dashboard replay requeues at most (a request should finish; the CLI has no such cap).
REPLAY_LIMIT = 200
#: Headers of every page: no inline script or style, nothing from another origin, never cached (the
#: browser guard adds nosniff, a referrer policy and no framing to every answer: sqsjobs.api.security).
HEADERS = {"Content-Security-Policy": PAGE_POLICY, "Cache-Control": "no-store"}
_STATIC = {
    "dashboard.css": "text/css; charset=utf-8",
    "dashboard.js": "text/javascript; charset=utf-8",
    "job_live.js": "text/javascript; charset=utf-8",
}
_FLASH = {"retried": "Queued again: attempts reset, same id and key, audit entry recorded."}


def _html(body: str, status_code: int = 200) -> HTMLResponse:
    return HTMLResponse(body, status_code=status_code, headers=HEADERS)


def _problem(status_code: int, title: str, message: str) -> HTMLResponse:
    """A 4xx page that says what went wrong and what to do."""
    body = dashboard_views.section(
        title,
        dashboard_views.Html(f'<p class="error">{dashboard_views.h(message)}</p><p><a href="/">back</a></p>'),
    )
    return _html(dashboard_views.page(title, body), status_code)


async def _form(request: Request) -> dict[str, list[str]]:
    """The urlencoded body (parsed here: no multipart dependency for four small forms)."""
    return parse_qs((await request.body()).decode("utf-8", "replace"), keep_blank_values=False)


def _one(form: dict[str, list[str]], key: str) -> str:
    return (form.get(key) or [""])[0].strip()


class Dashboard:
    """The pages of one App; ``dashboard_router`` exposes them."""

    def __init__(self, app: App, *, refresh_s: float, max_entries: int) -> None:
        self.app = app
        self.refresh_s = refresh_s
        self.max_entries = max_entries

    def overview(self) -> str:
        """``/``: queues, jobs by type, dead jobs with retry and replay, workers."""
        app = self.app
        now = app.clock.now()
        queue_of = {spec.name: spec.queue for spec in app.registry}
        parts = []
        try:
            stats = app.run(
                stats_ops.stats_flow(app.settings, app.registry, now, max_entries=self.max_entries)
            )
            parts += [
                dashboard_views.queues_panel(stats, queue_of),
                dashboard_views.types_panel(stats, self.max_entries),
            ]
        except SqsJobsError as exc:
            parts.append(
                dashboard_views.section(
                    "Queues and jobs", dashboard_views.Html(f'<p class="error">{dashboard_views.h(exc)}</p>')
                )
            )
        try:
            parts.append(self._dead(now))
        except SqsJobsError as exc:
            parts.append(
                dashboard_views.section(
                    "Dead jobs", dashboard_views.Html(f'<p class="error">{dashboard_views.h(exc)}</p>')
                )
            )
        parts.append(dashboard_views.replay_form(sorted(queue_of), app_queues(app.registry)))
        parts.append(self._workers(now))
        return dashboard_views.page("overview", dashboard_views.join(parts), refresh_s=self.refresh_s)

    def _dead(self, now: float) -> dashboard_views.Html:
        query = inspect_ops.ListQuery(status=JobStatus.DEAD, limit=DEAD_SHOWN)
        page: inspect_ops.JobPage = self.app.run(inspect_ops.list_flow(self.app.settings, query, now))
        ids = [r.id for r in page.rows]
        items = self.app.run(inspect_ops.batch_get_flow(self.app.settings.table_name, ids, ("id", "error")))
        errors = {
            i: {k: v.get("S", "") for k, v in item["error"]["M"].items()}
            for i, item in items.items()
            if "error" in item
        }
        return dashboard_views.dead_panel(page.rows, errors, now, page.next_cursor is not None)

    def _workers(self, now: float) -> dashboard_views.Html:
        try:
            workers = self.app.run(list_workers_flow(self.app.settings, now))
        except SqsJobsError as exc:
            return dashboard_views.workers_panel(None, now, f"could not read the worker registry: {exc}")
        return dashboard_views.workers_panel(workers, now)

    def job(self, job_id: str, done: str | None) -> HTMLResponse:
        """``/ui/jobs/{id}``: the record, strongly consistent (one GetItem)."""
        try:
            job = self.app.get(job_id)
        except JobNotFound:
            return _problem(
                404, "Job not found", f"No job {job_id!r} in table {self.app.settings.table_name}."
            )
        data = job_views.job_to_dict(job)
        body = dashboard_views.Html(
            dashboard_views.job_page_body(data, self.app.clock.now()) + timeline_section(data)
        )
        return _html(
            dashboard_views.page(
                f"job {job_id}", body, refresh_s=self.refresh_s, flash=_FLASH.get(done or "")
            )
        )

    def retry(self, job_id: str, by: str) -> Response:
        """Requeue one dead or cancelled job (``App.retry``'s flow, audited as ``by``), then show its page."""
        try:
            self.app.run(retry_by(self.app, job_id, by))
        except JobNotFound:
            return _problem(404, "Job not found", f"No job {job_id!r}.")
        except PayloadError as exc:
            return _problem(
                409, "Retry refused", f"{exc}. Fix it with: sqsjobs jobs retry {job_id} --payload FILE"
            )
        except JobStateError as exc:
            return _problem(409, "Retry refused", f"{exc} (only dead or cancelled jobs can be retried)")
        return RedirectResponse(
            f"/ui/jobs/{quote(job_id, safe='')}?done=retried", status_code=303, headers=HEADERS
        )

    def replay(self, form: dict[str, list[str]], *, dry_run: bool, by: str) -> HTMLResponse:
        """Dry run (lists what matches) or confirmed replay (only the job ids the dry run listed)."""
        fields = {k: _one(form, k) for k in ("type", "queue", "error_class", "since")}
        try:
            age = parse_duration(fields["since"]) if fields["since"] else None
        except ValueError as exc:
            return _problem(400, "Bad filter", f"dead since: {exc}")
        queues = app_queues(self.app.registry)
        if fields["queue"] and fields["queue"] not in queues:
            return _problem(400, "Bad filter", f"queue {fields['queue']!r} is not one of {', '.join(queues)}")
        ids = frozenset(form.get("job_id") or ())
        if not dry_run and not ids:
            return _problem(
                400,
                "Nothing to replay",
                "Run the dry run first: the confirmation replays the jobs it listed.",
            )
        flt = dlq_ops.DlqFilter(
            types=frozenset({fields["type"]} - {""}),
            error_classes=frozenset({fields["error_class"]} - {""}),
            job_ids=ids,
            since=self.app.clock.now() - age if age is not None else None,
        )
        summary: replay_ops.ReplaySummary = self.app.run(
            replay_ops.replay_flow(
                settings=self.app.settings,
                registry=self.app.registry,
                queue_urls=self.app.queue_urls,
                queues=[fields["queue"]] if fields["queue"] else queues,
                flt=flt,
                clock=self.app.clock,
                dry_run=dry_run,
                limit=REPLAY_LIMIT,
                by=by,
            )
        )
        body = (
            dashboard_views.replay_confirm(summary, fields, REPLAY_LIMIT)
            if dry_run
            else dashboard_views.replay_result(summary)
        )
        return _html(dashboard_views.page("replay dry run" if dry_run else "replay", body))


def dashboard_router(
    app: App, *, refresh_s: float = DEFAULT_REFRESH_S, max_entries: int = DEFAULT_MAX_ENTRIES
) -> APIRouter:
    """The dashboard's routes for ``app``: ``/``, ``/ui/jobs/{id}``, ``/ui/dead``, the retry and replay POSTs, static files.

    Mount it behind the API's auth dependency (``include_router(..., dependencies=[...])``).
    """
    if refresh_s <= 0 or max_entries < 1:
        raise ValueError(f"refresh_s must be > 0 and max_entries >= 1, got {refresh_s}, {max_entries}")
    dash = Dashboard(app, refresh_s=refresh_s, max_entries=max_entries)
    router = APIRouter(include_in_schema=False)

    @router.get("/", response_class=HTMLResponse)
    def overview() -> HTMLResponse:
        return _html(dash.overview())

    @router.get("/ui/jobs/{job_id}", response_class=HTMLResponse)
    def job_page(job_id: JobId, done: str | None = None) -> HTMLResponse:
        return dash.job(job_id, done)

    @router.post("/ui/jobs/{job_id}/retry")
    async def retry(job_id: JobId, request: Request) -> Response:
        response = await run_in_threadpool(dash.retry, job_id, actor_of(request))
        if response.status_code == 303:
            audit(app, request, "retry_job", job_id=job_id)
        return response

    @router.post("/ui/replay/dry-run")
    async def replay_dry_run(request: Request) -> Response:
        form = await _form(request)
        return await run_in_threadpool(lambda: dash.replay(form, dry_run=True, by=actor_of(request)))

    @router.post("/ui/replay")
    async def replay(request: Request) -> Response:
        form = await _form(request)
        response = await run_in_threadpool(lambda: dash.replay(form, dry_run=False, by=actor_of(request)))
        audit(app, request, "replay_dlq", job_ids=len(form.get("job_id") or ()))
        return response

    @router.post("/ui/workers/{worker_id}/drain")
    async def drain_worker(worker_id: WorkerId, request: Request) -> Response:
        outcome = await app.arun(drain_flow(app.settings, worker_id, app.clock.now(), by=actor_of(request)))
        if outcome != "requested":
            why = "it is not registered" if outcome == "not_registered" else "it is draining already"
            return _problem(409, "Drain refused", f"Worker {worker_id!r} cannot be drained: {why}.")
        audit(app, request, "drain_worker", worker=worker_id)
        return RedirectResponse("/#workers", status_code=303, headers=HEADERS)

    @router.get("/ui/dead", response_class=HTMLResponse)
    async def dead_groups_page() -> HTMLResponse:
        found = await app.arun(dead_groups.groups_flow(app.settings, app.clock.now()))
        body = dead_views.groups_body(found, app.clock.now())
        return _html(dashboard_views.page("dead jobs by error", body, refresh_s=refresh_s))

    @router.post("/ui/dead/dry-run")
    async def dead_group_dry_run(request: Request) -> Response:
        sig = _one(await _form(request), "signature")
        found = await app.arun(dead_groups.groups_flow(app.settings, app.clock.now()))
        group = found.find(sig)
        ids = group.job_ids[: dead_groups.RETRY_LIMIT] if group else []
        return _html(dashboard_views.page("group retry dry run", dead_views.group_confirm(sig, ids)))

    @router.post("/ui/dead/retry")
    async def dead_group_retry(request: Request) -> Response:
        form = await _form(request)
        ids = form.get("job_id") or []
        if not ids:
            return _problem(
                400, "Nothing to retry", "Run the dry run first: the confirmation retries the jobs it listed."
            )
        sig = _one(form, "signature")
        retried, skipped = await retry_exact(app, sig, ids[: dead_groups.RETRY_LIMIT])
        audit(app, request, "retry_dead_group", signature=sig, retried=len(retried), skipped=len(skipped))
        return _html(dashboard_views.page("group retry", dead_views.group_result(sig, retried, skipped)))

    router.include_router(workflow_router(app, refresh_s=refresh_s, headers=HEADERS))
    router.include_router(job_search_router(app, refresh_s=refresh_s, headers=HEADERS))
    router.include_router(control_router(app, refresh_s=refresh_s, headers=HEADERS))
    router.include_router(schedule_router(app, refresh_s=refresh_s, headers=HEADERS))
    router.include_router(priority_router(app, headers=HEADERS))
    router.include_router(chart_router(app, refresh_s=refresh_s, max_entries=max_entries, headers=HEADERS))

    @router.get("/ui/static/{name}")
    def static(name: str) -> Response:
        if name not in _STATIC:
            return _problem(404, "Not found", f"No static file {name!r}.")
        text = resources.files("sqsjobs.api").joinpath("static", name).read_text("utf-8")
        return Response(text, media_type=_STATIC[name], headers={**HEADERS, "Cache-Control": "max-age=300"})

    return router
