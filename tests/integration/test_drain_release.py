"""A draining worker hides nothing: the message its abandoned long poll would take is released at once.

On SIGTERM a worker stops receiving. If it cancelled its in-flight ``ReceiveMessage`` on its side,
SQS would keep that poll open on its own side and hand it the next message, which then stayed
invisible for a whole visibility timeout with no process to run it. The worker lets its poll return
and releases what it brings (visibility 0), so the next worker starts the job at once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sqsjobs import JobStatus
from tests.apps import stranding
from tests.integration.helpers import kill_group, worker_env
from tests.integration.test_stranding_matrix import APP, ENV, QUEUES, SETTINGS

pytestmark = pytest.mark.slow

#: Long against the time a released message takes to start, short against the visibility timeout.
START_WITHIN_S = 25.0
VISIBILITY_S = 60


def _worker(app, log: Path) -> subprocess.Popen[bytes]:
    env = worker_env(
        app, SQSJOBS_RECEIVE_WAIT_S="20", SQSJOBS_LOG_LEVEL="INFO", SQSJOBS_DRAIN_TIMEOUT_S="5", **ENV
    )
    with log.open("wb") as out:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "sqsjobs",
                "worker",
                "--app",
                APP,
                "--concurrency",
                "4",
                "--queues",
                QUEUES,
            ],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _wait_for_line(log: Path, text: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while text not in log.read_text(errors="replace"):
        assert time.monotonic() < deadline, f"{text!r} not logged within {timeout_s} s"
        time.sleep(0.1)


#: A plain queue (one long poll), a priority level (a watch per level) and a serialized key (FIFO).
ROUTES = {
    "plain": ("plain", {}),
    "priority level": ("work.run", {"priority": "high"}),
    "serialized": ("device.run", {"serialize_key": "k1"}),
}


@pytest.mark.parametrize("route", ROUTES)
def test_the_job_enqueued_as_a_worker_drains_starts_at_once_on_the_next_worker(
    ministack_url, make_app, tmp_path, route
):
    # GIVEN one idle worker in its long polls, and a visibility timeout far longer than a start takes
    app = make_app(ministack_url, visibility_timeout_s=VISIBILITY_S, **SETTINGS)
    app.registry.include(stranding.app.registry)
    app.provision()
    job_type, options = ROUTES[route]
    first_log, second_log = tmp_path / "first.log", tmp_path / "second.log"
    first = _worker(app, first_log)
    second = None
    try:
        _wait_for_line(first_log, "worker started", 30)
        time.sleep(1.0)  # its first long poll is open
        # WHEN it is told to stop, and a job arrives while its poll is still open
        first.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        enqueued = time.time()
        job_id = app.enqueue(job_type, {"runs": str(tmp_path / "runs")}, **options)
        second = _worker(app, second_log)  # while the first one still drains
        # THEN the next worker starts it at once: nothing hid it for a visibility timeout
        deadline = time.monotonic() + VISIBILITY_S + 10
        while app.get(job_id, load_result=False).status is not JobStatus.SUCCEEDED:
            assert time.monotonic() < deadline, "the job never ran: " + first_log.read_text()[-3000:]
            time.sleep(0.2)
        job = app.get(job_id, load_result=False)
        assert job.started_at is not None
        assert first.wait(40) == 0
        started_after_s = job.started_at.timestamp() - enqueued
        assert started_after_s < START_WITHIN_S, (
            f"started {started_after_s:.1f} s after its enqueue: the drained worker's poll hid it"
        )
    finally:
        kill_group(*(p for p in (first, second) if p is not None))
        for p in (first, second):
            if p is not None and p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
