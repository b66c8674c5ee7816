"""``/ui/dead`` in a real headless Chromium, against a real worker process on the embedded emulator.

Jobs die in the worker with messages that differ only in an account number (one group) or in their
words (another, whose message is markup); the page counts each group, the operator runs the dry run
of one, a job dies in that group meanwhile, and the confirmation retries exactly the dry run's jobs:
they succeed, the late one stays dead.
"""

from __future__ import annotations

import pytest

from sqsjobs import JobStatus
from tests.dashboard.conftest import XSS, Served, kill_jobs, screenshot, start_worker, stop_worker, wait_until
from tests.dashboard.test_browser import TOKEN, browser, text_of, wait_for  # noqa: F401 (browser: a fixture)

pytestmark = pytest.mark.slow

QUOTA = "PermanentError: quota exceeded for account <n>"


def test_an_operator_retries_a_group_of_dead_jobs_by_the_dry_runs_ids(moto_url, dash_app, tmp_path, browser):  # noqa: F811
    from selenium.webdriver.common.by import By

    # GIVEN two jobs dead with "quota exceeded" for two accounts, and one dead with markup as its error
    app = dash_app(moto_url)
    marker = tmp_path / "marker"
    worker = start_worker(app)
    try:
        marker.write_text("quota exceeded for account 17")
        first = kill_jobs(app, marker, 1)
        marker.write_text("quota exceeded for account 4242")
        first += kill_jobs(app, marker, 1)
        marker.write_text(XSS)
        (other,) = kill_jobs(app, marker, 1)
        with Served(app, token=TOKEN, refresh_s=1.0) as served:
            browser.get(f"{served.url}/ui/login")
            browser.find_element(By.NAME, "token").send_keys(TOKEN)
            browser.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
            # WHEN the operator opens the dead jobs by error (a link in every page's header)
            wait_for(browser, lambda d: d.find_elements(By.LINK_TEXT, "dead by error"), 30, "signed in")
            browser.find_element(By.LINK_TEXT, "dead by error").click()
            # THEN each group shows its count; the markup is text, none of it ran
            wait_for(browser, lambda d: "2 group(s)" in text_of(d, "#groups h2"), 30, "the groups")
            assert "3 job(s) in 2 group(s)" in text_of(browser, "#groups h2")
            rows = browser.execute_script(
                "return Array.from(document.querySelectorAll('table.groups tbody tr'),"
                " r => [r.querySelector('.sig').innerText, r.querySelector('.count').innerText])"
            )
            assert rows == [[QUOTA, "2"], [f"PermanentError: {XSS}", "1"]]
            assert browser.title == "dead jobs by error · sqsjobs"
            assert not browser.find_elements(By.CSS_SELECTOR, "table.groups img, table.groups script")
            screenshot(browser, "dead-groups")
            # WHEN the dry run of the quota group is asked for
            browser.execute_script("document.querySelector('table.groups tbody tr button').click()")
            wait_for(browser, lambda d: "would be retried" in text_of(d, "h2"), 30, "the dry run")
            listed = set(text_of(browser, "table a.job").split())
            assert listed == set(first) and "2 job(s) would be retried" in text_of(browser, "h2")
            assert all(app.get(i).status is JobStatus.DEAD for i in first)
            # ... and one more job dies in that group before the operator confirms; the cause is fixed
            marker.write_text("quota exceeded for account 99")
            (late,) = kill_jobs(app, marker, 1)
            marker.unlink()
            browser.find_element(By.ID, "confirm-group").click()
            # THEN exactly the dry run's jobs were retried, and run; the late one is still dead
            wait_for(browser, lambda d: "Retried 2 job(s)" in text_of(d, "h2"), 30, "the retry")
            assert set(text_of(browser, "table a.job").split()) == set(first)
            wait_until(
                lambda: all(app.get(i).status is JobStatus.SUCCEEDED for i in first), 60, "retried jobs run"
            )
            assert app.get(late).status is JobStatus.DEAD and app.get(other).status is JobStatus.DEAD
            # ... and the page, refreshing itself, now counts the late job alone in its group
            browser.get(f"{served.url}/ui/dead")
            wait_for(
                browser, lambda d: "2 job(s) in 2 group(s)" in text_of(d, "#groups h2"), 30, "groups after"
            )
    finally:
        stop_worker(worker)
