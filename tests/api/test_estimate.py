"""``POST /jobs`` under a backlog: an estimated start from the depth over the measured drain rate (MiniStack).

A real worker process drains a backlog of short jobs while the test keeps enqueueing over HTTP.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta

import pytest

from sqsjobs.api.drain import MIN_SPAN_S
from tests.api.helpers import client, serving
from tests.integration.helpers import kill_group, worker_process

pytestmark = pytest.mark.slow

TOKEN = "estimate-token-9e8f"


@pytest.fixture
def app(results_app):
    return results_app


def post(http, sleep_s: float = 0.2) -> dict:
    answer = http.post("/jobs", json={"type": "nap", "payload": {"sleep_s": sleep_s}})
    assert answer.status_code == 202, answer.text
    return dict(answer.json())


def test_a_backlog_nobody_drains_has_no_estimate_and_a_draining_one_has_depth_over_rate(app):
    app.enqueue_many([{"type": "nap", "payload": {"sleep_s": 0.2}} for _ in range(40)])
    with serving(app, token=TOKEN) as url, client(url, TOKEN) as http:
        # GIVEN no worker: samples over more than the minimum span, nothing drains
        start = time.monotonic()
        while time.monotonic() - start < MIN_SPAN_S + 0.5:
            body = post(http)
            assert body["queue_depth"] > 1
            assert body["estimated_start"] is None and body["estimate"] is None
        # WHEN a worker drains the backlog while jobs keep coming
        worker = worker_process(app, "tests.apps.results:app", concurrency=4)
        try:
            deadline = time.monotonic() + 60
            while (body := post(http))["estimate"] is None or body["estimate"][
                "method"
            ] != "depth_over_drain_rate":
                assert time.monotonic() < deadline, body
        finally:
            kill_group(worker)
    # THEN the estimate says how it was computed, and is that computation
    basis = body["estimate"]
    assert basis["drain_per_s"] > 0 and basis["observed_s"] >= MIN_SPAN_S and basis["samples"] >= 2
    assert basis["ahead"] == body["queue_depth"] - 1 > 0
    run_at, estimated = (
        datetime.fromisoformat(body["run_at"]),
        datetime.fromisoformat(body["estimated_start"]),
    )
    expected = timedelta(seconds=basis["ahead"] / basis["drain_per_s"])
    assert abs((estimated - run_at) - expected) < timedelta(seconds=1) + expected * 0.01
