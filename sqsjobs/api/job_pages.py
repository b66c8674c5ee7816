"""The dashboard's ``/ui/jobs`` page: jobs found by type, status, queue, tenant, time and id prefix.

One page per request from ``sqsjobs.ops.inspect.list_flow`` (``sqsjobs jobs list``), newest first,
with a *next page* link carrying its cursor and the same filters. ``status=dead`` is served by the
attention index's 32 dead shards (16-20 read units a page, however large the table); anything else
by a Scan within the ``since`` window (default 24 h) that reads at most ``SCAN_BUDGET_ITEMS`` items
per page (1,250 read units at 1 KB) and may return a short page with a cursor to read on: the table
has no status index, on purpose (docs/scale.md). The page says which served it and how many items
were read. An id prefix filters the rows of each page (ids are random: no index can serve a
prefix); a whole id opens that job's page (one GetItem).
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import quote, urlencode

from fastapi import APIRouter
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from sqsjobs.api import dashboard_views
from sqsjobs.api.dashboard_views import Html, ago, h, job_link, join
from sqsjobs.errors import CursorError
from sqsjobs.job import JobStatus
from sqsjobs.ops import inspect as inspect_ops
from sqsjobs.ops._common import app_queues, parse_duration

if TYPE_CHECKING:
    from collections.abc import Mapping

    from sqsjobs.app import App

#: Rows per page.
PAGE_ROWS = 50
#: A job id's length (``uuid4().hex``): a prefix this long is the whole id.
ID_LENGTH = 32


def _select(name: str, options: list[str], chosen: str, blank: str) -> Html:
    opts = Html(f'<option value="">{h(blank)}</option>') + join(
        Html(f'<option value="{h(o)}"{" selected" if o == chosen else ""}>{h(o)}</option>') for o in options
    )
    return Html(f'<label>{h(name)} <select name="{h(name)}">{opts}</select></label>')


def _text(name: str, value: str, hint: str) -> Html:
    return Html(
        f'<label>{h(name)} <input name="{h(name)}" value="{h(value)}" placeholder="{h(hint)}" size="12"></label>'
    )


def search_form(types: list[str], queues: list[str], f: Mapping[str, str]) -> Html:
    """The filters, as a GET form (its URL is the search: bookmark it, share it)."""
    statuses = [s.value for s in JobStatus]
    return Html(
        '<form method="get" action="/ui/jobs" class="replay" id="search">'
        + _select("type", types, f["type"], "any type")
        + _select("status", statuses, f["status"], "any status")
        + _select("queue", queues, f["queue"], "any queue")
        + _text("tenant", f["tenant"], "tenant")
        + _text("tag", f["tag"], "name=value")
        + _text("since", f["since"], "24h")
        + _text("id", f["id"], "id prefix")
        + '<button type="submit" id="search-jobs">search</button></form>'
    )


def results(
    page: inspect_ops.JobPage, rows: list[inspect_ops.JobRow], f: Mapping[str, str], now: float
) -> Html:
    """The rows, where they came from and what they cost, and the next page's link."""
    body = [
        [
            job_link(r.id),
            dashboard_views.status_badge(r.status),
            r.type,
            r.queue,
            r.tenant or "",
            f"{r.attempt or 0}/{r.max_attempts or '-'}",
            ago(r.at, now),
        ]
        for r in rows
    ]
    listed = (
        dashboard_views.table(
            ["job", "status", "type", "queue", "tenant", "attempts", "changed"], body, cls="jobs"
        )
        if body
        else Html('<p class="muted">No job on this page matches.</p>')
    )
    more = Html("")
    if page.next_cursor:
        query = urlencode({**{k: v for k, v in f.items() if v}, "cursor": page.next_cursor})
        more = Html(f'<p><a id="next-page" href="/ui/jobs?{h(query)}">next page</a></p>')
    served = {
        "attention": "the attention index's dead shards",
        "tags": "the tags index (newest first)",
    }.get(page.index, "a Scan of the table")
    return dashboard_views.section(
        f"{len(rows)} job(s)",
        Html(listed + more),
        note=f"Served by {served}: {page.read} item(s) read for this page. Newest first within a page; "
        "a Scan page may be short and still have a next page.",
        anchor="jobs",
    )


def job_search_router(app: App, *, refresh_s: float, headers: Mapping[str, str]) -> APIRouter:
    """``/ui/jobs?type=&status=&queue=&tenant=&tag=&since=&id=&cursor=``."""
    router = APIRouter(include_in_schema=False)
    secure = dict(headers)

    def bad(message: str) -> HTMLResponse:
        body = dashboard_views.section("Bad filter", Html(f'<p class="error">{h(message)}</p>'))
        return HTMLResponse(dashboard_views.page("jobs", body), status_code=400, headers=secure)

    @router.get("/ui/jobs", response_class=HTMLResponse)
    async def jobs(
        type: str = "",
        status: str = "",
        queue: str = "",
        tenant: str = "",
        tag: str = "",
        since: str = "",
        id: str = "",
        cursor: str = "",
    ) -> Response:
        f = {
            "type": type,
            "status": status,
            "queue": queue,
            "tenant": tenant,
            "tag": tag.strip(),
            "since": since,
            "id": id.strip(),
        }
        if len(f["id"]) == ID_LENGTH:
            return RedirectResponse(f"/ui/jobs/{quote(f['id'], safe='')}", status_code=303, headers=secure)
        try:
            query = inspect_ops.ListQuery(
                status=JobStatus(status) if status else None,
                type=type or None,
                queue=queue or None,
                tenant=tenant or None,
                since_s=parse_duration(since) if since else None,
                limit=PAGE_ROWS,
                cursor=cursor or None,
                tag=f["tag"] or None,
            )
            page = await app.arun(inspect_ops.list_flow(app.settings, query, app.clock.now()))
        except (ValueError, CursorError) as exc:
            return bad(str(exc))
        rows = [r for r in page.rows if r.id.startswith(f["id"])]
        types = sorted(s.name for s in app.registry)
        body = Html(search_form(types, app_queues(app.registry), f) + results(page, rows, f, app.clock.now()))
        return HTMLResponse(
            dashboard_views.page("jobs", body, refresh_s=None if cursor else refresh_s), headers=secure
        )

    return router
