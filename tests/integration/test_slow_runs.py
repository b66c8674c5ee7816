"""The slow-run watch, from outside: real worker and sweeper processes on MiniStack, evidence from their output and the records.

A type's baseline is what its runs took (the sweeper's pass reads the records, as the charts do on
an emulator); a worker flags a run that goes past ``slow_factor`` x p95 once, in a log line, a
``JobsRunningLong`` metric line and the record (written by the run's lease renewal, no write of its own).
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from sqsjobs import JobStatus
from tests.apps import sleepy
from tests.integration.helpers import kill_group, wait_until, worker_env

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.slow

APP = "tests.apps.sleepy:app"
USUAL_S = 1.0


def worker(app, log: Path) -> subprocess.Popen[bytes]:
    """A worker process whose output (JSON log lines, EMF metric lines) goes to ``log``."""
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "sqsjobs", "worker", "--app", APP, "--concurrency", "20"],
            env=worker_env(app, SQSJOBS_METRICS_INTERVAL_S="0.5"),  # EMF lines out before the kill
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def lines(log: Path) -> list[dict]:
    found = []
    for line in log.read_text().splitlines():
        try:
            found.append(json.loads(line))
        except ValueError:
            continue
    return [line for line in found if isinstance(line, dict)]


def enqueue(app, tmp_path: Path, name: str, sleep_s: float) -> str:
    return app.enqueue("sleepy", {"marker": str(tmp_path / name), "sleep_s": sleep_s})


def test_a_run_held_five_times_its_types_usual_time_is_flagged_once(ministack_url, make_app, tmp_path):
    # visibility 3 s: the heartbeat beats every second; lease 2 s: each beat renews a running job's lease
    app = make_app(ministack_url, lease_s=2.0, visibility_timeout_s=3)
    app.registry.include(sleepy.app.registry)
    app.provision()

    # GIVEN twenty runs of the type that took about a second each
    usual = [enqueue(app, tmp_path, f"usual-{n}", USUAL_S) for n in range(20)]
    first = worker(app, tmp_path / "first.log")
    try:
        wait_until(
            lambda: all(app.get(i).status is JobStatus.SUCCEEDED for i in usual),
            60,
            "usual runs",
            every_s=0.5,
        )
    finally:
        kill_group(first)
    # ... and the sweeper's pass took the type's baseline from them
    sweep = [sys.executable, "-m", "sqsjobs", "sweep", "--once", "--app", APP]
    subprocess.run(sweep, env=worker_env(app), check=True, capture_output=True, timeout=120)
    baseline = app.slow_runs.baselines()["sleepy"]
    assert baseline.runs == 20
    assert USUAL_S <= baseline.p50_s <= baseline.p95_s < 2 * USUAL_S

    # WHEN a worker runs one job held five times that long, beside one that takes the usual time
    log = tmp_path / "second.log"
    second = worker(app, log)
    try:
        held = enqueue(app, tmp_path, "held", 5 * baseline.p95_s)
        plain = enqueue(app, tmp_path, "plain", USUAL_S)
        wait_until(lambda: app.get(held).status.terminal and app.get(plain).status.terminal, 60, "both ran")
    finally:
        kill_group(second)

    # THEN the held run is flagged once: one log line, one metric, its record; the other is not
    output = lines(log)
    flagged = [line for line in output if line.get("message") == "job running long"]
    assert [line["job_id"] for line in flagged] == [held]
    assert flagged[0]["factor"] == app.settings.slow_factor == 3.0
    assert flagged[0]["elapsed_s"] > 3.0 * baseline.p95_s
    metric_lines = [line for line in output if "JobsRunningLong" in line]
    assert [line["JobsRunningLong"] for line in metric_lines] == [[1.0]]  # EMF: the values of one flush
    record = app.get(held)
    assert record.status is JobStatus.SUCCEEDED
    shown = cli_json(app, "jobs", "get", held)["running_long"]
    assert shown["factor"] == 3.0 and shown["p95_s"] == pytest.approx(baseline.p95_s, abs=0.001)
    assert shown["times_p95"] > 3.0
    assert cli_json(app, "jobs", "get", plain)["running_long"] is None


def cli_json(app, *argv: str) -> dict:
    """``sqsjobs <argv> --json`` in a process of its own, as an operator runs it."""
    done = subprocess.run(
        [sys.executable, "-m", "sqsjobs", *argv, "--app", APP, "--json"],
        env=worker_env(app),
        capture_output=True,
        check=True,
        timeout=60,
    )
    return json.loads(done.stdout)
