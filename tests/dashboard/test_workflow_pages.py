"""The batch and chain pages in a real headless Chromium, against a real worker process on MiniStack.

A batch tree (a root, a child streamed into by the root's items, one item failing for good) is
read back from its page: each node's counts, its state and its callback's job; a chain page shows
each step's result once it ran; a chain cancelled from its page before any worker ran runs nothing.
"""

from __future__ import annotations

import pytest

from tests.apps import batches as tb
from tests.dashboard.conftest import Served, click, screenshot
from tests.dashboard.test_browser import TOKEN, browser, text_of, wait_for  # noqa: F401 (browser: a fixture)
from tests.integration.helpers import kill_group, worker_process

pytestmark = pytest.mark.slow


def node_counts(driver, batch_id: str) -> dict[str, int]:
    script = (
        "const n = document.querySelector(`.node[data-batch='${arguments[0]}']`);"
        "if (!n) return null;"
        "return Object.fromEntries(Array.from(n.querySelectorAll('.count'),"
        " c => [c.dataset.count, Number(c.querySelector('b').innerText)]));"
    )
    return driver.execute_script(script, batch_id)


def node_state(driver, batch_id: str) -> str:
    script = "const n = document.querySelector(`.node[data-batch='${arguments[0]}'] .status`); return n && n.innerText;"
    return driver.execute_script(script, batch_id)


def test_batch_tree_and_chain_pages_show_counts_results_and_cancel(
    ministack_url,
    make_app,
    tmp_path,
    monkeypatch,
    browser,  # noqa: F811 (the fixture imported above)
):
    from selenium.webdriver.common.by import By

    monkeypatch.setenv("TEST_RUNS_DIR", str(tmp_path))
    app = make_app(ministack_url, lease_s=3.0, visibility_timeout_s=2, stale_after_s=2.0)
    app.registry.include(tb.app.registry)
    app.provision()
    # GIVEN a root batch (3 items, one failing for good, one streaming 2 items into a child batch)
    root = app.batches.create("report")
    child = app.batches.create("report", parent=root.id)
    root.add("calc", {"n": 1})
    root.add("calc", {"fail": True})
    root.add("calc", {"n": 2, "stream": 2, "into": child.id})
    root.seal()
    chain = app.chains.start([("calc", {"n": 3}), ("calc", {"n": 4})])
    doomed = app.chains.start([("calc", {"n": 5}), ("calc", {"n": 6})])
    with Served(app, token=TOKEN, refresh_s=1.0) as served:
        browser.get(f"{served.url}/ui/login")
        browser.find_element(By.NAME, "token").send_keys(TOKEN)
        browser.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        wait_for(browser, lambda d: "/ui/login" not in d.current_url, 30, "signed in")
        # WHEN a chain is cancelled from its page before any worker runs
        browser.get(f"{served.url}/ui/chains/{doomed}")
        # (the page refreshes itself each second: a button found before a refresh is gone after it)
        wait_for(browser, lambda d: click(d, "cancel-chain"), 30, "the chain page's cancel button")
        wait_for(browser, lambda d: "cancelled" in text_of(d, "#chain p"), 30, "cancelled")
        # ... and the batch page is opened while nothing has run
        browser.get(f"{served.url}/ui/batches/{root.id}")
        wait_for(browser, lambda d: node_counts(d, root.id), 30, "the batch page")
        assert node_counts(browser, root.id) == {"succeeded": 0, "failed": 0, "pending": 3}
        assert node_state(browser, root.id) == "sealed" and node_state(browser, child.id) == "open"
        worker = worker_process(
            app, "tests.apps.batches:app", TEST_RUNS_DIR=str(tmp_path), SQSJOBS_STALE_AFTER_S="2"
        )
        try:
            # THEN the page, refreshing itself, shows each node complete with its counts and callback
            wait_for(browser, lambda d: node_state(d, root.id) == "complete", 60, "the root complete")
            assert node_counts(browser, root.id) == {"succeeded": 2, "failed": 1, "pending": 0}
            assert node_counts(browser, child.id) == {"succeeded": 2, "failed": 0, "pending": 0}
            assert node_state(browser, child.id) == "complete"
            status = app.batches.get(root.id)
            assert status.callback_id in text_of(browser, f".node[data-batch='{root.id}']")
            assert "children 1/1 complete" in text_of(browser, f".node[data-batch='{root.id}']")
            assert not browser.find_elements(By.ID, "cancel-batch")  # a complete batch has nothing to cancel
            screenshot(browser, "batch")
            # ... and the chain page shows each step's result, in order
            browser.get(f"{served.url}/ui/chains/{chain}")
            wait_for(browser, lambda d: "succeeded" in text_of(d, "#chain p"), 60, "the chain succeeded")
            assert text_of(browser, "table.steps .result").split() == ["6", "8"]
            screenshot(browser, "chain")
            # ... and the cancelled chain ran nothing
            runs = {r["job"] for r in tb.read(tmp_path, "runs")}
            assert not runs & {s.job_id for s in app.chains.get(doomed).steps}
            assert app.chains.get(doomed).status == "cancelled"
        finally:
            kill_group(worker)
