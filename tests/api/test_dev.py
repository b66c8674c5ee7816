"""``sqsjobs dev`` serves the HTTP API beside its worker: a job posted over HTTP runs and reads back as succeeded."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import httpx
import pytest

from tests.api.helpers import client
from tests.emulators import REPO_ROOT


@pytest.mark.slow
def test_dev_prints_the_api_url_and_its_worker_runs_what_the_api_enqueues(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "SQSJOBS_API_TOKEN"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "sqsjobs", "dev", "--app", "tests.apps.sleepy:app", "--api-port", "0"],
        cwd=REPO_ROOT,
        env={**env, "TEST_APP_NAME": f"dev{os.getpid()}"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url, seen = None, []
        deadline = time.monotonic() + 60
        while url is None and time.monotonic() < deadline:
            line = proc.stderr.readline()  # type: ignore[union-attr]
            assert line or proc.poll() is None, "".join(seen)
            seen.append(line)
            found = re.search(r"HTTP API on (http://127\.0\.0\.1:\d+)", line)
            url = found.group(1) if found else None
        assert url, "".join(seen)
        with client(url) as http:
            job = {"type": "sleepy", "payload": {"marker": str(tmp_path / "ran"), "sleep_s": 0}}
            deadline = time.monotonic() + 30
            while True:  # the server starts with the worker, just after the line above
                try:
                    posted = http.post("/jobs", json=job)
                    break
                except httpx.TransportError:  # not listening yet; any other error is a failure
                    assert time.monotonic() < deadline
                    time.sleep(0.2)
            assert posted.status_code == 202, posted.text
            job_id = posted.json()["id"]
            deadline = time.monotonic() + 30
            while http.get(f"/jobs/{job_id}").json()["status"] != "succeeded":
                assert time.monotonic() < deadline, http.get(f"/jobs/{job_id}").text
                time.sleep(0.2)
        assert (tmp_path / "ran.1").exists()
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "Traceback" not in err
