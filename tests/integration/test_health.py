"""The worker's health probe, from outside: real worker processes, their /live and /ready over HTTP.

Ready once started; not ready the moment SIGTERM starts the drain (still live while it finishes its
job); not live while an async handler blocks the event loop; not ready while the emulator is frozen
(SIGSTOP on a private MiniStack: DynamoDB and SQS stop answering), ready again once it thaws.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from sqsjobs import JobStatus
from tests.apps import held
from tests.emulators import MiniStack, free_port
from tests.integration.helpers import kill_group, wait_until, worker_env

pytestmark = pytest.mark.slow

APP = "tests.apps.held:app"
#: The probe's bound in these tests: short, so a stall shows within seconds.
STALL_S = 2.0


def _worker(app, log: Path, port: int) -> subprocess.Popen[bytes]:
    env = worker_env(
        app, SQSJOBS_HEALTH_PORT=str(port), SQSJOBS_HEALTH_STALL_S=str(STALL_S), SQSJOBS_LOG_LEVEL="INFO"
    )
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "sqsjobs", "worker", "--app", APP, "--concurrency", "2"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def probe(port: int, path: str) -> tuple[int, dict]:
    """(status, checks); (0, {}) when nothing answers."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as response:
            return response.status, json.loads(response.read())["checks"]
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())["checks"]
    except OSError:
        return 0, {}


def _app(make_app, endpoint: str):
    app = make_app(endpoint)
    app.registry.include(held.app.registry)
    app.provision()
    return app


def test_ready_when_started_and_not_ready_at_once_on_sigterm_while_it_drains(
    ministack_url, make_app, tmp_path
):
    app = _app(make_app, ministack_url)
    port, log = free_port(), tmp_path / "worker.log"
    worker = _worker(app, log, port)
    try:
        # GIVEN a started worker: live and ready, every check named
        wait_until(lambda: probe(port, "/ready")[0] == 200, 30, "ready after start")
        checks = probe(port, "/ready")[1]
        assert set(checks) == {"not_draining", "event_loop", "receive_loops", "dynamodb", "sqs"}
        assert probe(port, "/live")[0] == 200
        # AND a job it is running
        started, release = tmp_path / "one.started", tmp_path / "one.release"
        job_id = app.enqueue("held", {"started": str(started), "release": str(release)})
        wait_until(started.exists, 30, "the job's start")
        # WHEN SIGTERM starts the drain
        worker.send_signal(signal.SIGTERM)
        # THEN readiness fails at once, while the worker is still live and finishing its job
        wait_until(lambda: probe(port, "/ready")[0] == 503, 2, "not ready on SIGTERM")
        checks = probe(port, "/ready")[1]
        assert checks["not_draining"] is False
        assert probe(port, "/live")[0] == 200
        assert worker.poll() is None
        release.touch()
        assert worker.wait(30) == 0
        assert app.get(job_id, load_result=False).status is JobStatus.SUCCEEDED
        # AND the probe is gone with the process
        assert probe(port, "/live")[0] == 0
    finally:
        kill_group(worker)


def test_not_live_while_a_handler_blocks_the_event_loop_and_live_again_after(
    ministack_url, make_app, tmp_path
):
    app = _app(make_app, ministack_url)
    port, log = free_port(), tmp_path / "worker.log"
    worker = _worker(app, log, port)
    try:
        wait_until(lambda: probe(port, "/live")[0] == 200, 30, "live after start")
        # WHEN an async handler blocks the loop for several times the bound
        started = tmp_path / "stall.started"
        job_id = app.enqueue("stall", {"started": str(started), "stall_s": str(STALL_S * 4)})
        wait_until(started.exists, 30, "the stall's start")
        # THEN /live fails (the server's own thread still answers), and so does /ready
        wait_until(lambda: probe(port, "/live")[0] == 503, STALL_S * 3, "not live during the stall")
        status, checks = probe(port, "/ready")
        assert status == 503 and checks["event_loop"] is False
        # AND once the handler returns, the loop runs again and the probe says so
        wait_until(lambda: probe(port, "/live")[0] == 200, STALL_S * 6, "live after the stall")
        wait_until(lambda: app.get(job_id, load_result=False).status is JobStatus.SUCCEEDED, 30, "stall done")
        assert worker.poll() is None
    finally:
        kill_group(worker)


def test_not_ready_while_the_emulator_is_frozen_and_ready_again_after(make_app, tmp_path):
    # A private MiniStack: freezing the session's one would stall every other test.
    server = MiniStack()
    app = _app(make_app, server.start())
    port, log = free_port(), tmp_path / "worker.log"
    worker = _worker(app, log, port)
    try:
        wait_until(lambda: probe(port, "/ready")[0] == 200, 30, "ready after start")
        # WHEN DynamoDB and SQS stop answering (the emulator is frozen, its sockets stay open)
        os.killpg(server.pid, signal.SIGSTOP)
        try:
            # THEN readiness fails within the bound (plus a check interval), liveness does not; the
            # two services' last answers may be a check apart, so each goes stale in its turn
            wait_until(lambda: probe(port, "/ready")[0] == 503, STALL_S * 4, "not ready while frozen")
            wait_until(lambda: _stale(probe(port, "/ready")[1]), STALL_S * 4, "both services stale")
            assert probe(port, "/ready")[1]["event_loop"] is True
            assert probe(port, "/live")[0] == 200
        finally:
            os.killpg(server.pid, signal.SIGCONT)
        # AND once it answers again, the worker is ready again
        wait_until(lambda: probe(port, "/ready")[0] == 200, 30, "ready after the thaw")
    finally:
        kill_group(worker)
        server.stop()


def _stale(checks: dict) -> bool:
    return checks.get("dynamodb") is False and checks.get("sqs") is False
