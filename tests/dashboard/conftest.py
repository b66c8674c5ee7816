"""The dashboard's test harness: the HTTP API's app (``create_app``), served by uvicorn on 127.0.0.1.

The pages are reached over real HTTP, as a browser reaches them, behind the API's token when one is
given (a browser signs in at ``/ui/login``).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from sqsjobs import App, JobStatus
from tests.apps import dashboard_app
from tests.integration.helpers import worker_env

APP = "tests.apps.dashboard_app:app"
#: A handler error that is markup: the dashboard must show it as text, and no script may run.
XSS = "<img src=x onerror=\"document.title='pwned'\"><script>document.title='pwned'</script>"


class Served:
    """A uvicorn server on a free loopback port, in a thread of the test process."""

    def __init__(self, app: App, *, token: str | None = None, **options: float) -> None:
        import uvicorn

        from sqsjobs.api.dashboard import dashboard_router
        from sqsjobs.api.http_app import create_app

        # The dashboard with the test's refresh pace, in place of the default one create_app mounts.
        api = create_app(app, token=token, dashboard=False, extra_routers=[dashboard_router(app, **options)])
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        config = uvicorn.Config(api, log_level="warning", lifespan="off", ws="none", http="h11")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True
        )

    def __enter__(self) -> Served:
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            assert time.monotonic() < deadline, "the dashboard server did not start"
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(10)
        self._sock.close()


#: A directory where the page tests save a screenshot of each page (``make dashboard-screenshot``
#: writes docs/dashboard-*.png); read at import, as the suite scrubs SQSJOBS_* from each test's env.
SCREENSHOTS = os.environ.get("SQSJOBS_DASHBOARD_SCREENSHOTS")


def screenshot(driver, name: str) -> None:
    """Save the whole page as ``<SCREENSHOTS>/dashboard-<name>.png`` when SCREENSHOTS is set."""
    if not SCREENSHOTS:
        return
    Path(SCREENSHOTS).mkdir(parents=True, exist_ok=True)
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1400, height + 200)
    driver.save_screenshot(f"{SCREENSHOTS}/dashboard-{name}.png")
    driver.set_window_size(1400, 1000)


def wait_until(condition: Callable[[], object], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {timeout_s} s"
        time.sleep(0.1)


def start_worker(app: App) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "sqsjobs", "worker", "--app", APP, "--concurrency", "2"],
        env=worker_env(app),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def stop_worker(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


@pytest.fixture
def dash_app(make_app: Callable[..., App]) -> Callable[[str], App]:
    """An App with the dashboard test's handlers on an endpoint, provisioned."""

    def make(endpoint: str) -> App:
        app = make_app(endpoint)
        dashboard_app.register(app)
        app.provision()
        return app

    return make


def kill_jobs(app: App, marker: Path, n: int) -> list[str]:
    """Enqueue ``n`` fragile jobs while ``marker`` exists and wait until a running worker killed them."""
    ids = [app.enqueue("fragile", {"marker": str(marker)}) for _ in range(n)]
    wait_until(lambda: all(app.get(i).status is JobStatus.DEAD for i in ids), 60, "jobs dead")
    return ids


def click(driver, element_id: str) -> bool:
    """Click the element with ``element_id``: False while the page has none (or replaced it meanwhile)."""
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.common.by import By

    try:
        driver.find_element(By.ID, element_id).click()
    except (NoSuchElementException, StaleElementReferenceException):
        return False
    return True
