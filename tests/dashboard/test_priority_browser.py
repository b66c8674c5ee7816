"""``/ui/priority`` in a real headless Chromium, against a real worker process of tests/apps/routing.py.

The operator finds waiting jobs by type and tenant, reads the dry run, confirms, and the worker
started afterwards runs the moved jobs first.
"""

from __future__ import annotations

import pytest

from sqsjobs import JobRequest, JobStatus
from tests.apps import routing
from tests.dashboard.conftest import Served, screenshot
from tests.dashboard.test_browser import TOKEN, browser, text_of, wait_for  # noqa: F401 (browser: a fixture)
from tests.integration.helpers import worker_process
from tests.integration.test_routing import APP, ROUTED, ROUTED_ENV, read_log, starts, wait_until

pytestmark = pytest.mark.slow


def test_an_operator_moves_one_tenants_waiting_jobs_to_high_and_they_start_first(
    ministack_url,
    make_app,
    tmp_path,
    browser,  # noqa: F811 (the fixture imported above)
):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    app = make_app(ministack_url, **ROUTED)
    app.registry.include(routing.app.registry)
    app.provision()
    log = tmp_path / "runs.jsonl"
    # GIVEN eight normal jobs waiting: six of globex, then two of acme (a worker would reach these last)
    requests = [
        JobRequest("work.run", {"label": f"g{i}", "log": str(log)}, tenant="globex") for i in range(6)
    ]
    requests += [JobRequest("work.run", {"label": f"a{i}", "log": str(log)}, tenant="acme") for i in range(2)]
    ids = app.enqueue_many(requests)
    acme = ids[-2:]
    proc = None
    try:
        with Served(app, token=TOKEN, refresh_s=1.0) as served:
            browser.get(f"{served.url}/ui/login")
            browser.find_element(By.NAME, "token").send_keys(TOKEN)
            browser.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
            wait_for(browser, lambda d: d.find_elements(By.LINK_TEXT, "priority"), 30, "signed in")
            browser.find_element(By.LINK_TEXT, "priority").click()
            wait_for(browser, lambda d: d.find_elements(By.ID, "priority-dry-run"), 30, "the priority page")
            # WHEN the operator asks for acme's work.run jobs to go to high, as a dry run
            Select(browser.find_element(By.ID, "priority-type")).select_by_value("work.run")
            browser.find_element(By.ID, "priority-tenant").send_keys("acme")
            Select(browser.find_element(By.ID, "priority-to")).select_by_value("high")
            browser.find_element(By.ID, "priority-dry-run").click()
            wait_for(browser, lambda d: d.find_elements(By.ID, "confirm-priority"), 30, "the dry run")
            # THEN the dry run lists exactly acme's two, and nothing moved yet
            listed = text_of(browser, "table.priority-dry-run")
            assert all(i in listed for i in acme) and not any(i in listed for i in ids[:6]), listed
            assert "2 of 2 job(s) would move to high" in text_of(browser, "h2")
            assert all(app.get(i).priority is None for i in acme)
            screenshot(browser, "priority")
            # WHEN the operator confirms
            browser.find_element(By.ID, "confirm-priority").click()
            wait_for(browser, lambda d: "Moved 2 job(s) to high" in text_of(d, "h2"), 30, "the move")
            assert text_of(browser, "table.priority-moved").count("with its message") == 2
            assert all(app.get(i).priority == "high" for i in acme)
            # THEN a worker with one slot starts acme's two first, and runs every job once
            proc = worker_process(
                app, APP, concurrency=1, queues="work", **ROUTED_ENV, SQSJOBS_LOWER_PRIORITY_EVERY="1000"
            )
            wait_until(lambda: len(read_log(log)) == 8, 90, "all eight runs")
            labels = [r["label"] for r in starts(log)]
            assert sorted(labels[:2]) == ["a0", "a1"], labels
            assert sorted(labels) == sorted(f"{t}{i}" for t, n in (("g", 6), ("a", 2)) for i in range(n))
            # (a run's finish lands a moment after its handler's last line: it may wait to share a request)
            wait_until(lambda: all(app.get(i).status is JobStatus.SUCCEEDED for i in ids), 10, "every finish")
    finally:
        if proc is not None:
            proc.kill()
            proc.wait(10)
