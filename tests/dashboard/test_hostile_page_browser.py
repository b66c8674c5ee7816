"""A hostile page in a real headless Chromium, against a real ``sqsjobs api`` process with a signed-in console.

The operator signs in to the console, then visits a page served from another port of the same host:
the same *site*, so ``SameSite=Strict`` lets the browser carry the session cookie there (the page
proves it by opening a JSON listing that answers). That page's forms and scripts then try to
retry a dead job and cancel a waiting one through the JSON routes and the console's forms; every
attempt is refused and nothing changes. The docs pages (Swagger UI, ReDoc) and the console's pages
render under their Content-Security-Policy and load nothing from anywhere but the server.
"""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Iterator

import pytest

from sqsjobs import JobStatus
from sqsjobs.api.principals import ApiToken, Role
from tests.api.helpers import api_process
from tests.cli.conftest import World, fake_aws_env, populate
from tests.dashboard.test_browser import browser, wait_for  # noqa: F401 (browser: a fixture)

pytestmark = pytest.mark.slow

OPERATOR = ApiToken(name="olga", role=Role.OPERATOR, token="olga-operator-token-0123456789")
TOKENS = json.dumps([OPERATOR.model_dump(mode="json")])


class EvilSite:
    """Pages on another port of 127.0.0.1, each a form or script aimed at the API."""

    def __init__(self, pages: dict[str, str]) -> None:
        site = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = site.pages.get(self.path, "not here").encode()
                self.send_response(200 if self.path in site.pages else 404)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.pages = pages
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def form_page(action: str, method: str = "post", fields: dict[str, str] | None = None) -> str:
    inputs = "".join(f'<input type=hidden name="{k}" value="{v}">' for k, v in (fields or {}).items())
    return (
        f'<!doctype html><title>win a prize</title><form id=f method={method} action="{action}">{inputs}</form>'
        "<script>document.getElementById('f').submit()</script>"
    )


def script_page(url: str, method: str) -> str:
    """A page whose script sends the request with the cookie (no-cors: it cannot read the answer)."""
    return (
        "<!doctype html><title>loading</title><script>"
        f"fetch('{url}', {{method: '{method}', credentials: 'include', mode: 'no-cors'}})"
        ".then(() => document.title = 'sent', () => document.title = 'sent');</script>"
    )


@pytest.fixture
def world(ministack_url) -> Iterator[World]:
    with fake_aws_env():
        made = populate(ministack_url, extra=True)
    yield made
    made.app.close()


def sign_in(driver, url: str) -> None:
    from selenium.webdriver.common.by import By

    driver.get(f"{url}/ui/login")
    driver.find_element(By.NAME, "token").send_keys(OPERATOR.token)
    driver.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait_for(driver, lambda d: "olga" in d.page_source and "Sign out" in d.page_source, 30, "signed in")


def test_a_page_on_another_port_rides_the_session_and_changes_nothing(world, tmp_path, browser):  # noqa: F811
    dead, waiting = world.dead_perm, world.waiting
    with api_process(world.app, tmp_path / "api.log", SQSJOBS_API_TOKENS=TOKENS) as url:
        evil = EvilSite(
            {
                "/peek": f'<!doctype html><a id=go href="{url}/jobs?status=dead">see</a>',
                "/retry-json": form_page(f"{url}/jobs/{dead}/retry"),
                "/retry-console": form_page(f"{url}/ui/jobs/{dead}/retry"),
                "/replay-console": form_page(f"{url}/ui/replay", fields={"job_id": dead}),
                "/cancel-script": script_page(f"{url}/jobs/{waiting}", "DELETE"),
                "/retry-script": script_page(f"{url}/jobs/{dead}/retry", "POST"),
            }
        )
        try:
            sign_in(browser, url)
            # GIVEN the browser carries the session from the other port's pages: a link opened there answers
            browser.get(f"{evil.url}/peek")
            browser.find_element("id", "go").click()
            wait_for(browser, lambda d: dead in d.page_source, 30, "the listing opened from the other port")
            # WHEN the other port's pages post forms to the JSON routes and the console
            for page in ("/retry-json", "/retry-console", "/replay-console"):
                browser.get(f"{evil.url}{page}")
                wait_for(browser, lambda d: "cross-origin" in d.page_source, 30, f"{page} answered")
            # ... and its scripts send requests with the cookie
            for page in ("/cancel-script", "/retry-script"):
                browser.get(f"{evil.url}{page}")
                wait_for(browser, lambda d: d.title == "sent", 30, f"{page} sent")
            time.sleep(1)  # a request the script sent is answered by now; nothing may have acted
            # THEN nothing changed: the dead job is dead, the waiting job waits
            assert world.app.get(dead).status is JobStatus.DEAD
            assert world.app.get(waiting).status is JobStatus.QUEUED
            # ... while the console's own page still works with the same session
            browser.get(f"{url}/ui/jobs/{dead}")
            browser.find_element("css selector", "form[action$='/retry'] button").click()
            wait_for(browser, lambda d: "Queued again" in d.page_source, 30, "retried from the console")
            assert world.app.get(dead).status is JobStatus.QUEUED
        finally:
            evil.close()


def resources(driver) -> list[str]:
    return list(driver.execute_script("return performance.getEntriesByType('resource').map(e => e.name)"))


def test_the_docs_and_console_pages_render_under_their_policy_from_the_server_alone(world, tmp_path, browser):  # noqa: F811
    from selenium.webdriver.common.by import By

    with api_process(world.app, tmp_path / "api.log", SQSJOBS_API_TOKENS=TOKENS) as url:
        sign_in(browser, url)
        # Swagger UI: the operations are listed (its bundle and our starter ran under the policy)
        browser.get(f"{url}/docs")
        wait_for(browser, lambda d: d.find_elements(By.CSS_SELECTOR, ".opblock-summary"), 60, "Swagger UI")
        loaded = resources(browser)
        assert any(r.endswith("swagger-ui-bundle.js") for r in loaded)
        assert all(r.startswith(url) for r in loaded), loaded
        # ReDoc: the API's title is rendered
        browser.get(f"{url}/redoc")
        wait_for(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#redoc h1"), 60, "ReDoc")
        assert "sqsjobs: cli-subprocess" in browser.find_element(By.CSS_SELECTOR, "#redoc h1").text
        loaded = resources(browser)
        assert all(r.startswith(url) for r in loaded), loaded
        # the console's pages
        for path in (
            "/",
            "/ui/jobs",
            "/ui/dead",
            "/ui/controls",
            "/ui/schedules",
            "/ui/charts",
            f"/ui/jobs/{world.dead_perm}",
        ):
            browser.get(f"{url}{path}")
            wait_for(browser, lambda d: d.find_elements(By.TAG_NAME, "main"), 30, path)
            loaded = resources(browser)
            assert loaded and all(r.startswith(url) for r in loaded), (path, loaded)
