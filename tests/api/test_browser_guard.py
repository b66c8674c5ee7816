"""A hostile page, a viewer, a stolen or stale cookie: the API and console as a real ``sqsjobs api`` process.

Every state-changing route is taken from the application itself (the OpenAPI document's routes and
the console's), so a route added later is attacked too. Each attack is a request a browser would
send for a page on another origin: a form post carrying the operator's session cookie, with the
``Origin`` and ``Sec-Fetch-Site`` headers the browser writes itself.
"""

from __future__ import annotations

import base64
import json
import re
import time

import httpx
import itsdangerous
import pytest

from sqsjobs import JobStatus
from sqsjobs.api import token_routes
from sqsjobs.api.auth import SESSION_COOKIE
from sqsjobs.api.http_app import create_app
from sqsjobs.api.principals import ApiToken, Role, Tokens
from sqsjobs.api.security import UNSAFE_METHODS
from tests.api.helpers import api_process, assert_problem, client, flat_routes
from tests.cli.conftest import World, populate

pytestmark = pytest.mark.slow

OPERATOR = ApiToken(name="olga", role=Role.OPERATOR, token="olga-operator-token-0123456789")
VIEWER = ApiToken(name="vera", role=Role.VIEWER, token="vera-viewer-token-0123456789")
TOKENS_JSON = json.dumps([t.model_dump(mode="json") for t in (OPERATOR, VIEWER)])

ENQUEUE = {"type": "orders.ok", "payload": {"order_id": "from-a-script"}, "delay": 600}
#: What a browser sends for a page of another origin: the headers it writes itself.
ATTACKS = {
    "a page on another port of the same host": {
        "Origin": "http://127.0.0.1:1",
        "Sec-Fetch-Site": "same-site",
    },
    "a page on another site": {"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"},
    "a sandboxed page": {"Origin": "null", "Sec-Fetch-Site": "cross-site"},
    "an older browser (Origin only)": {"Origin": "https://evil.example"},
}


@pytest.fixture(scope="module")
def world(ministack_url) -> World:
    from tests.cli.conftest import fake_aws_env

    with fake_aws_env():
        made = populate(ministack_url)
    yield made
    made.app.close()


def _routes(world: World) -> list[tuple[str, str]]:
    """``(method, path template)`` of every route the application serves, console included."""

    api = create_app(world.app, tokens=[OPERATOR])
    return sorted(
        {
            (m, r.path)
            for r in flat_routes(api.routes)
            for m in (getattr(r, "methods", None) or ())
            if m != "HEAD"
        }
    )


def _concrete(world: World, method: str, template: str) -> str:
    """A path that would act on the world: a dead job to retry, a waiting one to cancel, a real type."""
    job = world.waiting if method == "DELETE" else world.dead_perm
    path = template.replace("{job_id}", job).replace("{job_type}", "orders.ok")
    return re.sub(r"\{[^}]+\}", "x", path)


def unsafe_routes(world: World) -> list[tuple[str, str]]:
    found = [(m, _concrete(world, m, p)) for m, p in _routes(world) if m in UNSAFE_METHODS]
    # the enumeration sees the JSON routes, the console's forms and the sign-in alike
    assert ("POST", f"/jobs/{world.dead_perm}/retry") in found and ("POST", "/ui/replay") in found
    assert ("DELETE", f"/jobs/{world.waiting}") in found and ("POST", "/ui/login") in found
    return found


def sign_in(url: str, token: str) -> str:
    """The session cookie a browser gets from the console's sign-in form."""
    with httpx.Client(base_url=url, trust_env=False, verify=False) as browser:
        signed = browser.post("/ui/login", data={"token": token}, headers={"Origin": url})
        assert signed.status_code == 303, signed.text
        return str(signed.cookies[SESSION_COOKIE])


def nothing_changed(world: World) -> None:
    """The dead job the retries named is dead, the waiting one the cancels named waits."""
    assert world.app.get(world.dead_perm).status is JobStatus.DEAD
    assert world.app.get(world.waiting).status is JobStatus.QUEUED


def test_a_cross_origin_form_with_the_session_cookie_changes_nothing_on_any_route(world, tmp_path):
    with api_process(world.app, tmp_path / "api.log", SQSJOBS_API_TOKENS=TOKENS_JSON) as url:
        cookie = sign_in(url, OPERATOR.token)
        routes = unsafe_routes(world)
        with httpx.Client(
            base_url=url, trust_env=False, verify=False, cookies={SESSION_COOKIE: cookie}
        ) as browser:
            # GIVEN the cookie admits the browser (a GET from the console's own page)
            assert browser.get("/workers").status_code == 200
            for method, path in routes:
                # WHEN a page elsewhere makes the browser send the form, in each way a browser would
                for attack, headers in [*ATTACKS.items(), ("no proof of origin", {})]:
                    response = browser.request(method, path, headers=headers, data={"reason": "x"})
                    # THEN it is refused before any route runs
                    problem = assert_problem(response, 403, None)
                    assert problem["type"].endswith(":cross-origin"), (method, path, attack, problem)
            # ... and nothing changed
            nothing_changed(world)
            # WHEN the console's own page sends the same request, THEN it acts (the cookie is good)
            own = browser.post(f"/jobs/{world.dead_value[1]}/retry", headers={"Origin": url})
            assert own.status_code == 200, own.text
            assert world.app.get(world.dead_value[1]).status is JobStatus.QUEUED
        # AND a script with the bearer header works from anywhere (a page cannot forge the header)
        with client(url, OPERATOR.token) as script:
            enqueued = script.post("/jobs", json=ENQUEUE, headers=ATTACKS["a page on another site"])
            assert enqueued.status_code == 202, enqueued.text


def test_without_a_token_a_page_elsewhere_changes_nothing_and_a_rebound_name_is_refused(world, tmp_path):
    with (
        api_process(world.app, tmp_path / "api.log") as url,
        httpx.Client(base_url=url, trust_env=False, verify=False) as browser,
    ):
        for method, path in unsafe_routes(world):
            for attack, headers in ATTACKS.items():
                response = browser.request(method, path, headers=headers, data={"reason": "x"})
                problem = assert_problem(response, 403, None)
                assert problem["type"].endswith(":cross-origin"), (method, path, attack, problem)
        nothing_changed(world)
        # WHEN a page whose name was re-pointed at 127.0.0.1 asks (DNS rebinding): the Host is its name
        port = url.rsplit(":", 1)[1]
        for name in (f"evil.example:{port}", "evil.example", f"127.0.0.1.nip.io:{port}"):
            refused = browser.get("/jobs", headers={"Host": name})
            assert assert_problem(refused, 400, None)["type"].endswith(":bad-host")
            refused = browser.post("/types/orders.ok/pause", headers={"Host": name})
            assert refused.status_code == 400
        nothing_changed(world)
        # AND curl on the developer's machine still works (no Origin, a loopback Host)
        assert browser.get("/jobs", headers={"Host": f"localhost:{port}"}).status_code == 200
        assert browser.post("/jobs", json=ENQUEUE).status_code == 202


def test_a_viewer_reads_everything_and_changes_nothing_and_the_audit_names_each_operator(world, tmp_path):
    log = tmp_path / "api.log"
    with api_process(world.app, log, SQSJOBS_API_TOKENS=TOKENS_JSON, SQSJOBS_LOG_LEVEL="INFO") as url:
        with client(url, VIEWER.token) as viewer:
            # GIVEN a viewer token: every page and listing answers (no 401, no 403)
            for method, path in _routes(world):
                if method == "GET":
                    answer = viewer.get(_concrete(world, method, path))
                    assert answer.status_code not in (401, 403, 500), (path, answer.text)
            # WHEN it asks for any change: refused, saying why
            # (outside the guard: signing in and out change no job; a token's own URL answers to
            # its key, which no reader sees, not to a role)
            outside = {"/ui/login", "/ui/logout"} | {
                _concrete(world, "POST", r.path) for r in token_routes.open_router.routes
            }
            for method, path in unsafe_routes(world):
                if path in outside:
                    continue
                problem = assert_problem(viewer.request(method, path, json={}), 403, None)
                assert problem["type"].endswith(":forbidden") and "vera" in problem["detail"], problem
            nothing_changed(world)
        # WHEN the operator retries a dead job and pauses a type
        with client(url, OPERATOR.token) as operator:
            assert operator.post(f"/jobs/{world.dead_value[0]}/retry").status_code == 200
            assert operator.post("/types/orders.ok/pause", json={"reason": "audit"}).status_code == 422
            assert operator.post("/workers/w-none/drain").status_code == 404
            assert operator.delete(f"/jobs/{world.ok[0]}").status_code == 409
            record = operator.get(f"/jobs/{world.dead_value[0]}").json()
    # THEN the job's own audit entry and the operator-action lines name the token
    [entry] = [e for e in record["audit"] if e.get("action") == "retry"]
    assert entry["by"] == "olga@127.0.0.1", entry
    lines = [json.loads(x) for x in log.read_text().splitlines() if '"operator action"' in x]
    assert [(e["action"], e["by"]) for e in lines] == [("retry_job", "olga@127.0.0.1")]  # refusals: none


def _session(tokens: Tokens, token: ApiToken, *, expires: float, signed_at: float | None = None) -> str:
    """A session cookie as the server would sign it (to forge an expired one, not a new capability)."""
    data = base64.b64encode(
        json.dumps({"name": token.name, "fp": token.fingerprint, "exp": expires}).encode()
    )
    signer = itsdangerous.TimestampSigner(tokens.session_secret())
    if signed_at is None:
        return signer.sign(data).decode()

    class Then(itsdangerous.TimestampSigner):
        def get_timestamp(self) -> int:
            return int(signed_at)

    return Then(tokens.session_secret()).sign(data).decode()


def test_a_session_expires_a_tampered_or_stale_cookie_is_refused_and_sign_out_ends_it(world, tmp_path):
    tokens = Tokens([OPERATOR, VIEWER])
    with api_process(world.app, tmp_path / "api.log", SQSJOBS_API_TOKENS=TOKENS_JSON) as url:
        cookie = sign_in(url, OPERATOR.token)

        def status(value: str) -> int:
            with httpx.Client(
                base_url=url, trust_env=False, verify=False, cookies={SESSION_COOKIE: value}
            ) as browser:
                return browser.get("/workers").status_code

        # GIVEN a fresh session admits the browser, and so does one signed the same way by the test
        assert status(cookie) == 200
        assert status(_session(tokens, OPERATOR, expires=time.time() + 60)) == 200
        # WHEN the cookie is tampered with (its name changed to the viewer's, or a byte flipped)
        payload, _, signature = cookie.partition(".")
        claims = json.loads(base64.b64decode(payload))
        swapped = base64.b64encode(json.dumps({**claims, "name": "vera"}).encode()).decode()
        assert status(f"{swapped}.{signature}") == 401
        assert status(cookie[:-2] + ("A" if cookie[-2] != "A" else "B") + cookie[-1]) == 401
        # ... or its expiry has passed, or it was signed longer ago than a session lasts
        assert status(_session(tokens, OPERATOR, expires=time.time() - 1)) == 401
        assert (
            status(_session(tokens, OPERATOR, expires=time.time() + 60, signed_at=time.time() - 9 * 3600))
            == 401
        )
        # ... or it names a token that is not configured with that secret
        renamed = ApiToken(name="olga", role=Role.OPERATOR, token="another-secret-for-olga-000")
        assert status(_session(tokens, renamed, expires=time.time() + 60)) == 401
        # THEN each is refused; and signing out clears the browser's cookie
        with httpx.Client(base_url=url, trust_env=False, verify=False) as browser:
            browser.post("/ui/login", data={"token": OPERATOR.token}, headers={"Origin": url})
            assert browser.get("/workers").status_code == 200
            out = browser.post("/ui/logout", headers={"Origin": url})
            assert out.status_code == 303 and "expires=Thu, 01 Jan 1970" in out.headers["set-cookie"]
            assert browser.get("/workers").status_code == 401
    # AND a changed token ends every session started with the old one
    changed = json.dumps([{**json.loads(TOKENS_JSON)[0], "token": "olga-rotated-token-0123456789"}])
    with api_process(world.app, tmp_path / "api2.log", SQSJOBS_API_TOKENS=changed) as url:
        assert (
            httpx.get(
                f"{url}/workers", cookies={SESSION_COOKIE: cookie}, trust_env=False, verify=False
            ).status_code
            == 401
        )


def test_a_session_lasts_session_s_from_sign_in(world):
    from tests.api.helpers import serving

    with serving(world.app, token=OPERATOR.token, session_s=2) as url:
        cookie = sign_in(url, OPERATOR.token)
        with httpx.Client(
            base_url=url, trust_env=False, verify=False, cookies={SESSION_COOKIE: cookie}
        ) as browser:
            assert browser.get("/workers").status_code == 200
            time.sleep(3)
            assert browser.get("/workers").status_code == 401


HTML_HEADERS = ("content-security-policy", "x-frame-options", "x-content-type-options", "referrer-policy")


def test_every_html_page_carries_the_security_headers_and_loads_nothing_from_elsewhere(world, tmp_path):
    with api_process(world.app, tmp_path / "api.log", SQSJOBS_API_TOKENS=TOKENS_JSON) as url:
        pages = [_concrete(world, m, p) for m, p in _routes(world) if m == "GET"]
        with client(url, VIEWER.token) as viewer:
            checked = 0
            for path in pages:
                answer = viewer.get(path)
                assert answer.headers["x-content-type-options"] == "nosniff", path
                if not answer.headers.get("content-type", "").startswith("text/html"):
                    continue
                checked += 1
                missing = [h for h in HTML_HEADERS if h not in answer.headers]
                assert not missing, (path, missing)
                policy = answer.headers["content-security-policy"]
                script_src = re.search(r"script-src ([^;]*)", policy).group(1)
                assert script_src.strip() == "'self'", (path, policy)
                assert "frame-ancestors 'none'" in policy and answer.headers["x-frame-options"] == "DENY"
                # nothing the page loads comes from another origin
                outside = re.findall(r"""(?:src|href)=["']?((?:https?:)?//[^"' >]+)""", answer.text)
                assert not outside, (path, outside)
                assert "<script>" not in answer.text, path  # no inline script
            assert checked >= 10 and "/docs" in pages and "/redoc" in pages
        # the sign-in page too, before any token
        login = httpx.get(f"{url}/ui/login", trust_env=False, verify=False)
        assert "frame-ancestors 'none'" in login.headers["content-security-policy"]
