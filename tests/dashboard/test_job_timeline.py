"""A job's page shows its timeline: enqueued, each attempt's start and end in order, with the time
between them, read from the record a real worker process wrote (embedded emulator)."""

from __future__ import annotations

import re
import urllib.request

import pytest

from sqsjobs import JobStatus
from tests.dashboard.conftest import Served, start_worker, stop_worker, wait_until

pytestmark = pytest.mark.slow


def steps(page: str) -> list[str]:
    return re.findall(r'<span class="step">([^<]*)</span>', page)


def test_a_job_page_shows_its_timeline_in_order_with_durations(moto_url, dash_app, tmp_path):
    app = dash_app(moto_url)
    flaky = app.enqueue("flaky", {})
    ok = app.enqueue("fragile", {"marker": str(tmp_path / "absent")})
    waiting = app.enqueue("fragile", {"marker": str(tmp_path / "absent")}, delay=600)
    worker = start_worker(app)
    try:
        wait_until(
            lambda: app.get(flaky).status.terminal and app.get(ok).status.terminal, 60, "jobs finished"
        )
    finally:
        stop_worker(worker)
    assert app.get(flaky).status is JobStatus.SUCCEEDED
    with Served(app) as served:

        def page(job_id: str) -> str:
            with urllib.request.urlopen(f"{served.url}/ui/jobs/{job_id}") as r:
                return r.read().decode()

        # a job that failed once: both attempts, in order, each with its outcome
        text = page(flaky)
        assert steps(text) == [
            "enqueued",
            "attempt 1 started",
            "attempt 1 retry",
            "attempt 2 started",
            "attempt 2 succeeded",
        ]
        afters = re.findall(r'<span class="after">([^<]*)</span>', text)
        assert afters[0] == "" and all(re.fullmatch(r"\d+(\.\d)? (ms|s|min)", a) for a in afters[1:])
        # a job that succeeded at once has no history: its record's own start and finish
        assert steps(page(ok)) == ["enqueued", "attempt 1 started", "attempt 1 succeeded"]
        # a delayed job: enqueued, then due
        assert steps(page(waiting)) == ["enqueued", "due"]
        assert "trace" in page(ok)
