"""The lifecycle's promises, attacked from outside: real worker processes, raw SQS, kill -9 (MiniStack).

Nothing here runs a worker in the test's own process. Evidence comes from outside the worker: a
run log each handler appends to (tests/apps/guarantees.py), the record read over HTTP, and the
queues. No sweeper runs in any of these tests: recovery must not depend on it (README,
"Guarantees": a killed worker's job runs again without the sweeper).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from sqsjobs import JobStatus
from tests.apps import guarantees
from tests.integration.helpers import copy_messages, wait_until, worker_env, worker_process
from tests.integration.helpers import kill_group as kill

pytestmark = pytest.mark.slow

APP = "tests.apps.guarantees:app"


def start_worker(app, *, concurrency: int = 4, **env: str) -> subprocess.Popen[bytes]:
    return worker_process(app, APP, concurrency=concurrency, **env)


def runs(runs_dir: Path, job_id: str) -> list[list[str]]:
    path = runs_dir / job_id
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


def _guarantees_app(make_app, url):
    app = make_app(url, lease_s=3.0, visibility_timeout_s=2)
    app.registry.include(guarantees.app.registry)  # the same handlers the worker processes load
    app.provision()
    return app


@pytest.fixture
def app(ministack_url, make_app):
    return _guarantees_app(make_app, ministack_url)


@pytest.fixture
def any_backend_app(backend_url, make_app):
    """MiniStack and the serialised embedded moto of ``sqsjobs dev``, reached over HTTP by the workers."""
    return _guarantees_app(make_app, backend_url)


def test_copies_of_each_message_in_one_receive_batch_run_each_job_once(any_backend_app, tmp_path):
    app = any_backend_app
    # GIVEN 40 jobs, and three extra copies of each job's message sent straight into the queue,
    # as SQS may deliver them (so copies of one message land in one receive batch of one worker)
    ids = [app.enqueue("count", {"runs_dir": str(tmp_path), "sleep_s": 0.3}) for _ in range(40)]
    copy_messages(app, len(ids), copies=3)

    # WHEN one worker with 16 slots drains the 160 messages (with leases it keeps: a worker stalled
    # past a 3 s lease under the suite's load, its renewals waiting on the serialised moto, lets a
    # copy rescue a job that is still running, which is at-least-once, not what this test is about)
    proc = start_worker(app, concurrency=16, SQSJOBS_LEASE_S="30")
    try:
        wait_until(lambda: all(app.get(i).status is JobStatus.SUCCEEDED for i in ids), 90, "all succeeded")
    finally:
        kill(proc)

    # THEN every handler ran exactly once, and every record says attempt 1
    assert {i: len(runs(tmp_path, i)) for i in ids} == dict.fromkeys(ids, 1)
    assert {app.get(i).attempt for i in ids} == {1}


def test_a_killed_workers_job_reruns_on_another_worker_without_a_sweeper(app, tmp_path):
    # GIVEN two worker processes and a 4 s job
    job_id = app.enqueue("sleepy", {"runs_dir": str(tmp_path), "sleep_s": 4})
    procs = [start_worker(app), start_worker(app)]
    try:
        wait_until(lambda: len(runs(tmp_path, job_id)) == 1, 30, "first run started")
        _, owner, pid = runs(tmp_path, job_id)[0]
        victim = next(p for p in procs if str(p.pid) == pid)
        # WHEN the worker running it is killed mid-job
        os.killpg(victim.pid, signal.SIGKILL)
        victim.wait(10)
        # THEN the other worker runs it to success within lease + visibility + run time (+ slack)
        bound = app.settings.lease_s + app.settings.visibility_timeout_s + 4 + 10
        wait_until(lambda: app.get(job_id).status is JobStatus.SUCCEEDED, bound, "rerun on the survivor")
    finally:
        for p in procs:
            kill(p)
    job = app.get(job_id)
    assert job.attempt == 2
    assert runs(tmp_path, job_id)[1][1] != owner


def test_a_handler_that_kills_its_process_ends_dead_after_its_attempts_with_a_reason(app, tmp_path):
    # GIVEN a job whose handler kills its own process every time (as an OOM kill would),
    # and a supervisor that restarts the worker whenever it dies (as ECS does)
    job_id = app.enqueue("suicidal", {"runs_dir": str(tmp_path)})
    proc = start_worker(app, concurrency=1)
    restarts = 0
    try:
        deadline = time.monotonic() + 90
        while app.get(job_id).status is not JobStatus.DEAD:
            assert time.monotonic() < deadline, f"still {app.get(job_id).status} after {restarts} restarts"
            if proc.poll() is not None:
                restarts += 1
                proc = start_worker(app, concurrency=1)
            time.sleep(0.2)
    finally:
        kill(proc)
    # THEN it ran max_attempts times, never more, and the record says why it died
    job = app.get(job_id)
    assert len(runs(tmp_path, job_id)) == job.max_attempts == 3
    assert job.attempt == 3
    assert "never finished" in (job.reason or ""), job.reason


THIN_PRODUCER = textwrap.dedent(
    """
    import sys
    from sqsjobs import App

    app = App(sys.argv[1])  # no handlers: this service only enqueues
    assert "flaky" not in app.registry
    print(app.enqueue("flaky", {"runs_dir": sys.argv[2]}, queue="default"))  # no handler: name the queue
    assert "tests.apps.guarantees" not in sys.modules
    """
)


def test_a_producer_without_the_handler_code_keeps_the_types_retry_policy(app, tmp_path):
    # GIVEN a producer process that never imports the handler module enqueues a "flaky" job
    env = worker_env(app)
    out = subprocess.run(
        [sys.executable, "-c", THIN_PRODUCER, app.name, str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    job_id = out.stdout.strip()
    # WHEN a worker that has the handler (max_attempts=4) runs it and the first attempt fails
    proc = start_worker(app)
    try:
        wait_until(lambda: app.get(job_id).status.terminal, 60, "job finished")
    finally:
        kill(proc)
    # THEN the type's policy applied: retried, and succeeded on attempt 2
    job = app.get(job_id)
    assert (job.status, job.attempt, job.max_attempts) == (JobStatus.SUCCEEDED, 2, 4)
    assert len(runs(tmp_path, job_id)) == 2


def test_a_job_cancelled_while_it_waited_can_be_retried_before_or_after_a_worker_met_its_message(
    app, tmp_path
):
    # GIVEN two jobs cancelled while they waited (their records keep no payload: the messages do)
    before = app.enqueue("count", {"runs_dir": str(tmp_path), "sleep_s": 0}, delay=3)
    after = app.enqueue("count", {"runs_dir": str(tmp_path), "sleep_s": 0})
    assert app.cancel(before) == app.cancel(after) == "cancelled"
    # WHEN a worker meets `after`'s message (it drops the message, keeping the payload) ...
    proc = start_worker(app)
    try:
        wait_until(lambda: app.get(after).payload is not None, 30, "payload kept from the message")
        # ... and an operator retries both: `before` while its delayed message is still queued
        app.retry(before)
        app.retry(after)
        # THEN both run, once each, with their payloads
        wait_until(
            lambda: all(app.get(j).status is JobStatus.SUCCEEDED for j in (before, after)), 60, "both ran"
        )
    finally:
        kill(proc)
    assert len(runs(tmp_path, before)) == len(runs(tmp_path, after)) == 1
