"""The bearer token: missing, wrong and right; what is guarded; and ``sqsjobs api``'s refusals and start."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import httpx
import pytest

from sqsjobs import App
from sqsjobs.api import auth, principals, token_routes
from sqsjobs.api.http_app import create_app
from sqsjobs.deploy.rules import OPEN_ROUTES
from tests.api.conftest import TOKEN
from tests.api.helpers import assert_problem, client, flat_routes, serving
from tests.cli.conftest import new_app
from tests.emulators import REPO_ROOT

#: Outside the guard: the console's sign-in and sign-out, and a wait token's own URL, whose key is
#: its credential (tests/integration/test_tokens.py attacks it).
OUTSIDE_GUARD = {"/ui/login", "/ui/logout", *(r.path for r in token_routes.open_router.routes)}
GUARDED = [
    ("GET", "/types"),
    ("POST", "/leases"),
    ("POST", "/leases/heartbeat"),
    ("POST", "/leases/complete"),
    ("POST", "/leases/fail"),
    ("GET", "/jobs"),
    ("POST", "/jobs"),
    ("GET", "/jobs/x"),
    ("GET", "/jobs/x/events"),
    ("GET", "/jobs/x/watch-token"),
    ("DELETE", "/jobs/x"),
    ("POST", "/jobs/x/retry"),
    ("GET", "/queues"),
    ("GET", "/dlq"),
    ("POST", "/dlq/replay"),
    ("GET", "/workers"),
    ("POST", "/types/orders.ok/pause"),
    ("POST", "/types/orders.ok/resume"),
    ("GET", "/limits"),
    ("POST", "/limits/x/breaker/close"),
    ("POST", "/schedules"),
    ("GET", "/schedules"),
    ("GET", "/schedules/x"),
    ("PATCH", "/schedules/x"),
    ("DELETE", "/schedules/x"),
    ("POST", "/schedules/x/pause"),
    ("POST", "/schedules/x/resume"),
    ("POST", "/batches"),
    ("GET", "/batches/x"),
    ("GET", "/batches/x/events"),
    ("POST", "/batches/x/items"),
    ("POST", "/batches/x/seal"),
    ("POST", "/batches/x/cancel"),
    ("POST", "/chains"),
    ("GET", "/chains/x"),
    ("GET", "/chains/x/events"),
    ("POST", "/chains/x/cancel"),
    ("GET", "/dead/groups"),
    ("POST", "/jobs/bulk-cancel"),
    ("POST", "/jobs/priority"),
    ("GET", "/ui/priority"),
    ("POST", "/ui/priority/dry-run"),
    ("POST", "/ui/priority"),
    ("GET", "/series"),
    ("POST", "/workers/x/drain"),
    ("POST", "/ui/workers/x/drain"),
    ("GET", "/ui/charts"),
    ("GET", "/ui/dead"),
    ("GET", "/ui/batches/x"),
    ("GET", "/ui/chains/x"),
    ("POST", "/dead/groups/retry"),
    ("POST", "/tokens/x"),
    ("POST", "/signals"),
    ("GET", "/openapi.json"),
    ("GET", "/docs"),
    ("GET", "/redoc"),
    ("GET", "/docs/static/docs.js"),
    ("GET", "/"),
    ("GET", "/ui/jobs/x"),
    ("GET", "/ui/static/dashboard.js"),
    ("GET", "/ui/jobs"),
    ("POST", "/ui/jobs/x/retry"),
    ("POST", "/ui/replay/dry-run"),
    ("POST", "/ui/replay"),
    ("POST", "/ui/dead/dry-run"),
    ("POST", "/ui/dead/retry"),
    ("GET", "/ui/controls"),
    ("GET", "/ui/schedules"),
    ("POST", "/ui/schedules/orders.ok/pause"),
    ("POST", "/ui/schedules/orders.ok/resume"),
    ("POST", "/ui/schedules/orders.ok/delete"),
    ("POST", "/ui/types/orders.ok/pause"),
    ("POST", "/ui/types/orders.ok/resume"),
    ("POST", "/ui/limits/x/breaker/close"),
    ("POST", "/ui/batches/x/cancel"),
    ("POST", "/ui/chains/x/cancel"),
]


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer wrong"},
        {"Authorization": f"Basic {TOKEN}"},
        {"Authorization": TOKEN},
        {"Authorization": f"Bearer {TOKEN}x"},
        {"Authorization": "Bearer"},
    ],
    ids=["missing", "wrong", "basic scheme", "no scheme", "longer", "empty"],
)
def test_every_route_refuses_a_request_without_the_right_token(served, headers):
    with httpx.Client(base_url=served.url, trust_env=False, verify=False) as anonymous:
        for method, path in GUARDED:
            response = anonymous.request(method, path, headers=headers, json={})
            problem = assert_problem(response, 401, "Authorization")
            assert response.headers["www-authenticate"].startswith("Bearer")
            assert problem["type"].endswith(":unauthorized")


def test_a_browser_signs_in_once_and_its_cookie_is_a_signed_session_not_the_token(served):
    own = {"Origin": served.url}
    with httpx.Client(base_url=served.url, trust_env=False, verify=False) as browser:
        # GIVEN a browser without the token: the dashboard says where to sign in
        assert "sign in at /ui/login" in browser.get("/").text
        assert browser.get("/ui/login").status_code == 200
        # WHEN it signs in with a wrong token: refused, no cookie
        wrong = browser.post("/ui/login", data={"token": "guess"}, headers=own)
        assert wrong.status_code == 401 and auth.SESSION_COOKIE not in wrong.headers.get("set-cookie", "")
        # WHEN it signs in with the token: a cookie no script can read and no other site can send
        signed = browser.post("/ui/login", data={"token": TOKEN}, headers=own)
        assert signed.status_code == 303 and signed.headers["location"] == "/"
        cookie = signed.headers["set-cookie"]
        assert "httponly" in cookie.lower() and "samesite=strict" in cookie.lower()
        # ... which does not carry the token
        assert cookie.startswith(f"{auth.SESSION_COOKIE}=") and TOKEN not in cookie
        # THEN the dashboard and the JSON routes admit it
        assert browser.get("/").status_code == 200
        assert browser.get("/workers").json()["counts"] == {"live": 0, "draining": 0, "silent": 0}
    # ... and a forged cookie (the token itself, as earlier releases set it) is refused
    for name, value in (
        (auth.SESSION_COOKIE, "forged"),
        (auth.SESSION_COOKIE, TOKEN),
        ("sqsjobs_token", TOKEN),
    ):
        with httpx.Client(
            base_url=served.url, trust_env=False, verify=False, cookies={name: value}
        ) as forged:
            assert_problem(forged.get("/jobs"), 401, "Authorization")


def test_the_right_token_is_admitted_and_compared_in_constant_time(served, monkeypatch):
    compared: list[tuple[bytes, bytes]] = []
    real = principals.hmac.compare_digest

    def spy(a, b):
        compared.append((a, b))
        return real(a, b)

    monkeypatch.setattr(principals.hmac, "compare_digest", spy)
    assert served.http.get("/jobs", params={"status": "dead"}).status_code == 200
    assert compared == [(TOKEN.encode(), TOKEN.encode())]


def test_without_a_token_nothing_is_checked_and_extra_routers_share_the_guard(ministack_url):
    from fastapi import APIRouter

    extra = APIRouter()

    @extra.get("/extra")
    async def extra_route() -> dict[str, str]:
        return {"ok": "yes"}

    app = new_app(ministack_url)
    with serving(app, token=None) as url, client(url) as http:
        assert http.get("/queues", params={"counts": "false"}).status_code in (200, 503)  # not provisioned
        assert http.get("/openapi.json").status_code == 200
    with serving(app, token=TOKEN, extra_routers=[extra]) as url:
        with client(url) as anonymous:
            assert_problem(anonymous.get("/extra"), 401, "Authorization")
        with client(url, TOKEN) as http:
            assert http.get("/extra").json() == {"ok": "yes"}
    app.close()


def test_an_empty_token_is_refused_rather_than_taken_as_none():
    with pytest.raises(ValueError, match="empty"):
        principals.Tokens.single("  ")


# ── sqsjobs api ──────────────────────────────────────────────────────────────────────────────
def sqsjobs_api(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "sqsjobs", "api", "--app", "tests.cli.jobs_app:app", *args],
        cwd=REPO_ROOT,
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.slow
@pytest.mark.parametrize("host", ["0.0.0.0", "192.0.2.1", "example.com"])
def test_sqsjobs_api_refuses_a_non_loopback_address_without_a_token(host):
    done = sqsjobs_api("--host", host)
    _out, err = done.communicate(timeout=60)
    assert done.returncode == 2, err
    assert "refusing to listen" in err and "SQSJOBS_API_TOKEN" in err
    assert "Traceback" not in err


@pytest.mark.slow
def test_sqsjobs_api_serves_on_loopback_says_it_has_no_token_and_stops_on_sigterm(ministack_url):
    # GIVEN the CLI app's table, provisioned, and the command on a free port
    app = new_app(ministack_url, "cli-subprocess")
    app.provision()
    proc = sqsjobs_api("--port", "0", "--endpoint-url", ministack_url)
    try:
        url, lines = None, []
        deadline = time.monotonic() + 60
        while url is None and time.monotonic() < deadline:
            line = proc.stderr.readline()  # type: ignore[union-attr]
            lines.append(line)
            found = re.search(r"on (http://127\.0\.0\.1:\d+)", line)
            url = found.group(1) if found else None
        assert url, "".join(lines)
        # THEN it says it has no token, and listens on loopback only
        tail = proc.stderr.readline()  # type: ignore[union-attr]
        assert "no token configured: listening on 127.0.0.1 only" in tail, tail
        # ... and it serves
        with client(url) as http:
            deadline = time.monotonic() + 20
            while True:
                try:
                    r = http.post(
                        "/jobs", json={"type": "orders.ok", "payload": {"order_id": "cli"}, "delay": 60}
                    )
                    break
                except httpx.TransportError:
                    assert time.monotonic() < deadline
                    time.sleep(0.1)
            assert r.status_code == 202, r.text
            assert app.get(r.json()["id"]).type == "orders.ok"
    finally:
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=30)
        app.close()
    # ... and SIGTERM stops it cleanly
    assert proc.returncode == 0, err
    assert "Traceback" not in err


def test_every_route_the_app_serves_is_in_the_guarded_list(served):
    # GIVEN every route of the API with its dashboard, as FastAPI holds them
    from sqsjobs.api.http_app import create_app

    served_routes = {
        (method, re.sub(r"\{[^}]+\}", "x", route.path))
        for route in flat_routes(create_app(served.world.app).routes)
        for method in (getattr(route, "methods", None) or set()) - {"HEAD"}
        if route.path not in OUTSIDE_GUARD
    }
    assert ("POST", "/jobs/priority") in served_routes and ("GET", "/ui/controls") in served_routes
    # THEN each of them is checked by the token test above (a new route cannot skip it)
    listed = {
        (m, p.replace("orders.ok", "x").replace("dashboard.js", "x").replace("docs.js", "x"))
        for m, p in GUARDED
    }
    missing = sorted(served_routes - listed)
    assert not missing, f"add these routes to GUARDED: {missing}"


def test_the_deployed_api_leaves_outside_iam_exactly_the_routes_with_their_own_credential():
    # The construct reads OPEN_ROUTES (infra/sqsjobs_cdk/api.py): a route added to the open router and
    # not there would be unreachable behind IAM; one there and not in the router would be open for nothing.
    served = {(method, route.path) for route in token_routes.open_router.routes for method in route.methods}
    assert served == set(OPEN_ROUTES)


def test_the_document_says_how_the_deployed_api_authenticates_and_which_routes_it_leaves_open():
    # A client generated from the document must learn that API Gateway wants SigV4, and where not
    described = create_app(App("doc-auth"), token=TOKEN).openapi()["info"]["description"]
    assert "Signature Version 4" in described and "execute-api:Invoke" in described
    assert all(f"{method} {path}" in described for method, path in OPEN_ROUTES)
