"""``/ui/schedules`` in a real headless Chromium: a runtime schedule is paused, resumed and deleted from the page.

The schedules are made through ``app.schedules`` on MiniStack (its Scheduler stores them in the
App's runtime group); what the buttons did is read back through the same verbs and from Scheduler.
"""

from __future__ import annotations

import pytest

from sqsjobs.errors import ScheduleNotFound
from tests.dashboard.conftest import Served, click
from tests.dashboard.test_browser import TOKEN, browser, wait_for  # noqa: F401 (browser: a fixture)
from tests.integration.test_runtime_schedules import FAR, ROLE

pytestmark = pytest.mark.slow


def row(driver, name: str) -> str:
    script = (
        "const r = Array.from(document.querySelectorAll('table.schedules tbody tr'))"
        ".find(r => r.cells[0].innerText === arguments[0]); return r ? r.innerText : ''"
    )
    return str(driver.execute_script(script, name))


def test_a_runtime_schedule_is_paused_resumed_and_deleted_from_the_page(
    ministack_url,
    make_app,
    browser,  # noqa: F811 (the fixture imported above)
):
    from selenium.webdriver.common.by import By

    app = make_app(ministack_url, scheduler_role_arn=ROLE)

    @app.job("report.build")
    def build(payload: dict, ctx):
        return None

    app.provision()
    app.schedules.create("nightly", job="report.build", cron=FAR, tenant="acme", overlap="skip")
    with Served(app, token=TOKEN, refresh_s=1.0) as served:
        browser.get(f"{served.url}/ui/login")
        browser.find_element(By.NAME, "token").send_keys(TOKEN)
        browser.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        wait_for(browser, lambda d: d.find_elements(By.LINK_TEXT, "schedules"), 30, "signed in")
        browser.find_element(By.LINK_TEXT, "schedules").click()
        wait_for(browser, lambda d: "active" in row(d, "acme.nightly"), 30, "the schedules page")
        assert "skip" in row(browser, "acme.nightly") and "never" in row(browser, "acme.nightly")

        # WHEN paused from the page, THEN it is paused (the page and the verb agree)
        wait_for(browser, lambda d: click(d, "pause-acme.nightly"), 30, "the pause button")
        wait_for(browser, lambda d: "paused" in row(d, "acme.nightly"), 30, "paused on the page")
        assert app.schedules.describe("nightly", tenant="acme").state == "paused"
        # WHEN resumed, THEN it is active again
        wait_for(browser, lambda d: click(d, "resume-acme.nightly"), 30, "the resume button")
        wait_for(browser, lambda d: "active" in row(d, "acme.nightly"), 30, "resumed on the page")
        assert app.schedules.describe("nightly", tenant="acme").state == "active"
        # WHEN deleted, THEN it is gone from the page and from the runtime group
        wait_for(browser, lambda d: click(d, "delete-acme.nightly"), 30, "the delete button")
        wait_for(browser, lambda d: row(d, "acme.nightly") == "", 30, "gone from the page")
        with pytest.raises(ScheduleNotFound):
            app.schedules.describe("nightly", tenant="acme")
