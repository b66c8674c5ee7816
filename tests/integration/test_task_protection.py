"""ECS task scale-in protection: a real worker process protects its task while it holds a job.

ECS is not available here: the agent's endpoint is ``tests/ecs_agent.py``, an emulator of the
documented ``$ECS_AGENT_URI/task-protection/v1/state`` on 127.0.0.1 that records each call (as
MiniStack stands in for DynamoDB and SQS). The worker finds it as on ECS, through ``ECS_AGENT_URI``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sqsjobs import JobStatus
from tests.apps import held
from tests.ecs_agent import EcsAgent
from tests.integration.helpers import kill_group, wait_until, worker_env

pytestmark = pytest.mark.slow

APP = "tests.apps.held:app"
EXPIRES_MIN = 7


def _worker(app, log: Path, agent: EcsAgent) -> subprocess.Popen[bytes]:
    env = worker_env(
        app,
        ECS_AGENT_URI=agent.uri,
        SQSJOBS_TASK_PROTECTION_MINUTES=str(EXPIRES_MIN),
        SQSJOBS_LOG_LEVEL="INFO",
        SQSJOBS_METRICS_INTERVAL_S="1",
    )
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "sqsjobs", "worker", "--app", APP, "--concurrency", "2"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _job(app, tmp_path: Path, name: str) -> tuple[str, Path, Path]:
    started, release = tmp_path / f"{name}.started", tmp_path / f"{name}.release"
    return app.enqueue("held", {"started": str(started), "release": str(release)}), started, release


def _succeeded(app, job_id: str) -> bool:
    return app.get(job_id, load_result=False).status is JobStatus.SUCCEEDED


@pytest.fixture
def held_app(ministack_url, make_app):
    app = make_app(ministack_url)
    app.registry.include(held.app.registry)
    app.provision()
    return app


def test_the_task_is_protected_while_a_job_runs_and_cleared_once_idle(held_app, tmp_path):
    app = held_app
    log = tmp_path / "worker.log"
    with EcsAgent() as agent:
        worker = _worker(app, log, agent)
        try:
            wait_until(lambda: "worker started" in log.read_text(), 30, "worker start")
            # GIVEN an idle worker: it has asked for nothing
            assert agent.puts() == []
            # WHEN a job runs (and holds until released)
            job_id, started, release = _job(app, tmp_path, "one")
            wait_until(started.exists, 30, "the job's start")
            # THEN the task is protected, with the bounded expiry
            wait_until(lambda: agent.protected, 10, "protection while the job runs")
            assert agent.puts()[0].body == {"ProtectionEnabled": True, "ExpiresInMinutes": EXPIRES_MIN}
            assert not _succeeded(app, job_id)
            # WHEN the job ends
            release.touch()
            wait_until(lambda: _succeeded(app, job_id), 30, "the job's success")
            # THEN the protection is cleared once the worker holds nothing
            wait_until(lambda: not agent.protected, 15, "protection cleared when idle")
            puts = agent.puts()
            assert puts[-1].body == {"ProtectionEnabled": False}
            assert all(c.status == 200 for c in puts), puts
            # one protect and one clear for the job: no call per beat while nothing changes
            assert [c.body["ProtectionEnabled"] for c in puts] == [True, False], puts
        finally:
            kill_group(worker)


def test_a_failing_agent_never_stops_the_worker_and_the_next_beat_protects(held_app, tmp_path):
    app = held_app
    log = tmp_path / "worker.log"
    with EcsAgent() as agent:
        # GIVEN an agent whose ECS call fails
        agent.fail(500)
        worker = _worker(app, log, agent)
        try:
            wait_until(lambda: "worker started" in log.read_text(), 30, "worker start")
            job_id, started, release = _job(app, tmp_path, "one")
            wait_until(started.exists, 30, "the job's start")
            wait_until(lambda: any(c.status == 500 for c in agent.puts()), 10, "a failed protect call")
            # THEN the worker logs it, counts it in its metrics, and keeps working
            wait_until(lambda: "task protection not updated" in log.read_text(), 10, "the failure's log line")
            wait_until(lambda: _emf_errors(log) >= 1, 10, "TaskProtectionErrors in the EMF metrics")
            assert worker.poll() is None
            # WHEN the agent recovers, the next heartbeat protects the task that still holds its job
            agent.fail(None)
            wait_until(lambda: agent.protected, 15, "protection after the agent recovered")
            release.touch()
            wait_until(lambda: _succeeded(app, job_id), 30, "the job's success")
            wait_until(lambda: not agent.protected, 15, "protection cleared when idle")
            # AND a second job runs as usual
            second, _, release2 = _job(app, tmp_path, "two")
            release2.touch()
            wait_until(lambda: _succeeded(app, second), 30, "the second job's success")
        finally:
            kill_group(worker)


def _emf_errors(log: Path) -> float:
    total = 0.0
    for line in log.read_text(errors="replace").splitlines():
        if "TaskProtectionErrors" in line:
            try:
                total += sum(json.loads(line)["TaskProtectionErrors"])  # EMF: a list of values
            except (ValueError, KeyError, TypeError):
                continue
    return total
