"""The dashboard's ``/ui/priority`` page: move waiting jobs to another priority level, dry run first.

The form names the jobs (ids, or a type and tenant) and the level; ``POST /ui/priority/dry-run``
lists what would move and why the others would not (``sqsjobs.ops.reprioritize``, nothing changes)
with a form carrying exactly those ids; ``POST /ui/priority`` moves only them (the same flow and
refusals as ``POST /jobs/priority``: a job that is not waiting is a 409 page naming it, no ids a
400), audited, and shows what moved. Every POST is refused from another site like the dashboard's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import parse_qs

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from sqsjobs.api import dashboard_views
from sqsjobs.api.audit import actor_of, audit
from sqsjobs.api.dashboard_views import Html, h, join
from sqsjobs.errors import HandlerNotFound
from sqsjobs.ops import reprioritize

if TYPE_CHECKING:
    from collections.abc import Mapping

    from sqsjobs.app import App


def _levels(selected: str = "high") -> Html:
    options = join(
        Html(f'<option value="{h(v)}"{" selected" if v == selected else ""}>{h(v)}</option>')
        for v in reprioritize.LEVELS
    )
    return Html(f'<select name="to" id="priority-to">{options}</select>')


def form_body(types: list[str]) -> Html:
    """The form: which jobs, and the level."""
    choices = join(Html(f'<option value="{h(t)}">{h(t)}</option>') for t in types)
    return dashboard_views.section(
        "Change the priority of waiting jobs",
        Html(
            '<form method="post" action="/ui/priority/dry-run" class="priority">'
            f'<label>type <select name="type" id="priority-type"><option value="">(by id)</option>{choices}</select></label> '
            '<label>tenant <input name="tenant" id="priority-tenant" maxlength="256"></label> '
            '<label>ids <input name="ids" id="priority-ids" size="60" placeholder="job ids, space separated"></label> '
            f"<label>to {_levels()}</label> "
            '<button type="submit" id="priority-dry-run">dry run</button></form>'
        ),
        note="Queued and retry_scheduled jobs on a queue with priority levels; the dry run changes nothing.",
        anchor="priority",
    )


def dry_run_body(found: list[reprioritize.Candidate], to: str) -> Html:
    """What would move, and a form that moves exactly those ids."""
    ids = [c.job_id for c in found if not c.reason]
    rows = [
        [
            Html(f'<a href="/ui/jobs/{h(c.job_id)}" class="job-id">{h(c.job_id)}</a>'),
            c.status,
            c.level,
            Html('<span class="good">would move</span>') if not c.reason else c.reason,
        ]
        for c in found
    ]
    table = dashboard_views.table(["job", "status", "level", f"→ {to}"], rows, cls="priority-dry-run")
    if not ids:
        confirm = Html('<p class="muted">Nothing would move. <a href="/ui/priority">back</a></p>')
    else:
        hidden = join(Html(f'<input type="hidden" name="job_id" value="{h(i)}">') for i in ids)
        confirm = Html(
            '<form method="post" action="/ui/priority" class="confirm">'
            f'<input type="hidden" name="to" value="{h(to)}">{hidden}'
            f'<button type="submit" id="confirm-priority">Move these {len(ids)} job(s) to {h(to)}</button> '
            '<a href="/ui/priority">cancel</a></form>'
        )
    return dashboard_views.section(
        f"Dry run: {len(ids)} of {len(found)} job(s) would move to {to}", join([table, confirm])
    )


def moved_body(report: reprioritize.MoveReport) -> Html:
    """What the confirmation did."""
    rows: list[list[object]] = [[i, "moved", "with its message"] for i in report.messages_moved]
    rows += [[i, "moved", "its message was not visible: next start from the old level"] for i in report.left]
    rows += [[i, "skipped", why] for i, why in report.skipped.items()]
    table = dashboard_views.table(["job", "", ""], rows, cls="priority-moved")
    back = Html('<p><a href="/ui/priority">back</a></p>')
    return dashboard_views.section(f"Moved {len(report.moved)} job(s) to {report.to}", join([table, back]))


def priority_router(app: App, *, headers: Mapping[str, str]) -> APIRouter:
    """``/ui/priority`` and its POSTs (cross-origin ones are refused before: ``sqsjobs.api.security``)."""
    router = APIRouter(include_in_schema=False)
    secure = dict(headers)

    def answer(title: str, body: Html, status: int = 200) -> HTMLResponse:
        return HTMLResponse(dashboard_views.page(title, body), status_code=status, headers=secure)

    def refused(message: str, status: int = 409) -> HTMLResponse:
        body = Html(f'<p class="error">{h(message)}</p><p><a href="/ui/priority">back</a></p>')
        return answer(
            "Priority change refused", dashboard_views.section("Priority change refused", body), status
        )

    def not_waiting(found: list[reprioritize.Candidate]) -> HTMLResponse | None:
        busy = [f"{c.job_id} is {c.status}" for c in found if not c.waiting]
        if not busy:
            return None
        return refused(f"only queued or retry_scheduled jobs change level: {'; '.join(busy)}")

    async def form_of(request: Request) -> dict[str, list[str]]:
        return parse_qs((await request.body()).decode("utf-8", "replace"))

    @router.get("/ui/priority", response_class=HTMLResponse)
    async def form() -> HTMLResponse:
        return answer("priority", form_body(sorted(s.name for s in app.registry)))

    @router.post("/ui/priority/dry-run")
    async def dry_run(request: Request) -> Response:
        fields = await form_of(request)
        to = (fields.get("to") or [""])[0]
        job_type = (fields.get("type") or [""])[0] or None
        tenant = (fields.get("tenant") or [""])[0][:256] or None
        ids = " ".join(fields.get("ids") or []).split()[: reprioritize.MAX_IDS]
        if to not in reprioritize.LEVELS:
            return refused(f"choose a level: {', '.join(reprioritize.LEVELS)}", 400)
        if ids:
            found = await app.arun(reprioritize.candidates_flow(app.settings, ids, to))
            if refusal := not_waiting(found):
                return refusal
        elif job_type is not None:
            try:
                app.registry.get(job_type)
            except HandlerNotFound as exc:
                return refused(str(exc), 400)
            found, _ = await app.arun(reprioritize.find_flow(app.settings, job_type, to, tenant=tenant))
        else:
            return refused("name the jobs: their ids, or a type", 400)
        return answer("priority dry run", dry_run_body(found, to))

    @router.post("/ui/priority")
    async def confirm(request: Request) -> Response:
        fields = await form_of(request)
        to = (fields.get("to") or [""])[0]
        ids = list(dict.fromkeys(fields.get("job_id") or []))[: reprioritize.MAX_IDS]
        if to not in reprioritize.LEVELS:
            return refused(f"choose a level: {', '.join(reprioritize.LEVELS)}", 400)
        if not ids:
            return refused("run the dry run first: the confirmation moves the ids it listed", 400)
        if refusal := not_waiting(await app.arun(reprioritize.candidates_flow(app.settings, ids, to))):
            return refusal
        report = await app.arun(
            reprioritize.move_flow(app.settings, app.queue_urls, ids, to, app.clock, by=actor_of(request))
        )
        audit(app, request, "change_priority", to=to, moved=report.moved, skipped=len(report.skipped))
        return answer("priority moved", moved_body(report))

    return router
