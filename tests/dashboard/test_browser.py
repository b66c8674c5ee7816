"""The dashboard in a real headless Chromium, against a real worker on the embedded emulator.

The operator's path: a job dies (its handler refuses while a marker file exists, with markup as
its error), the overview shows it with its reason, the cause is fixed (the marker removed), a dry
run lists the job, the confirmation replays it, and the job's page, refreshing itself, shows it
succeeded. Chromium and chromedriver come from Debian (``make test`` installs them); the test
skips only outside CI when they are missing. ``SQSJOBS_DASHBOARD_SCREENSHOT=path`` saves the
overview as a PNG (``make dashboard-screenshot`` writes docs/dashboard.png).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from sqsjobs import JobStatus
from tests.dashboard.conftest import XSS, Served, kill_jobs, start_worker, stop_worker

pytestmark = pytest.mark.slow

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1400,1000",
]
TOKEN = "dashboard-test-token"
#: Read at import: the suite's autouse fixture scrubs SQSJOBS_* from the environment of each test.
SCREENSHOT = os.environ.get("SQSJOBS_DASHBOARD_SCREENSHOT")


@pytest.fixture
def browser():
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not os.access(p, os.X_OK)]
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError as exc:  # pragma: no cover - the dev extra has it
        missing.append(f"selenium ({exc})")
    if missing:
        reason = (
            f"missing {', '.join(missing)}: apt-get install -y chromium chromium-driver (make test does it)"
        )
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    profile = tempfile.mkdtemp(prefix="sqsjobs-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in [*FLAGS, f"--user-data-dir={profile}"]:
        options.add_argument(flag)
    # Both paths given: selenium's driver manager has nothing to look up or download.
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def wait_for(driver, predicate, timeout_s: float, what: str):
    """Poll the page (it refreshes itself) until ``predicate(driver)`` is truthy."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate(driver)
        if value:
            return value
        assert time.monotonic() < deadline, (
            f"{what}: not within {timeout_s} s; page:\n{driver.page_source[:3000]}"
        )
        time.sleep(0.2)


def text_of(driver, css: str) -> str:
    """The visible text of what ``css`` selects, read in one step of the page's own script.

    Finding elements and then reading each one's text is two round trips: the page's refresh can
    swap its content in between, and the element found is then stale.
    """
    script = "return Array.from(document.querySelectorAll(arguments[0]), e => e.innerText).join(' ')"
    return str(driver.execute_script(script, css))


def test_an_operator_sees_a_dead_job_replays_it_and_sees_it_succeed(moto_url, dash_app, tmp_path, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    # GIVEN a worker on the embedded emulator, and a job its handler kills while the marker exists
    app = dash_app(moto_url)
    marker = tmp_path / "marker"
    marker.write_text(XSS)
    worker = start_worker(app)
    try:
        with Served(app, token=TOKEN, refresh_s=1.0) as served:
            # (the API's token guards the page too: the operator signs in once, the cookie does the rest)
            browser.get(f"{served.url}/")
            assert "sign in at /ui/login" in browser.page_source
            browser.get(f"{served.url}/ui/login")
            browser.find_element(By.NAME, "token").send_keys(TOKEN)
            browser.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
            wait_for(browser, lambda d: "No dead jobs" in text_of(d, "#dead"), 30, "signed in")
            (job_id,) = kill_jobs(app, marker, 1)
            # WHEN the overview refreshes itself
            # THEN it shows the dead job with its reason and its error as text; no markup of it ran
            row = wait_for(
                browser, lambda d: job_id in text_of(d, "#dead") and text_of(d, "#dead"), 30, "dead job"
            )
            assert "permanent error" in row and f"PermanentError: {XSS}" in row
            assert browser.title == "overview · sqsjobs"
            assert not browser.find_elements(By.CSS_SELECTOR, "#dead img, #dead script")
            if SCREENSHOT:
                Path(SCREENSHOT).parent.mkdir(parents=True, exist_ok=True)
                height = browser.execute_script("return document.documentElement.scrollHeight")
                browser.set_window_size(1400, height + 200)  # the whole page (outer size includes chrome)
                wait_for(
                    browser, lambda d: d.execute_script("return window.innerHeight") >= height, 10, "resize"
                )
                browser.save_screenshot(SCREENSHOT)
            # WHEN the cause is fixed and the operator asks for a dry run of the fragile jobs
            marker.unlink()
            # (chosen in one step of the page's script: the page may swap its content between a
            # lookup and a click, and a change event is what a user's choice fires)
            browser.execute_script(
                "const s = document.querySelector('select[name=type]'); s.value = 'fragile';"
                "s.dispatchEvent(new Event('change', {bubbles: true}));"
            )
            # (a form being filled in pauses the refresh, so it is not wiped)
            wait_for(
                browser, lambda d: "refresh paused" in text_of(d, "#refresh-state"), 10, "refresh paused"
            )
            assert Select(browser.find_element(By.NAME, "type")).first_selected_option.text == "fragile"
            browser.find_element(By.ID, "dry-run").click()
            # THEN the dry run lists the job and changed nothing
            wait_for(browser, lambda d: "would be replayed" in d.page_source, 30, "dry run page")
            assert job_id in text_of(browser, "main") and "1 job(s) would be replayed" in text_of(
                browser, "h2"
            )
            assert app.get(job_id).status is JobStatus.DEAD
            # WHEN the replay is confirmed
            browser.find_element(By.ID, "confirm-replay").click()
            wait_for(browser, lambda d: "Replayed 1 job(s)" in text_of(d, "h2"), 30, "replay result")
            # THEN the job's page shows it succeeded, by refreshing itself while the worker runs it
            browser.find_element(By.LINK_TEXT, job_id).click()
            wait_for(
                browser, lambda d: "succeeded" in text_of(d, ".kv .status"), 60, "job succeeded on its page"
            )
            assert "done on attempt 1" in text_of(browser, "main")
            assert app.get(job_id).status is JobStatus.SUCCEEDED
    finally:
        stop_worker(worker)
