"""``/ui/controls`` in a real headless Chromium, against real worker processes of tests/apps/limited.py.

Pausing a type from the page stops its starts (each job deferred as paused, none run, attempts
untouched) and resuming restarts them; a breaker held open is closed from the page.
"""

from __future__ import annotations

import time

import pytest

from sqsjobs import JobStatus
from sqsjobs.limits import records as limit_records
from sqsjobs.store.apply import apply
from tests.apps import limited
from tests.dashboard.conftest import Served, click, screenshot
from tests.dashboard.test_browser import TOKEN, browser, text_of, wait_for  # noqa: F401 (browser: a fixture)
from tests.integration.test_limits import Workers, finished, wait_until

pytestmark = pytest.mark.slow


def row(driver, job_type: str) -> str:
    script = (
        "const r = Array.from(document.querySelectorAll('table.types-control tbody tr'))"
        ".find(r => r.querySelector('.type').innerText === arguments[0]); return r ? r.innerText : ''"
    )
    return str(driver.execute_script(script, job_type))


def test_pausing_from_the_page_stops_starts_resuming_restarts_them_and_a_breaker_closes(
    ministack_url,
    make_app,
    tmp_path,
    browser,  # noqa: F811 (the fixture imported above)
):
    from selenium.webdriver.common.by import By

    app = make_app(ministack_url, lease_s=4.0, visibility_timeout_s=4)
    app.registry.include(limited.app.registry)
    app.limits.include(limited.app.limits)
    app.provision()
    log = tmp_path / "runs.log"
    fleet = Workers(app, tmp_path)
    try:
        with Served(app, token=TOKEN, refresh_s=1.0) as served:
            browser.get(f"{served.url}/ui/login")
            browser.find_element(By.NAME, "token").send_keys(TOKEN)
            browser.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
            wait_for(browser, lambda d: d.find_elements(By.LINK_TEXT, "controls"), 30, "signed in")
            browser.find_element(By.LINK_TEXT, "controls").click()
            wait_for(browser, lambda d: "running" in row(d, "report"), 30, "the controls page")
            # WHEN the operator pauses "report" from the page, with a reason
            browser.execute_script(
                "const f = document.getElementById('pause-report').form;"
                "f.querySelector('input[name=reason]').value = 'db migration'; f.submit();"
            )
            wait_for(browser, lambda d: "paused" in row(d, "report"), 30, "paused on the page")
            assert "db migration" in row(browser, "report")
            # THEN a worker process starts none of its jobs: each is deferred as paused
            ids = app.enqueue_many([{"type": "report", "payload": {"log": str(log)}} for _ in range(3)])
            fleet.start(1, concurrency=4)
            wait_until(
                lambda: (
                    set(ids) <= {e["job_id"] for e in fleet.events("job deferred") if e["reason"] == "paused"}
                ),
                30,
                "each job deferred as paused",
            )
            assert all(app.get(i).status is JobStatus.QUEUED and app.get(i).attempt == 0 for i in ids)
            assert not log.exists()
            # WHEN resumed from the page: every one runs, once
            # (the page refreshes itself each second: a button found before a refresh is gone after it)
            wait_for(browser, lambda d: click(d, "resume-report"), 30, "the resume button")
            wait_for(browser, lambda d: "running" in row(d, "report"), 30, "resumed on the page")
            wait_until(lambda: finished(app, ids), 60, "the reports after resume")
            assert len(log.read_text().splitlines()) == 3
            # WHEN the crm breaker is open, the page offers to close it, and closing it closes it
            app.run(
                apply(
                    limit_records.open_breaker(
                        app.settings.table_name,
                        limit_records.breaker_id("crm"),
                        version=0,
                        now=time.time(),
                        cooldown_s=600,
                    )
                )
            )
            wait_for(browser, lambda d: d.find_elements(By.ID, "close-crm"), 30, "the open breaker")
            assert "open until" in text_of(browser, "table.limits")
            screenshot(browser, "controls")
            wait_for(browser, lambda d: click(d, "close-crm"), 30, "the close button")
            wait_for(browser, lambda d: not d.find_elements(By.ID, "close-crm"), 30, "closed")
            assert "closed" in text_of(browser, "table.limits")
    finally:
        fleet.stop()
