"""The dashboard's ``/ui/schedules`` page: every schedule with its last fire, and the runtime ones' controls.

The rows are ``app.schedules.list`` and ``declared`` (``GET /schedules``'s): each schedule's
expression, overlap policy and catch-up window, its last fire with the job it made and that job's
status now, its counts (made, skipped, missed) and its next fire times. A runtime schedule has
pause, resume and delete buttons, POSTs to ``/ui/schedules/{name}/pause|resume|delete`` (with its
tenant), which call the same verbs as ``POST /schedules/...``, each audited, each refused from
another site like every POST of the dashboard. A refusal (no such schedule) is a page saying why.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import parse_qs, quote

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from sqsjobs.api import dashboard_views
from sqsjobs.api.audit import audit
from sqsjobs.api.dashboard_views import Html, ago, h, job_link, join, status_badge
from sqsjobs.api.schedule_routes import ScheduleName  # noqa: TC001 (FastAPI reads the annotations at runtime)
from sqsjobs.errors import ConfigurationError, ScheduleNotFound

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from sqsjobs.app import App
    from sqsjobs.schedules.runtime import ScheduleView


def _button(view: ScheduleView, action: str) -> Html:
    tenant = f'<input type="hidden" name="tenant" value="{h(view.tenant)}">' if view.tenant else ""
    ident = f"{action}-{view.tenant + '.' if view.tenant else ''}{view.name}"
    return Html(
        f'<form method="post" action="/ui/schedules/{h(quote(view.name, safe=""))}/{action}" class="inline">'
        f'{tenant}<button type="submit" id="{h(ident)}">{action}</button></form>'
    )


def schedules_body(runtime: Sequence[ScheduleView], declared: Sequence[ScheduleView], now: float) -> Html:
    """The runtime schedules (with their buttons), then the declared ones."""

    def row(view: ScheduleView, controls: bool) -> list[object]:
        last = (
            join([ago(view.last_fired_at, now), Html(" "), job_link(view.last_job)])
            if view.last_job
            else Html('<span class="muted">never</span>')
        )
        outcome = status_badge(view.last_outcome) if view.last_outcome else Html("-")
        buttons = join(
            [
                _button(view, "resume" if view.state == "paused" else "pause"),
                Html(" "),
                _button(view, "delete"),
            ]
        )
        return [
            f"{view.tenant}.{view.name}" if view.tenant else view.name,
            view.job,
            view.expression,
            Html(f'<span class="status {h(view.state)}">{h(view.state)}</span>'),
            view.overlap,
            last,
            outcome,
            f"{view.fires} / {view.skipped} / {view.missed}",
            join(part for t in view.next_fires[:3] for part in (ago(t, now), Html("<br>"))) or "-",
            buttons if controls else "",
        ]

    headers = [
        "schedule",
        "job",
        "expression",
        "state",
        "overlap",
        "last fire",
        "its job",
        "made / skipped / missed",
        "next",
        "",
    ]
    made = (
        dashboard_views.table(headers, [row(v, True) for v in runtime], cls="schedules runtime")
        if runtime
        else Html('<p class="muted">No schedule made at runtime (app.schedules.create, POST /schedules).</p>')
    )
    code = (
        dashboard_views.table(headers, [row(v, False) for v in declared], cls="schedules declared")
        if declared
        else Html('<p class="muted">No schedule declared in code.</p>')
    )
    return join(
        [
            dashboard_views.section(
                "Made at runtime",
                made,
                note="In their own Scheduler group, which schedules apply never touches.",
                anchor="runtime",
            ),
            dashboard_views.section(
                "Declared",
                code,
                note="Declared in code, applied by sqsjobs schedules apply.",
                anchor="declared",
            ),
        ]
    )


def schedule_router(app: App, *, refresh_s: float, headers: Mapping[str, str]) -> APIRouter:
    """``/ui/schedules`` and its POSTs (cross-origin ones are refused before: ``sqsjobs.api.security``)."""
    router = APIRouter(include_in_schema=False)
    secure = dict(headers)

    @router.get("/ui/schedules", response_class=HTMLResponse)
    async def schedules() -> HTMLResponse:
        runtime = await app.schedules.alist()
        declared = await app.schedules.adeclared()
        body = schedules_body(runtime, declared, app.clock.now())
        return HTMLResponse(dashboard_views.page("schedules", body, refresh_s=refresh_s), headers=secure)

    async def act(name: str, action: str, request: Request) -> Response:
        form = parse_qs((await request.body()).decode("utf-8", "replace"))
        tenant = (form.get("tenant") or [""])[0] or None
        verb = {
            "pause": app.schedules.apause,
            "resume": app.schedules.aresume,
            "delete": app.schedules.adelete,
        }
        try:
            await verb[action](name, tenant=tenant)
        except ScheduleNotFound as exc:
            return _refused(secure, 404, "Schedule not found", str(exc))
        except ConfigurationError as exc:
            return _refused(secure, 409, f"{action.capitalize()} refused", str(exc))
        audit(app, request, f"{action}_schedule", schedule=name, tenant=tenant)
        return RedirectResponse("/ui/schedules", status_code=303, headers=secure)

    @router.post("/ui/schedules/{name}/pause")
    async def pause(name: ScheduleName, request: Request) -> Response:
        return await act(name, "pause", request)

    @router.post("/ui/schedules/{name}/resume")
    async def resume(name: ScheduleName, request: Request) -> Response:
        return await act(name, "resume", request)

    @router.post("/ui/schedules/{name}/delete")
    async def delete(name: ScheduleName, request: Request) -> Response:
        return await act(name, "delete", request)

    return router


def _refused(headers: dict[str, str], status: int, title: str, message: str) -> HTMLResponse:
    body = dashboard_views.section(
        title, Html(f'<p class="error">{h(message)}</p><p><a href="/ui/schedules">back</a></p>')
    )
    return HTMLResponse(dashboard_views.page(title, body), status_code=status, headers=headers)
