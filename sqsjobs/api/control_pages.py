"""The dashboard's ``/ui/controls`` page: pause and resume job types, and every limit with its breaker.

The numbers are ``sqsjobs.limits.namespace.state_flow``'s (``sqsjobs limits``: one BatchGetItem per 100
control items, no Scan); the buttons POST to ``/ui/types/{type}/pause|resume`` and
``/ui/limits/{name}/breaker/close``, which call the same flows as the HTTP routes (``app.limits.pause``,
``app.limits.resume``, ``limits.ops.close_breaker_flow``), each audited, each refused from another site
like every POST of the dashboard. A refusal (a type that is not pausable, a closed breaker) is a
page saying why, with status 409.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import parse_qs, quote

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from sqsjobs.api import dashboard_views
from sqsjobs.api.audit import audit
from sqsjobs.api.dashboard_views import Html, ago, h, join
from sqsjobs.api.models import LimitName, TypeName  # noqa: TC001 (FastAPI reads the annotations at runtime)
from sqsjobs.errors import ConfigurationError, InvalidTransition, RecordChanged
from sqsjobs.limits import namespace as limits_namespace

if TYPE_CHECKING:
    from collections.abc import Mapping

    from sqsjobs.app import App


def _button(action: str, label: str, ident: str, reason: bool = False) -> Html:
    field = Html('<input name="reason" placeholder="reason" maxlength="500"> ') if reason else Html("")
    return Html(
        f'<form method="post" action="{h(action)}" class="inline">{field}'
        f'<button type="submit" id="{h(ident)}">{h(label)}</button></form>'
    )


def controls_body(state: limits_namespace.FlowState, pausable: list[str], now: float) -> Html:
    """Pausable types with their state and a button, then the limits."""
    rows = []
    for t in pausable:
        info = state.paused.get(t)
        slug = quote(t, safe="")
        if info:
            cell = Html(f'<span class="status paused">paused</span> {ago(info.get("paused_at"), now)}')
            action = _button(f"/ui/types/{slug}/resume", "resume", f"resume-{t}")
        else:
            cell = Html('<span class="status running">running</span>')
            action = _button(f"/ui/types/{slug}/pause", "pause", f"pause-{t}", reason=True)
        rows.append(
            [Html(f'<span class="type">{h(t)}</span>'), cell, (info or {}).get("reason") or "", action]
        )
    types = (
        dashboard_views.table(["type", "state", "reason", ""], rows, cls="types-control")
        if rows
        else Html(
            '<p class="muted">No pausable type: declare one with pausable=True, or put it under a limit.</p>'
        )
    )
    lims = []
    for lim in state.limits:
        breaker = Html("-")
        if lim.breaker:
            breaker = Html(f'<span class="status breaker-{h(lim.breaker)}">{h(lim.breaker)}</span>')
            if lim.breaker_until:
                breaker = Html(breaker + Html(" until ") + ago(lim.breaker_until, now))
            if lim.breaker != "closed":
                breaker = Html(
                    breaker
                    + Html(" ")
                    + _button(
                        f"/ui/limits/{quote(lim.name, safe='')}/breaker/close", "close", f"close-{lim.name}"
                    )
                )
        running = (
            "-"
            if lim.concurrency is None
            else f"{lim.running}/{lim.concurrency}"
            if lim.key is None
            else f"per {lim.key}"
        )
        lims.append(
            [
                lim.name,
                ", ".join(lim.job_types),
                running,
                f"{lim.rate} ({lim.recent_starts})" if lim.rate else "-",
                breaker,
            ]
        )
    limits = (
        dashboard_views.table(
            ["limit", "types", "running", "rate (last window)", "breaker"], lims, cls="limits"
        )
        if lims
        else Html('<p class="muted">No limits declared.</p>')
    )
    return join(
        [
            dashboard_views.section(
                "Pause and resume",
                types,
                note="Workers stop starting a paused type within seconds; its jobs wait, attempts untouched.",
                anchor="pause",
            ),
            dashboard_views.section(
                "Limits",
                limits,
                note="Slots, starts and breakers as the table holds them (sqsjobs limits).",
                anchor="limits",
            ),
        ]
    )


def control_router(app: App, *, refresh_s: float, headers: Mapping[str, str]) -> APIRouter:
    """``/ui/controls`` and its POSTs (cross-origin ones are refused before: ``sqsjobs.api.security``)."""
    router = APIRouter(include_in_schema=False)
    secure = dict(headers)

    def refused(title: str, message: str) -> HTMLResponse:
        body = dashboard_views.section(
            title, Html(f'<p class="error">{h(message)}</p><p><a href="/ui/controls">back</a></p>')
        )
        return HTMLResponse(dashboard_views.page(title, body), status_code=409, headers=secure)

    def back() -> RedirectResponse:
        return RedirectResponse("/ui/controls", status_code=303, headers=secure)

    @router.get("/ui/controls", response_class=HTMLResponse)
    async def controls() -> HTMLResponse:
        now = app.clock.now()
        state = await app.arun(
            limits_namespace.state_flow(app.settings.table_name, app.registry, app.limits, now=now)
        )
        pausable = sorted(s.name for s in app.registry if s.pausable)
        page = dashboard_views.page("controls", controls_body(state, pausable, now), refresh_s=refresh_s)
        return HTMLResponse(page, headers=secure)

    @router.post("/ui/types/{job_type}/pause")
    async def pause(job_type: TypeName, request: Request) -> Response:
        form = parse_qs((await request.body()).decode("utf-8", "replace"))
        reason = (form.get("reason") or [""])[0][:500] or None
        try:
            await app.limits.apause(job_type, reason=reason)
        except ConfigurationError as exc:
            return refused("Pause refused", str(exc))
        audit(app, request, "pause", job_type=job_type, reason=reason)
        return back()

    @router.post("/ui/types/{job_type}/resume")
    async def resume(job_type: TypeName, request: Request) -> Response:
        try:
            if await app.limits.aresume(job_type):
                audit(app, request, "resume", job_type=job_type)
        except ConfigurationError as exc:
            return refused("Resume refused", str(exc))
        return back()

    @router.post("/ui/limits/{name}/breaker/close")
    async def close(name: LimitName, request: Request) -> Response:
        try:
            was = await app.arun(
                limits_namespace.close_breaker_flow(app.settings.table_name, app.limits, name)
            )
        except (ConfigurationError, InvalidTransition, RecordChanged) as exc:
            return refused("Close refused", str(exc))
        audit(app, request, "close_breaker", limit=name, was=was)
        return back()

    return router
