"""The token: ``Authorization: Bearer <token>``, or the dashboard's cookie, compared in constant time.

One dependency guards every route of the API, the OpenAPI document, the interactive docs, the
dashboard and every router added with ``create_app(extra_routers=...)``. Without a configured token
it checks nothing: then ``sqsjobs api`` listens on a loopback address only (``sqsjobs.cli.api``),
and in AWS the API Gateway in front of the function authorises each request with IAM (infra/).

A browser cannot add a header to the links, forms and refreshes of the dashboard, so ``/ui/login``
takes the same token once and sets it as a cookie: ``HttpOnly`` (no script reads it) and
``SameSite=Strict`` (no other site's page can make the browser send it, so a forged cross-site form
carries no credentials; the dashboard also refuses cross-origin POSTs).
"""

from __future__ import annotations

import hmac
from typing import TYPE_CHECKING, Annotated
from urllib.parse import parse_qs

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

#: Environment variable the CLI and the Lambda handler read the token from.
TOKEN_ENV = "SQSJOBS_API_TOKEN"
_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="sqsjobs"'}
# auto_error=False: a missing header is answered here, as a problem body, not by FastAPI's 403.
_bearer = HTTPBearer(auto_error=False, description="The token given to `sqsjobs api` (SQSJOBS_API_TOKEN)")


def require_token(token: str | None) -> Callable[..., Awaitable[None]]:
    """The dependency that admits a request carrying ``token``; with ``None``, every request.

    The comparison is ``hmac.compare_digest`` on the UTF-8 bytes, so how long it takes does not tell
    how much of a guess was right. Refused requests get 401 with a ``WWW-Authenticate`` challenge.
    """
    if token is None:

        async def open_access() -> None:
            return None

        return open_access
    if not token.strip():
        raise ValueError("the API token is empty; give a real token or none")
    expected = token.encode()

    async def bearer(
        request: Request,
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    ) -> None:
        given = credentials.credentials if credentials is not None else request.cookies.get(COOKIE)
        if given is None:
            raise HTTPException(
                401,
                "send Authorization: Bearer <token> (in a browser: sign in at /ui/login)",
                headers=_CHALLENGE,
            )
        if not hmac.compare_digest(given.encode(), expected):
            raise HTTPException(401, "the token is not the one configured", headers=_CHALLENGE)

    return bearer


def login_router(token: str | None) -> APIRouter:
    """``GET``/``POST /ui/login``: the dashboard's sign-in, the only routes outside the guard."""
    router = APIRouter(include_in_schema=False)

    @router.get("/ui/login")
    async def form() -> HTMLResponse:
        return HTMLResponse(_LOGIN_PAGE.format(note=""))

    @router.post("/ui/login")
    async def sign_in(request: Request) -> Response:
        body = (await request.body()).decode("utf-8", "replace")
        given = (parse_qs(body).get("token") or [""])[0]
        if token is not None and not hmac.compare_digest(given.encode(), token.encode()):
            return HTMLResponse(_LOGIN_PAGE.format(note="<p class=error>That is not the token.</p>"), 401)
        done = RedirectResponse("/", status_code=303)
        if token is not None:
            done.set_cookie(
                COOKIE, given, httponly=True, samesite="strict", secure=request.url.scheme == "https"
            )
        return done

    return router


#: The dashboard's cookie: the token, set by ``POST /ui/login``.
COOKIE = "sqsjobs_token"
_LOGIN_PAGE = """<!doctype html><html lang=en><head><meta charset=utf-8><title>sign in · sqsjobs</title>
</head><body><main><h1>sqsjobs</h1>{note}
<form method=post action="/ui/login"><label>API token <input type=password name=token autofocus></label>
<button type=submit>Sign in</button></form></main></body></html>"""
