"""SIGTERM while an AWS call hangs: the worker still exits within its drain budget (graceful shutdown).

Found by the chaos soak (issue 8): a worker stopped while a DeleteMessageBatch hung (the answer
never came; botocore waits out its 30 s read timeout, then retries) did not exit for 30 s or more
after its drain, past an ECS stopTimeout. Unsent acks are safe to drop: every record is already
final, and a redelivered message is deleted by the claim it fails.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from sqsjobs import JobStatus
from tests.soak.faults import FaultPlan, FaultProxy

pytestmark = pytest.mark.slow

#: Generous against the ~5 s the fixed worker needs, far below the minutes a hung flush takes.
EXIT_WITHIN_S = 20.0


def test_sigterm_exits_promptly_while_an_ack_hangs(ministack_url, make_app, tmp_path):
    app = make_app(ministack_url, lease_s=2.0, visibility_timeout_s=2)
    app.job("sleepy", max_attempts=3, timeout=120)(lambda payload, ctx: None)
    app.provision()
    # Every delete hangs far past the client's read timeout.
    plan = FaultPlan(slow=1.0, slow_s=300.0, only_actions=frozenset({"DeleteMessageBatch"}))
    with FaultProxy(ministack_url, faults=plan) as proxy:
        marker = tmp_path / "job"
        job_id = app.enqueue("sleepy", {"marker": str(marker), "sleep_s": 0})
        env = {
            **os.environ,
            "TEST_APP_NAME": app.name,
            "SQSJOBS_ENDPOINT_URL": proxy.url,
            "SQSJOBS_RECEIVE_WAIT_S": "1",
            "SQSJOBS_DRAIN_TIMEOUT_S": "1",
        }
        proc = subprocess.Popen(
            [sys.executable, "-m", "sqsjobs", "worker", "--app", "tests.apps.sleepy:app"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + 30
            while proxy.faults_injected["slow"] == 0:  # the job ran and its delete is hanging
                assert time.monotonic() < deadline, "the worker never acked"
                time.sleep(0.1)
            assert app.get(job_id).status is JobStatus.SUCCEEDED

            proc.send_signal(signal.SIGTERM)
            began = time.monotonic()
            try:
                code = proc.wait(EXIT_WITHIN_S)
            except subprocess.TimeoutExpired:
                pytest.fail(f"the worker was still running {EXIT_WITHIN_S:g} s after SIGTERM")
            assert code == 0
            assert time.monotonic() - began < EXIT_WITHIN_S
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
