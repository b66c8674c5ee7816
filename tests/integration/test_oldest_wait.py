"""The oldest waiting job per type, read from a real worker's EMF lines while its type is paused.

The queue's own age metric cannot say which type waits; ``OldestJobWait`` (per type, the longest a
job had waited since due when a worker met it: claimed, or sent back by a pause or a limit) can.
A paused type is the case that matters: none of its jobs starts, so no ``JobQueueWait`` is written,
yet its jobs wait longer and longer.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from sqsjobs import JobStatus
from tests.apps import limited
from tests.integration.helpers import kill_group, wait_until, worker_env

pytestmark = pytest.mark.slow
APP = "tests.apps.limited:app"


def oldest_waits(path, job_type: str) -> list[float]:
    values = []
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith("{") and '"OldestJobWait"' in line:
            doc = json.loads(line)
            if doc.get("job_type") == job_type and "tenant" not in doc:
                values.extend(doc["OldestJobWait"])
    return values


def test_a_paused_type_shows_its_oldest_waiting_job_growing_though_none_starts(
    ministack_url, make_app, tmp_path
):
    # GIVEN a worker process flushing its metrics every second, and a paused type with jobs due
    app = make_app(ministack_url, lease_s=4.0, visibility_timeout_s=4)
    app.registry.include(limited.app.registry)
    app.limits.include(limited.app.limits)
    app.provision()
    app.limits.pause("report", reason="maintenance")
    ids = app.enqueue_many([{"type": "report", "payload": {"log": str(tmp_path / "runs.log")}}] * 3)
    out = tmp_path / "worker.out"
    with out.open("wb") as log:
        worker = subprocess.Popen(
            [sys.executable, "-m", "sqsjobs", "worker", "--app", APP, "--concurrency", "4"],
            env=worker_env(app, SQSJOBS_METRICS_INTERVAL_S="1"),
            stdout=log,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    try:
        # WHEN the worker keeps sending them back for a while
        wait_until(lambda: any(v >= 5 for v in oldest_waits(out, "report")), 60, "an oldest wait of 5 s")
    finally:
        kill_group(worker)

    # THEN none started, yet the type's oldest wait grew with the time its jobs waited
    assert all(app.get(i).status is JobStatus.QUEUED and app.get(i).attempt == 0 for i in ids)
    waits = oldest_waits(out, "report")
    first_due = min(app.get(i).run_at.timestamp() for i in ids)
    assert max(waits) <= time.time() - first_due  # never older than the oldest job really is
    assert waits[-1] >= 5 and waits == sorted(waits), waits  # the same jobs, met later: only grows
    units = {
        m["Name"]: m["Unit"]
        for line in out.read_text().splitlines()
        if '"OldestJobWait"' in line
        for m in json.loads(line)["_aws"]["CloudWatchMetrics"][0]["Metrics"]
    }
    assert units["OldestJobWait"] == "Seconds"
