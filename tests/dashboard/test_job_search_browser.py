"""``/ui/jobs`` in a real headless Chromium, against a worker process on the embedded emulator.

A filtered search finds jobs by tenant (and only them), by status through the dead index, by id
prefix, and a whole id opens the job's page.
"""

from __future__ import annotations

import pytest

from sqsjobs import JobStatus
from tests.dashboard.conftest import Served, screenshot, start_worker, stop_worker, wait_until
from tests.dashboard.test_browser import TOKEN, browser, text_of, wait_for  # noqa: F401 (browser: a fixture)

pytestmark = pytest.mark.slow

LISTED = "return Array.from(document.querySelectorAll('table.jobs a.job'), a => a.innerText)"


def test_a_filtered_search_finds_jobs_by_tenant_status_and_id(moto_url, dash_app, tmp_path, browser):  # noqa: F811
    from selenium.webdriver.common.by import By

    app = dash_app(moto_url)
    marker = tmp_path / "dead"
    marker.write_text("refused")
    acme = [app.enqueue("fragile", {"marker": str(tmp_path / "absent")}, tenant="acme") for _ in range(2)]
    globex = [app.enqueue("fragile", {"marker": str(tmp_path / "absent")}, tenant="globex") for _ in range(2)]
    dead = app.enqueue("fragile", {"marker": str(marker)}, tenant="acme")
    worker = start_worker(app)
    try:
        wait_until(
            lambda: all(app.get(i).status.terminal for i in [*acme, *globex, dead]), 60, "jobs finished"
        )
    finally:
        stop_worker(worker)
    # No refresh while the test types: a refresh replaced the tenant field between the lookup and the
    # typing once under load (stale element); every step below loads its own page.
    with Served(app, token=TOKEN, refresh_s=3600.0) as served:
        browser.get(f"{served.url}/ui/login")
        browser.find_element(By.NAME, "token").send_keys(TOKEN)
        browser.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        wait_for(browser, lambda d: d.find_elements(By.LINK_TEXT, "jobs"), 30, "signed in")
        browser.find_element(By.LINK_TEXT, "jobs").click()
        wait_for(browser, lambda d: d.find_elements(By.ID, "search-jobs"), 30, "the search page")
        # WHEN the operator searches for tenant acme
        browser.find_element(By.NAME, "tenant").send_keys("acme")
        browser.find_element(By.ID, "search-jobs").click()
        # THEN exactly acme's jobs are listed, and the page says what served it
        wait_for(
            browser, lambda d: "tenant=acme" in d.current_url and d.execute_script(LISTED), 30, "results"
        )
        assert sorted(browser.execute_script(LISTED)) == sorted([*acme, dead])
        assert "a Scan of the table" in text_of(browser, "#jobs")
        screenshot(browser, "jobs")
        # WHEN narrowed to dead jobs: the dead index serves it
        browser.get(f"{served.url}/ui/jobs?tenant=acme&status=dead")
        wait_for(browser, lambda d: d.execute_script(LISTED) == [dead], 30, "the dead job")
        assert "dead shards" in text_of(browser, "#jobs")
        # WHEN searched by an id prefix, then by a whole id
        browser.get(f"{served.url}/ui/jobs?id={globex[0][:6]}")
        wait_for(browser, lambda d: d.execute_script(LISTED) == [globex[0]], 30, "the prefix")
        browser.get(f"{served.url}/ui/jobs?id={globex[1]}")
        wait_for(browser, lambda d: d.current_url.endswith(f"/ui/jobs/{globex[1]}"), 30, "the job page")
        assert app.get(globex[1]).status is JobStatus.SUCCEEDED
        # ... and a malformed filter is a 400 page saying why, not a crash
        browser.get(f"{served.url}/ui/jobs?since=yesterday")
        assert "expected a duration" in text_of(browser, "main")
