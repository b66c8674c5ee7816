"""Worker processes that die or are stopped: SIGKILL mid-job, and SIGTERM with jobs in flight (MiniStack)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sqsjobs import JobStatus
from sqsjobs.testing import all_finished, work_until
from tests.integration.helpers import depth

pytestmark = pytest.mark.slow


def start_worker(app, *, concurrency: int = 2, **env: str) -> subprocess.Popen[bytes]:
    environ = {
        **os.environ,
        "TEST_APP_NAME": app.name,
        "SQSJOBS_ENDPOINT_URL": app.settings.endpoint_url,
        "SQSJOBS_LEASE_S": str(app.settings.lease_s),
        "SQSJOBS_VISIBILITY_TIMEOUT_S": str(app.settings.visibility_timeout_s),
        "SQSJOBS_RECEIVE_WAIT_S": "1",
        **env,
    }
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sqsjobs",
            "worker",
            "--app",
            "tests.apps.sleepy:app",
            "--concurrency",
            str(concurrency),
        ],
        env=environ,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def wait_for(path: Path, timeout_s: float = 30.0) -> str:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)
    time.sleep(0.05)
    return path.read_text()


@pytest.fixture
def sleepy_app(ministack_url, make_app):
    app = make_app(ministack_url, lease_s=2.0, visibility_timeout_s=2)

    # In this process the same job type finishes at once: whoever rescues the job completes it.
    @app.job("sleepy", max_attempts=3, timeout=120)
    def sleepy(payload, ctx):
        return ctx.attempt

    app.provision()
    return app


def test_a_job_whose_worker_was_killed_completes_on_another_worker_after_the_lease_expires(
    sleepy_app, tmp_path
):
    app = sleepy_app
    marker = tmp_path / "job"
    job_id = app.enqueue("sleepy", {"marker": str(marker), "sleep_s": 60})
    proc = start_worker(app)
    try:
        killed_worker = wait_for(Path(f"{marker}.1"))
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)

    orphan = app.get(job_id)
    assert (orphan.status, orphan.lease_owner, orphan.attempt) == (JobStatus.RUNNING, killed_worker, 1)

    work_until(app, all_finished(app, [job_id]))

    job = app.get(job_id)
    assert (job.status, job.attempt, job.lease_epoch, job.result) == (JobStatus.SUCCEEDED, 2, 2, 2)
    assert job.history[-1].worker != killed_worker


def test_sigterm_drains_finishing_jobs_and_releases_the_rest(sleepy_app, tmp_path):
    app = sleepy_app
    quick = app.enqueue("sleepy", {"marker": str(tmp_path / "quick"), "sleep_s": 0.5})
    slow = app.enqueue("sleepy", {"marker": str(tmp_path / "slow"), "sleep_s": 60})
    proc = start_worker(app, SQSJOBS_DRAIN_TIMEOUT_S="2")
    try:
        wait_for(tmp_path / "quick.1")
        wait_for(tmp_path / "slow.1")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)

    assert app.get(quick).status is JobStatus.SUCCEEDED
    released = app.get(slow)
    assert (released.status, released.attempt, released.lease_owner) == (JobStatus.QUEUED, 0, None)
    assert [h.outcome for h in released.history] == ["released"]
    assert depth(app)["visible"] == 1  # the message was made visible again at once

    work_until(app, all_finished(app, [slow]))  # and the next worker runs it, as attempt 1
    assert (app.get(slow).status, app.get(slow).attempt) == (JobStatus.SUCCEEDED, 1)
