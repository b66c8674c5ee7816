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

import secrets
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Depends, FastAPI
from starlette.middleware.sessions import SessionMiddleware

from sqsjobs.api import (
    bulk_routes,
    control_routes,
    dead_routes,
    dlq_routes,
    job_routes,
    lease_routes,
    priority_routes,
    problems,
    queue_routes,
    schedule_routes,
    series_routes,
    signal_routes,
    token_routes,
    type_routes,
    watch,
    worker_routes,
    workflow_routes,
)
from sqsjobs.api.auth import DEFAULT_SESSION_S, SESSION_COOKIE, login_router, require_principal
from sqsjobs.api.body import DEFAULT_MAX_BODY_BYTES, BodyLimit
from sqsjobs.api.dashboard import dashboard_router
from sqsjobs.api.deps import declare_shared
from sqsjobs.api.docs_pages import docs_router
from sqsjobs.api.principals import ApiToken, Tokens
from sqsjobs.api.security import BrowserGuard, loopback_hosts
from sqsjobs.api.watch import WatchTokens
from sqsjobs.deploy.rules import OPEN_ROUTES
from sqsjobs.remote import lease as leases
from sqsjobs.remote.lease_server import LeaseServer

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sqsjobs.app import App

API_VERSION = "1"
_DESCRIPTION = """\
Enqueue, inspect, cancel and retry the jobs of sqsjobs App **{name}**, and read and replay its
dead-letter queues: the Python producer API and the `sqsjobs` CLI, over HTTP.

Errors are [RFC 9457](https://www.rfc-editor.org/rfc/rfc9457) problem bodies
(`application/problem+json`) whose `field` names what to fix.

**Authentication.** Served by `sqsjobs api`, every operation but a token's answer URL takes an API
token (`Authorization: Bearer ...`, the `HTTPBearer` scheme) or a console session. Deployed with
the CDK construct (`infra/`), API Gateway also requires each request to be signed with AWS
Signature Version 4 by a principal allowed `execute-api:Invoke` on the API (IAM authorisation):
every route but {open_routes}, which carry their own credential (a token's key).
"""


def create_app(
    app: App,
    *,
    token: str | None = None,
    tokens: Sequence[ApiToken] | Tokens = (),
    extra_routers: Sequence[APIRouter] = (),
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    dashboard: bool = True,
    allowed_hosts: Sequence[str] | None = None,
    session_s: float = DEFAULT_SESSION_S,
    secure_cookies: bool = False,
    lease_key: str | None = None,
    max_stream_s: float | None = None,
) -> FastAPI:
    """The API of ``app``.

    Args:
        app: the sqsjobs App whose jobs it serves (routes reach it as ``request.app.state.sqsjobs``,
            or with the ``sqsjobs.api.deps.AppDep`` parameter).
        token: one operator token every request must carry (``SQSJOBS_API_TOKEN``).
        tokens: named tokens with roles (``sqsjobs.api.principals``); with ``token``, all of them
            are accepted. None at all checks nothing (bind to loopback, or put IAM in front, as
            infra/ does).
        extra_routers: more routes, behind the same guard.
        dashboard: serve the web console at ``/`` and ``/ui/`` (``sqsjobs.api.dashboard``), behind
            the same guard; a browser signs in once at ``/ui/login`` (a signed session).
        max_body_bytes: larger request bodies get 413 before they are parsed.
        allowed_hosts: the ``Host`` names the server answers to (``"*"``: any). Default: any when a
            token is configured, else loopback names only (``sqsjobs.api.security``).
        session_s: how long a console session lasts from sign-in.
        secure_cookies: mark the session cookie ``Secure`` (served over HTTPS only).
        lease_key: what HTTP workers' leases are signed with (``sqsjobs.remote.lease.lease_key``
            when None: ``SQSJOBS_LEASE_KEY``, its file or its Secrets Manager secret, else one
            derived from the tokens, else random).
        max_stream_s: the longest an event stream (``GET /jobs/{id}/events``) stays open, whatever its
            ``max_s`` asks: behind a gateway that buffers answers (API Gateway, 29 s), a stream cut
            short arrives whole and the browser's ``EventSource`` asks again (a long poll).
    """
    credentials = Tokens([*tokens, *Tokens.single(token)])
    api = FastAPI(
        title=f"sqsjobs: {app.name}",
        version=API_VERSION,
        description=_DESCRIPTION.format(
            name=app.name, open_routes=", ".join(f"`{method} {path}`" for method, path in OPEN_ROUTES)
        ),
        openapi_url=None,  # served by docs_pages, behind the guard
        docs_url=None,
        redoc_url=None,
        # Each operation's id is its route function's name, or the id the route gives explicitly:
        # stable, unique, and what a generated client calls the method.
        generate_unique_id_function=lambda route: route.name,
    )
    api.state.sqsjobs = app
    if lease_key is None:
        lease_key, origin = leases.lease_key(
            credentials.session_secret() if credentials else None, run=app.run
        )
        if origin.startswith("random"):
            app.telemetry.logger.info(
                "HTTP workers' leases are signed with a random key: they last as long as this server",
                extra={"setting": leases.LEASE_KEY_ENV},
            )
    api.state.sqsjobs_leases = LeaseServer(app, leases.LeaseSealer(lease_key))
    api.state.sqsjobs_watch = watch_tokens = WatchTokens(lease_key)  # read tokens scoped to one job
    api.state.sqsjobs_max_stream_s = max_stream_s
    guard = [Depends(require_principal(credentials, watch_tokens))]
    problems.install(api)
    routers = [
        job_routes.router,
        watch.router,
        lease_routes.router,
        bulk_routes.router,
        priority_routes.router,
        queue_routes.router,
        dlq_routes.router,
        worker_routes.router,
        control_routes.router,
        schedule_routes.router,
        dead_routes.router,
        series_routes.router,
        workflow_routes.router,
        token_routes.router,
        signal_routes.router,
        type_routes.router,
        *extra_routers,
    ]
    if dashboard:
        routers.append(dashboard_router(app))
    for router in routers:
        api.include_router(router, dependencies=guard)
    api.include_router(login_router(credentials, session_s=session_s))  # the sign-in: outside the guard
    api.include_router(token_routes.open_router)  # a token's own URL: its key is the credential
    api.include_router(docs_router(api, guard))
    declare_shared(api)  # every route documents the problems of the layers in front of it
    # Outermost last: the browser guard refuses before the body is read, then the body limit, then
    # the session the routes read.
    api.add_middleware(
        SessionMiddleware,
        secret_key=credentials.session_secret() if credentials else secrets.token_hex(32),
        session_cookie=SESSION_COOKIE,
        max_age=int(session_s),
        same_site="strict",
        https_only=secure_cookies,
    )
    api.add_middleware(BodyLimit, max_bytes=max_body_bytes)
    if allowed_hosts is None and not credentials:
        allowed_hosts = loopback_hosts()
    api.add_middleware(BrowserGuard, session_cookie=SESSION_COOKIE, allowed_hosts=allowed_hosts)
    return api


def route_summary(api: FastAPI) -> list[tuple[str, str]]:
    """``(method, path)`` of every documented route: what docs/api.md must show a curl example for."""
    schema: dict[str, Any] = api.openapi()
    return sorted((m.upper(), p) for p, ops in schema["paths"].items() for m in ops)
