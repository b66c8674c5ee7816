"""``/ui/charts`` in a real headless Chromium: the counts a worker process produced, read back from the SVG.

A worker on the embedded emulator runs 3 jobs that succeed, 2 that die, and 2 that fail their first
attempt and succeed their second. The bars of the page's SVG (each mark carries its number) must sum
to exactly that: 9 attempts started, 5 succeeded, 2 failed, 2 dead; the JSON behind the page says
the same; a type filter narrows it; nothing is left waiting at the end.
"""

from __future__ import annotations

import pytest

from sqsjobs import JobStatus
from tests.dashboard.conftest import Served, screenshot, start_worker, stop_worker, wait_until
from tests.dashboard.test_browser import TOKEN, browser, text_of, wait_for  # noqa: F401 (browser: a fixture)

pytestmark = pytest.mark.slow

SUMS = (
    "return Object.fromEntries(['started','succeeded','failed','dead'].map(s => [s,"
    " Array.from(document.querySelectorAll(`#chart-counts .mark[data-series=${s}]`))"
    ".reduce((n, m) => n + Number(m.dataset.value), 0)]))"
)


def test_the_charts_show_the_counts_a_worker_produced(moto_url, dash_app, tmp_path, browser):  # noqa: F811
    from selenium.webdriver.common.by import By

    app = dash_app(moto_url)
    dead_marker = tmp_path / "dead"
    dead_marker.write_text("refused")
    ok = [app.enqueue("fragile", {"marker": str(tmp_path / "absent")}) for _ in range(3)]
    dead = [app.enqueue("fragile", {"marker": str(dead_marker)}) for _ in range(2)]
    flaky = [app.enqueue("flaky", {}) for _ in range(2)]
    worker = start_worker(app)
    try:
        wait_until(
            lambda: all(app.get(i).status.terminal for i in ok + dead + flaky), 60, "all jobs finished"
        )
    finally:
        stop_worker(worker)
    assert [app.get(i).status for i in dead] == [JobStatus.DEAD] * 2
    with Served(app, token=TOKEN, refresh_s=1.0) as served:
        browser.get(f"{served.url}/ui/login")
        browser.find_element(By.NAME, "token").send_keys(TOKEN)
        browser.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        wait_for(browser, lambda d: d.find_elements(By.LINK_TEXT, "charts"), 30, "signed in")
        # WHEN the operator opens the charts (a link in every page's header)
        browser.find_element(By.LINK_TEXT, "charts").click()
        wait_for(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#chart-counts svg"), 30, "the charts")
        # THEN the bars add up to what the worker did
        assert browser.execute_script(SUMS) == {"started": 9, "succeeded": 5, "failed": 2, "dead": 2}
        legend = text_of(browser, "#chart-counts figcaption")
        assert "started 9" in legend and "dead 2" in legend
        # ... the JSON behind it says the same
        series = browser.execute_script(
            "const r = new XMLHttpRequest(); r.open('GET', '/series', false); r.send(); return JSON.parse(r.responseText)"
        )
        assert {k: sum(v) for k, v in series["counts"].items()} == {
            "started": 9,
            "succeeded": 5,
            "failed": 2,
            "dead": 2,
        }
        # ... nothing waits at the end, and each type has its latencies
        waiting = browser.execute_script(
            "return Array.from(document.querySelectorAll('#chart-waiting .mark'), m => Number(m.dataset.value))"
        )
        assert len(waiting) == 60 and waiting[-1] == 0
        assert series["latency"]["flaky"]["run"]["n"] == 4 and series["latency"]["fragile"]["wait"]["n"] == 5
        assert "flaky" in text_of(browser, "table.latency") and "fragile" in text_of(browser, "table.latency")
        # WHEN narrowed to one type
        browser.get(f"{served.url}/ui/charts?window=1h&type=flaky")
        wait_for(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#chart-counts svg"), 30, "flaky charts")
        assert browser.execute_script(SUMS) == {"started": 4, "succeeded": 2, "failed": 2, "dead": 0}
        # ... and the day's window draws the same counts in 96 quarter hours
        browser.get(f"{served.url}/ui/charts?window=1d")
        wait_for(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#chart-counts svg"), 30, "the day")
        assert browser.execute_script(SUMS) == {"started": 9, "succeeded": 5, "failed": 2, "dead": 2}
        assert len(browser.find_elements(By.CSS_SELECTOR, "#chart-waiting .mark")) == 96
        browser.get(f"{served.url}/ui/charts")
        wait_for(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#chart-counts svg"), 30, "charts")
        screenshot(browser, "charts")
