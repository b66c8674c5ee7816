"""``create_app``: the FastAPI application of one sqsjobs App, every route behind one auth dependency.

Why FastAPI (an ASGI app) rather than Powertools' event handler: the same application has to run as
a local server (``sqsjobs api``, ``sqsjobs dev``) and as a Lambda function behind API Gateway. An
ASGI app does both with off-the-shelf adapters, uvicorn and Mangum (REST and HTTP API events), and
is tested over real HTTP; Powertools' resolver is Lambda-event first and would need a server of our
own locally. FastAPI also writes the OpenAPI document and the interactive docs from the same
pydantic models that validate requests, which sqsjobs already uses for payloads.

The routes are ``sqsjobs.api.job_routes`` (and ``bulk_routes``, ``priority_routes``), ``queue_routes``, ``dlq_routes``, ``worker_routes``,
``control_routes`` (pause, resume, limits, breakers), ``dead_routes`` (dead jobs by error signature), ``series_routes``
(the charts' numbers)
and ``workflow_routes`` (batches, chains), and the dashboard's; errors are problem bodies
(``sqsjobs.api.problems``); a body over ``max_body_bytes`` is refused before it is parsed
(``sqsjobs.api.body``). The OpenAPI document (``/openapi.json``) and the docs (``/docs``,
``/redoc``) sit behind the token too: without a token they are open, as everything is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Depends, FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse

from sqsjobs.api import (
    bulk_routes,
    control_routes,
    dead_routes,
    dlq_routes,
    job_routes,
    priority_routes,
    problems,
    queue_routes,
    series_routes,
    token_routes,
    worker_routes,
    workflow_routes,
)
from sqsjobs.api.auth import login_router, require_token
from sqsjobs.api.body import DEFAULT_MAX_BODY_BYTES, BodyLimit
from sqsjobs.api.dashboard import dashboard_router

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sqsjobs.app import App

API_VERSION = "1"
_DESCRIPTION = """\
Enqueue, inspect, cancel and retry the jobs of sqsjobs App **{name}**, and read and replay its
dead-letter queues: the Python producer API and the `sqsjobs` CLI, over HTTP.

Errors are [RFC 9457](https://www.rfc-editor.org/rfc/rfc9457) problem bodies
(`application/problem+json`) whose `field` names what to fix.
"""


def create_app(
    app: App,
    *,
    token: str | None = None,
    extra_routers: Sequence[APIRouter] = (),
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    dashboard: bool = True,
) -> FastAPI:
    """The API of ``app``.

    Args:
        app: the sqsjobs App whose jobs it serves (routes reach it as ``request.app.state.sqsjobs``,
            or with the ``sqsjobs.api.deps.AppDep`` parameter).
        token: the bearer token every request must carry; None checks nothing (bind to loopback,
            or put IAM in front, as infra/ does).
        extra_routers: more routes, behind the same token.
        dashboard: serve the web dashboard at ``/`` and ``/ui/`` (``sqsjobs.api.dashboard``), behind
            the same token; a browser signs in once at ``/ui/login`` (a cookie, ``sqsjobs.api.auth``).
        max_body_bytes: larger request bodies get 413 before they are parsed.
    """
    guard = [Depends(require_token(token))]
    api = FastAPI(
        title=f"sqsjobs: {app.name}",
        version=API_VERSION,
        description=_DESCRIPTION.format(name=app.name),
        openapi_url=None,  # served below, behind the guard
        docs_url=None,
        redoc_url=None,
        # Each operation's id is its route function's name, or the id the route gives explicitly:
        # stable, unique, and what a generated client calls the method.
        generate_unique_id_function=lambda route: route.name,
    )
    api.state.sqsjobs = app
    problems.install(api)
    routers = [
        job_routes.router,
        bulk_routes.router,
        priority_routes.router,
        queue_routes.router,
        dlq_routes.router,
        worker_routes.router,
        control_routes.router,
        dead_routes.router,
        series_routes.router,
        workflow_routes.router,
        token_routes.router,
        *extra_routers,
    ]
    if dashboard:
        routers.append(dashboard_router(app))
    for router in routers:
        api.include_router(router, dependencies=guard)
    api.include_router(login_router(token))  # the sign-in form is the one route outside the guard
    _documentation(api, guard)
    api.add_middleware(BodyLimit, max_bytes=max_body_bytes)
    return api


def _documentation(api: FastAPI, guard: list[Any]) -> None:
    """``/openapi.json``, ``/docs`` and ``/redoc``, as FastAPI serves them, but behind the token."""
    docs = APIRouter(include_in_schema=False, dependencies=guard)

    @docs.get("/openapi.json")
    async def openapi() -> JSONResponse:
        return JSONResponse(api.openapi())

    @docs.get("/docs")
    async def swagger() -> HTMLResponse:
        return get_swagger_ui_html(openapi_url="openapi.json", title=f"{api.title} docs")

    @docs.get("/redoc")
    async def redoc() -> HTMLResponse:
        return get_redoc_html(openapi_url="openapi.json", title=f"{api.title} docs")

    api.include_router(docs)


def route_summary(api: FastAPI) -> list[tuple[str, str]]:
    """``(method, path)`` of every documented route: what docs/api.md must show a curl example for."""
    schema: dict[str, Any] = api.openapi()
    return sorted((m.upper(), p) for p, ops in schema["paths"].items() for m in ops)
