"""Authentication and roles: ``Authorization: Bearer <token>``, or the console's signed session.

One dependency (``require_principal``) guards every route of the API, the OpenAPI document, the
interactive docs, the console and every router added with ``create_app(extra_routers=...)``: it
finds the caller (``sqsjobs.api.principals.Principal``), refuses a viewer's request that would
change something (403), and leaves the caller on ``request.state.principal`` for the audit trail.
Without a configured token it admits everyone as ``local``: then ``sqsjobs api`` listens on a
loopback address only and answers only to loopback host names (``sqsjobs.api.security``), and in
AWS the API Gateway in front of the function authorises each request with IAM (infra/).

A browser cannot add a header to the console's links, forms and refreshes, so ``/ui/login`` takes
a token once and starts a *session*: Starlette's ``SessionMiddleware`` keeps the token's name, its
fingerprint and an expiry in a cookie signed with itsdangerous (``HttpOnly``, ``SameSite=Strict``),
never the token itself. The session ends at its expiry (``session_s``), at sign-out, or when the
token it was started with is changed or removed. Cross-origin requests that would ride on that
cookie are refused before any route runs (``sqsjobs.api.security``).
"""

from __future__ import annotations

import contextvars
import time
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import parse_qs

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from sqsjobs.api.principals import OPEN_ACCESS, Principal, Role, Tokens
from sqsjobs.api.watch import WATCH_PARAM, scope_paths

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from sqsjobs.api.watch import WatchTokens

#: The console's session cookie (signed; holds a token's name, never the token).
SESSION_COOKIE = "sqsjobs_session"
#: How long a console session lasts from sign-in unless told otherwise: a working day.
DEFAULT_SESSION_S = 8 * 3600
_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="sqsjobs"'}
# auto_error=False: a missing header is answered here, as a problem body, not by FastAPI's 403.
_bearer = HTTPBearer(
    auto_error=False, description="A token of SQSJOBS_API_TOKENS (or SQSJOBS_API_TOKEN), with its role"
)
#: The caller of the request being served, for the console's chrome (who is signed in).
current_principal: contextvars.ContextVar[Principal | None] = contextvars.ContextVar(
    "sqsjobs_principal", default=None
)


def require_principal(
    tokens: Tokens, watch: WatchTokens | None = None
) -> Callable[..., Awaitable[Principal]]:
    """The dependency that finds each request's caller and checks its role; empty ``tokens``: everyone.

    Refused requests get 401 with a ``WWW-Authenticate`` challenge (no or a wrong credential), or 403
    (a viewer asking to change something, a watch token reading anything but its job). ``watch``
    reads ``?watch=`` tokens (``sqsjobs.api.watch``), which a browser's ``EventSource`` can send.
    """
    if not tokens:

        async def open_access(request: Request) -> Principal:
            return _admit(request, OPEN_ACCESS)

        return open_access

    async def authenticated(
        request: Request,
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    ) -> Principal:
        if credentials is not None:
            token = tokens.match(credentials.credentials)
            if token is None:
                raise HTTPException(401, "the token is not one of those configured", headers=_CHALLENGE)
            return _admit(request, Principal(token.name, token.role))
        principal = session_principal(request, tokens) or watch_principal(request, watch)
        if principal is None:
            raise HTTPException(
                401,
                "send Authorization: Bearer <token> (in a browser: sign in at /ui/login)",
                headers=_CHALLENGE,
            )
        return _admit(request, principal)

    return authenticated


def watch_principal(request: Request, watch: WatchTokens | None) -> Principal | None:
    """The caller of a request that carries a valid watch token, or None; 403 when it reads another job."""
    given = request.query_params.get(WATCH_PARAM)
    if watch is None or not given:
        return None
    job = watch.job_of(given, time.time())
    if job is None:
        raise HTTPException(
            401, "the watch token was altered, or has expired: ask for another", headers=_CHALLENGE
        )
    if request.method not in ("GET", "HEAD") or request.url.path not in scope_paths(job):
        raise HTTPException(403, f"a watch token reads its own job only: GET /jobs/{job} and its events")
    request.state.watched = job  # BrowserGuard lets any origin read the answer: no cookie rides on it
    return Principal(f"watch:{job}", Role.VIEWER, job=job)


def _admit(request: Request, principal: Principal) -> Principal:
    if not principal.may(request.method):
        raise HTTPException(
            403,
            f"token {principal.name!r} is a {principal.role} token: it may read (GET) but not "
            f"{request.method}; ask for an operator token to change anything",
        )
    request.state.principal = principal
    current_principal.set(principal)
    return principal


def session_principal(request: Request, tokens: Tokens) -> Principal | None:
    """The caller of a signed-in console session, or None (none, expired, or its token changed)."""
    session: dict[str, Any] = request.session
    name, fingerprint, expires = session.get("name"), session.get("fp"), session.get("exp")
    if not isinstance(name, str) or not isinstance(fingerprint, str) or not isinstance(expires, int | float):
        return None
    if expires <= time.time():
        return None
    token = tokens.named(name, fingerprint)
    return None if token is None else Principal(token.name, token.role)


def principal_of(request: Request) -> Principal:
    """Who made ``request``, as the guard found it (``local`` for an open API)."""
    found: Principal | None = getattr(request.state, "principal", None)
    return found if found is not None else OPEN_ACCESS


def login_router(tokens: Tokens, *, session_s: float = DEFAULT_SESSION_S) -> APIRouter:
    """``/ui/login`` (the console's sign-in, outside the guard) and ``POST /ui/logout``."""
    router = APIRouter(include_in_schema=False)

    @router.get("/ui/login")
    async def form() -> HTMLResponse:
        return HTMLResponse(_LOGIN_PAGE.format(note=""))

    @router.post("/ui/login")
    async def sign_in(request: Request) -> Response:
        body = (await request.body()).decode("utf-8", "replace")
        given = (parse_qs(body).get("token") or [""])[0].strip()
        request.session.clear()
        if tokens:
            token = tokens.match(given)
            if token is None:
                return HTMLResponse(_LOGIN_PAGE.format(note="<p class=error>That is not a token.</p>"), 401)
            request.session.update(
                {"name": token.name, "fp": token.fingerprint, "exp": int(time.time() + session_s)}
            )
        return RedirectResponse("/", status_code=303)

    @router.post("/ui/logout")
    async def sign_out(request: Request) -> Response:
        request.session.clear()
        return RedirectResponse("/ui/login", status_code=303)

    return router


_LOGIN_PAGE = """<!doctype html><html lang=en><head><meta charset=utf-8><title>sign in · sqsjobs</title>
</head><body><main><h1>sqsjobs</h1>{note}
<form method=post action="/ui/login"><label>API token <input type=password name=token autofocus></label>
<button type=submit>Sign in</button></form></main></body></html>"""

__all__ = ["SESSION_COOKIE", "Role", "login_router", "principal_of", "require_principal"]
