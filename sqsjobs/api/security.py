"""What a browser may do to the API: one ASGI middleware in front of every route.

A browser carries the console's session cookie to this server whatever page starts the request,
and ``SameSite=Strict`` does not stop a page of the *same site* (another port on the operator's
host, a sibling subdomain) from posting a form here. With no token configured there is no
credential at all, and any page the developer visits could post to ``http://127.0.0.1:<port>``.
So, for every request, before any route runs (a route added later is covered too):

1. **Host** (only when no token is configured): the ``Host`` header must name this server as it was
   bound (loopback names, or ``allowed_hosts``). A page on ``evil.example`` whose name was re-pointed
   at 127.0.0.1 (DNS rebinding) would otherwise be same-origin with the API and read its answers.
2. **Cross-origin writes** (POST, PUT, PATCH, DELETE): a request carrying ``Authorization`` is
   exempt (a page cannot make a browser add it to a cross-origin request without a CORS preflight,
   which this server never grants). Any other one is refused with 403 when the browser says it
   comes from elsewhere: ``Sec-Fetch-Site`` ``cross-site`` or ``same-site``, or an ``Origin`` that is
   not this server's (``null`` included). A request that carries the session cookie must moreover
   *prove* it comes from the console's own pages: ``Sec-Fetch-Site: same-origin`` or a matching
   ``Origin`` (every browser that honours ``SameSite`` sends one of them on a POST).

   Why Fetch Metadata and ``Origin`` rather than a per-session CSRF token: the browser writes those
   headers itself and a page cannot forge them, they cover JSON routes, forms and the docs' "try it
   out" alike with nothing to thread through every form and script, and they need no state.

3. **Headers of every answer**: ``X-Content-Type-Options: nosniff`` and a ``Referrer-Policy``; an
   HTML answer also gets a Content-Security-Policy (no inline script, nothing from another origin,
   ``frame-ancestors 'none'``) and ``X-Frame-Options: DENY`` unless its route set its own policy
   (the docs pages loosen styles for Swagger UI and ReDoc, ``sqsjobs.api.docs_pages``). An answer
   to a request a watch token authenticated (``sqsjobs.api.watch``: one job, read only, no cookie)
   may be read by any origin (``Access-Control-Allow-Origin: *``): a customer's page follows its job.
"""

from __future__ import annotations

import ipaddress
import json
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from starlette.requests import cookie_parser

from sqsjobs.api.problems import MEDIA_TYPE, PROBLEMS

if TYPE_CHECKING:
    from collections.abc import Iterable

    from starlette.types import ASGIApp, Message, Receive, Scope, Send

UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
#: The policy of every HTML page: scripts and styles from this server only, no framing.
PAGE_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
#: Headers every answer carries.
ALWAYS = {"x-content-type-options": "nosniff", "referrer-policy": "same-origin"}
#: Headers every HTML answer carries, unless its route set them.
HTML_ONLY = {"content-security-policy": PAGE_POLICY, "x-frame-options": "DENY"}


def loopback_hosts(bound: str | None = None) -> tuple[str, ...]:
    """The host names an open (tokenless) server answers to: loopback, and the address it is bound to."""
    names = ["localhost", "127.0.0.1", "::1"]
    if bound and bound not in names and bound not in ("0.0.0.0", "::"):
        names.append(bound)
    return tuple(names)


def _hostname(host_header: str) -> str:
    """``example.com`` of ``example.com:8000``, ``::1`` of ``[::1]:8000``, lower-cased."""
    parsed = urlsplit(f"//{host_header}")
    try:
        return (parsed.hostname or "").lower()
    except ValueError:
        return ""


def _is_allowed_host(hostname: str, allowed: tuple[str, ...]) -> bool:
    """True for a listed name, and for any loopback address (no page's name resolves to one by accident)."""
    if "*" in allowed or hostname in allowed:
        return True
    try:
        return ipaddress.ip_address(hostname).is_loopback
    except ValueError:
        return False


class BrowserGuard:
    """The middleware: Host check (open servers), cross-origin writes refused, security headers."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        session_cookie: str,
        allowed_hosts: Iterable[str] | None,
    ) -> None:
        """``allowed_hosts``: host names the server answers to; None: any (a token is configured)."""
        self.app = app
        self.session_cookie = session_cookie
        self.allowed_hosts = None if allowed_hosts is None else tuple(h.lower() for h in allowed_hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The ASGI entry: refuse, or pass the request on and add the headers to its answer."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        refusal = self._refusal(scope, headers)
        if refusal is not None:
            await _problem(send, scope, *refusal)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = _secured(list(message.get("headers", [])))
                if scope.get("state", {}).get("watched"):  # read with a watch token: no cookie rides on it
                    message["headers"].append((b"access-control-allow-origin", b"*"))
            await send(message)

        await self.app(scope, receive, send_with_headers)

    def _refusal(self, scope: Scope, headers: dict[str, str]) -> tuple[str, int, str] | None:
        if self.allowed_hosts is not None:
            hostname = _hostname(headers.get("host", ""))
            if not _is_allowed_host(hostname, self.allowed_hosts):
                return (
                    "bad-host",
                    400,
                    f"this server answers to {', '.join(self.allowed_hosts)} only, not {hostname or 'no host'!r}: "
                    "with no token configured it refuses other names (a page that re-points its own name "
                    "at this address must not reach it); use one of those names, or pass --allowed-host",
                )
        if scope["method"] not in UNSAFE_METHODS or "authorization" in headers:
            return None
        fetch_site = headers.get("sec-fetch-site")
        origin = headers.get("origin")
        own = origin is not None and urlsplit(origin).netloc.lower() == headers.get("host", "").lower()
        foreign = fetch_site in ("cross-site", "same-site") or (origin is not None and not own)
        with_cookie = self.session_cookie in cookie_parser(headers.get("cookie", ""))
        proven = fetch_site == "same-origin" or own
        if foreign or (with_cookie and not proven):
            return (
                "cross-origin",
                403,
                "a request that changes something must come from this server's own pages "
                f"(Origin {origin or 'absent'}, Sec-Fetch-Site {fetch_site or 'absent'}); "
                "a script or another service sends Authorization: Bearer <token> instead",
            )
        return None


def _headers(scope: Scope) -> dict[str, str]:
    """The request's headers by lower-case name (the last of repeated ones: none here repeat legitimately)."""
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", ())}


def _secured(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    present = {k.lower() for k, _ in headers}
    content_type = next((v for k, v in headers if k.lower() == b"content-type"), b"")
    wanted = dict(ALWAYS)
    if content_type.startswith(b"text/html"):
        wanted.update(HTML_ONLY)
    for name, value in wanted.items():
        if name.encode() not in present:
            headers.append((name.encode(), value.encode()))
    return headers


async def _problem(send: Send, scope: Scope, slug: str, status: int, detail: str) -> None:
    kind = PROBLEMS[slug]
    body = json.dumps(
        {
            "type": kind.type,
            "title": kind.title,
            "status": status,
            "detail": detail,
            "instance": scope.get("path", ""),
        }
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": _secured(
                [(b"content-type", MEDIA_TYPE.encode()), (b"content-length", str(len(body)).encode())]
            ),
        }
    )
    await send({"type": "http.response.body", "body": body})
