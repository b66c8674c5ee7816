"""Draining one worker from the dashboard, in a real headless Chromium, against real worker processes.

The operator presses *drain* on a worker that is running a job (one the test ends when it chooses): the worker reads the request at its
next registry refresh, stops receiving, finishes the job it holds, and exits; the page shows it
draining, then gone. A job enqueued after the request is left to the other worker.
"""

from __future__ import annotations

import pytest

from sqsjobs import JobStatus
from tests.apps import limited
from tests.dashboard.conftest import Served, screenshot, stop_worker
from tests.dashboard.test_browser import TOKEN, browser, text_of, wait_for  # noqa: F401 (browser: a fixture)
from tests.integration.helpers import worker_process
from tests.integration.test_limits import wait_until

pytestmark = pytest.mark.slow

STATUS = (
    "const r = Array.from(document.querySelectorAll('#workers tbody tr'))"
    ".find(r => r.querySelector(`.worker[data-worker='${arguments[0]}']`));"
    "return r ? r.querySelector('.status').innerText : null"
)


def test_a_drained_worker_finishes_its_job_shows_draining_then_gone(
    ministack_url,
    make_app,
    tmp_path,
    browser,  # noqa: F811 (the fixture imported above)
):
    from selenium.webdriver.common.by import By

    app = make_app(ministack_url, lease_s=4.0, visibility_timeout_s=4, registry_interval_s=1.0)
    app.registry.include(limited.app.registry)
    app.limits.include(limited.app.limits)
    app.provision()
    log = tmp_path / "runs.log"
    # GIVEN a worker process running a job that takes a few seconds
    first = worker_process(app, "tests.apps.limited:app", concurrency=2, SQSJOBS_REGISTRY_INTERVAL_S="1")
    other = None
    try:
        # (it runs until the test releases it: a loaded machine may take long to show the page)
        release = tmp_path / "release"
        long_job = app.enqueue("plain", {"log": str(log), "until": str(release)})
        wait_until(lambda: app.get(long_job).status is JobStatus.RUNNING, 30, "the long job running")
        holder = app.get(long_job).lease_owner
        with Served(app, token=TOKEN, refresh_s=1.0) as served:
            browser.get(f"{served.url}/ui/login")
            browser.find_element(By.NAME, "token").send_keys(TOKEN)
            browser.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
            wait_for(
                browser, lambda d: d.execute_script(STATUS, holder) == "live", 30, "the worker listed live"
            )
            screenshot(browser, "workers")
            # WHEN the operator drains it from the page
            browser.execute_script(
                "document.querySelector(`button.drain[data-worker='${arguments[0]}']`).click()", holder
            )
            # THEN it shows draining while its job still runs, then it is gone and the job succeeded
            wait_for(browser, lambda d: d.execute_script(STATUS, holder) == "draining", 30, "draining")
            assert app.get(long_job).status is JobStatus.RUNNING
            later = app.enqueue("plain", {"log": str(log)})
            release.touch()  # the job ends; the draining worker then exits
            wait_for(
                browser, lambda d: d.execute_script(STATUS, holder) is None, 60, "gone from the registry"
            )
            assert first.wait(30) == 0  # it exited by itself, cleanly
            job = app.get(long_job)
            assert (job.status, job.attempt) == (JobStatus.SUCCEEDED, 1)
            # ... and the job enqueued after the request was not taken by the draining worker
            assert app.get(later).status is JobStatus.QUEUED
            other = worker_process(app, "tests.apps.limited:app", SQSJOBS_REGISTRY_INTERVAL_S="1")
            wait_until(
                lambda: app.get(later).status is JobStatus.SUCCEEDED, 30, "the later job on another worker"
            )
    finally:
        stop_worker(first)
        if other is not None:
            stop_worker(other)
