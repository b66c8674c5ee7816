"""Issue 44's "done when" for runtime schedules, from outside: a ``sqsjobs dev`` process and HTTP.

A runtime schedule created through ``POST /schedules`` fires on the dev process's local firing loop,
pauses, resumes with its catch-up rule (the occurrence it missed while paused is made once), survives
a ``sqsjobs schedules apply`` of the declared ones (another process), and is deleted. It waits for
one real minute to pass while the schedule is paused (a rate's shortest period): nothing asserts a
time, only which occurrences became jobs.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import httpx
import pytest

from sqsjobs.local.dev import DEV_SCHEDULER_ROLE
from sqsjobs.schedules.expressions import parse_instant
from tests.api.helpers import client
from tests.emulators import REPO_ROOT
from tests.integration.helpers import wait_until

APP = "tests.apps.runtime_scheduled:app"


def start_dev(name: str) -> tuple[subprocess.Popen[str], str, str]:
    env = {k: v for k, v in os.environ.items() if k != "SQSJOBS_API_TOKEN"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "sqsjobs", "dev", "--app", APP, "--api-port", "0"],
        cwd=REPO_ROOT,
        env={**env, "TEST_APP_NAME": name, "COLUMNS": "500"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    endpoint = url = None
    seen: list[str] = []
    deadline = time.monotonic() + 60
    while url is None and time.monotonic() < deadline:
        line = proc.stderr.readline()  # type: ignore[union-attr]
        assert line or proc.poll() is None, "".join(seen)
        seen.append(line)
        endpoint = endpoint or (m.group(1) if (m := re.search(r"SQSJOBS_ENDPOINT_URL=(\S+)", line)) else None)
        url = m.group(1) if (m := re.search(r"HTTP API on (http://127\.0\.0\.1:\d+)", line)) else None
    assert url and endpoint, "".join(seen)
    return proc, url, endpoint


def made(tmp_path) -> list[float]:
    """The occurrences that became jobs (their files), in order."""
    return sorted(parse_instant(f.name.rsplit("@", 1)[1].replace("_", ":")) for f in tmp_path.iterdir())


@pytest.mark.slow
def test_a_runtime_schedule_made_over_http_fires_pauses_resumes_survives_apply_and_is_deleted(tmp_path):
    name = f"rts{os.getpid()}"
    proc, url, endpoint = start_dev(name)
    try:
        with client(url) as http:
            deadline = time.monotonic() + 30
            while True:  # the server starts with the worker, just after the line above
                try:
                    http.get("/schedules")
                    break
                except httpx.TransportError:
                    assert time.monotonic() < deadline
                    time.sleep(0.2)
            # WHEN a tenant's schedule is made over HTTP: a rate fires at once, on the local loop
            body = {
                "name": "sync",
                "tenant": "acme",
                "job": "ticks.record",
                "rate": "rate(1 minute)",
                "payload": {"dir": str(tmp_path)},
                "overlap": "skip",
                "catchup_window_s": 600,
            }
            created = http.post("/schedules", json=body)
            assert created.status_code == 201, created.text
            assert http.post("/schedules", json=body).status_code == 409
            wait_until(lambda: len(made(tmp_path)) == 1, 30, "the first fire's job ran")
            (first,) = made(tmp_path)
            one = http.get("/schedules/sync", params={"tenant": "acme"}).json()
            wait_until(
                lambda: (
                    http.get("/schedules/sync", params={"tenant": "acme"}).json()["last_outcome"]
                    == "succeeded"
                ),
                30,
                "its outcome shown",
            )
            assert one["last_slot"] and one["next_fires"]
            # AND it is paused past its next occurrence
            paused = http.post("/schedules/sync/pause", params={"tenant": "acme"})
            assert paused.status_code == 200 and paused.json()["state"] == "paused", paused.text
            wait_until(lambda: time.time() > first + 62, 70, "an occurrence passed while paused")
            assert made(tmp_path) == [first]  # nothing fired while paused
            # THEN its resume makes the occurrence it missed (in its window), once
            resumed = http.post("/schedules/sync/resume", params={"tenant": "acme"})
            assert resumed.json()["state"] == "active", resumed.text
            wait_until(lambda: len(made(tmp_path)) >= 2, 30, "the missed occurrence ran")
            assert made(tmp_path)[:2] == [first, first + 60]
            # AND a `schedules apply` of the declared ones (another process) leaves it alone
            applied = subprocess.run(
                [sys.executable, "-m", "sqsjobs", "schedules", "apply", "--app", APP, "--yes", "--json"],
                cwd=REPO_ROOT,
                env={
                    **os.environ,
                    "TEST_APP_NAME": name,
                    "SQSJOBS_ENDPOINT_URL": endpoint,
                    "SQSJOBS_SCHEDULER_ROLE_ARN": DEV_SCHEDULER_ROLE,
                    "AWS_ACCESS_KEY_ID": "sqsjobs-dev",
                    "AWS_SECRET_ACCESS_KEY": "sqsjobs-dev",
                },
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert applied.returncode == 0, applied.stderr
            listed = http.get("/schedules").json()
            assert [(s["tenant"], s["name"]) for s in listed["runtime"]] == [("acme", "sync")]
            assert [s["name"] for s in listed["declared"]] == ["declared.nightly"]
            # AND it is deleted
            assert http.delete("/schedules/sync", params={"tenant": "acme"}).json()["deleted"] is True
            assert http.get("/schedules/sync", params={"tenant": "acme"}).status_code == 404
            assert http.get("/schedules", params={"tenant": "acme"}).json()["runtime"] == []
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "Traceback" not in err
