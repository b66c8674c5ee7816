"""A job's console page in a real headless Chromium follows the job live over its event stream.

The operator opens the page of a queued job with the page's own refresh turned off; a worker
process then runs a handler that reports progress five times (``tests/apps/progressing.py``). The
page's ``job_live.js`` (``GET /jobs/{id}/events``, the session cookie riding on it) must move the
bar through every report, then load the page again at the end to show the result.
"""

from __future__ import annotations

import time

import pytest

from tests.apps import progressing
from tests.dashboard.conftest import Served, screenshot
from tests.dashboard.test_browser import TOKEN, browser, text_of, wait_for  # noqa: F401 (browser: a fixture)
from tests.integration.helpers import kill_group, worker_process

pytestmark = pytest.mark.slow

REPORTS = 5
SHOWN = (
    "var bar = document.getElementById('job-progress');"
    "var status = document.getElementById('job-live-status');"
    "return [bar ? bar.dataset.report : null, status ? status.textContent : null,"
    " (document.querySelector('span.status') || {}).textContent || null];"
)


def test_the_job_page_moves_with_each_report_and_shows_the_end(moto_url, make_app, browser):  # noqa: F811
    from selenium.webdriver.common.by import By

    app = make_app(moto_url, lease_s=2.0, visibility_timeout_s=3)
    app.registry = progressing.app.registry
    app.provision()
    job_id = app.enqueue("report.build", {"reports": REPORTS})
    with Served(app, token=TOKEN, refresh_s=3600.0) as served:
        browser.get(f"{served.url}/ui/login")
        browser.find_element(By.NAME, "token").send_keys(TOKEN)
        browser.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        wait_for(browser, lambda d: d.find_elements(By.LINK_TEXT, "jobs"), 30, "signed in")
        browser.get(f"{served.url}/ui/jobs/{job_id}")
        wait_for(browser, lambda d: d.find_elements(By.ID, "job-progress"), 30, "the job's page")
        assert text_of(browser, "#job-progress-text") == "no report yet"
        assert "Not started yet." in text_of(browser, "main")
        worker = worker_process(app, "tests.apps.progressing:app", concurrency=1)
        seen_reports: list[str] = []
        seen_statuses: list[str] = []
        try:
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline:
                report, live_status, badge = browser.execute_script(SHOWN)
                if report and report not in seen_reports:
                    seen_reports.append(report)
                if live_status and live_status not in seen_statuses:
                    seen_statuses.append(live_status)
                if badge == "succeeded" and not browser.find_elements(By.ID, "job-events"):
                    break  # the page was loaded again once the job ended
                time.sleep(0.05)
        finally:
            kill_group(worker)
        screenshot(browser, "job-live")
        # THEN the bar went through every report in order, the status line followed, and the end shows
        assert seen_reports[0] == "0" and seen_reports[1:] == [str(i) for i in range(1, REPORTS + 1)]
        assert "running" in seen_statuses
        assert "100%" in text_of(browser, "#job-progress-text")
        assert '"pages": 5' in text_of(browser, "main")  # the result, shown after the reload
        assert "Attempt 1 succeeded" in text_of(browser, "main")  # not "no attempt": it kept no history entry
