"""The container health checks (the Dockerfile's HEALTHCHECK, the ECS task definition's healthCheck), run
for real against a worker process's probe: they pass while it is live and fail when its event loop
stalls or nothing answers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from sqsjobs.runtime.health_probe import live_check_command
from tests.emulators import REPO_ROOT, free_port
from tests.integration.helpers import kill_group, wait_until
from tests.integration.test_health import STALL_S, _app, _worker, probe


def dockerfile_check() -> list[str]:
    [line] = [
        ln for ln in (REPO_ROOT / "Dockerfile").read_text().splitlines() if ln.startswith("HEALTHCHECK ")
    ]
    return json.loads(line[line.index(" CMD ") + len(" CMD ") :])


def check(command: list[str], port: int | None) -> int:
    """Run a health check command as the container would (``python`` is this interpreter here)."""
    env = {k: v for k, v in os.environ.items() if k != "SQSJOBS_HEALTH_PORT"}
    if port is not None:
        env["SQSJOBS_HEALTH_PORT"] = str(port)
    argv = [sys.executable if command[0] == "python" else command[0], *command[1:]]
    return subprocess.run(argv, env=env, capture_output=True, timeout=30).returncode


def test_the_worker_container_checks_its_live_probe_and_the_sweeper_none(full):
    tasks = [
        t["Properties"]["ContainerDefinitions"][0]
        for t in full.resources("AWS::ECS::TaskDefinition").values()
    ]
    worker = next(c for c in tasks if c["Name"] == "worker")
    sweeper = next(c for c in tasks if c["Name"] == "sweeper")
    env = {e["Name"]: e["Value"] for e in worker["Environment"]}
    port = int(env["SQSJOBS_HEALTH_PORT"])  # FargateWorker.health_port's default
    assert worker["HealthCheck"]["Command"] == ["CMD", *live_check_command(port)]
    assert worker["HealthCheck"]["StartPeriod"] > 0 and worker["HealthCheck"]["Retries"] >= 1
    assert "HealthCheck" not in sweeper
    assert "SQSJOBS_HEALTH_PORT" not in {e["Name"] for e in sweeper["Environment"]}


@pytest.mark.slow
def test_both_checks_pass_while_the_worker_is_live_and_fail_when_it_stalls_or_is_gone(
    ministack_url, make_app, tmp_path
):
    app = _app(make_app, ministack_url)
    port, log = free_port(), tmp_path / "worker.log"
    docker = dockerfile_check()
    # nothing listens yet: both fail (the Dockerfile's passes only when no port is configured)
    assert check(live_check_command(port), None) != 0
    assert check(docker, port) != 0
    assert check(docker, None) == 0
    worker = _worker(app, log, port)
    try:
        wait_until(lambda: probe(port, "/live")[0] == 200, 30, "live after start")
        assert check(live_check_command(port), None) == 0
        assert check(docker, port) == 0
        # WHEN an async handler blocks the loop
        started = tmp_path / "stall.started"
        app.enqueue("stall", {"started": str(started), "stall_s": str(STALL_S * 5)})
        wait_until(started.exists, 30, "the stall's start")
        wait_until(lambda: probe(port, "/live")[0] == 503, STALL_S * 3, "not live during the stall")
        # THEN both checks fail
        assert check(live_check_command(port), None) != 0
        assert check(docker, port) != 0
    finally:
        kill_group(worker)
