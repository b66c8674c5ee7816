"""The outbox's promises from outside: real producer, relay and worker processes, MiniStack, Postgres.

- 200 transactions from 8 producer processes, a quarter rolled back: exactly the committed jobs run,
  each once;
- a relay SIGKILLed between its enqueue and its delete: nothing lost, nothing run twice;
- a producer SIGKILLed before its commit: nothing enqueued;
- the idle relay's latency, commit → job start (printed for docs/outbox.md, never asserted).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest

from sqsjobs import JobNotFound, JobStatus
from sqsjobs.outbox.schema import count
from tests.apps.outboxed import Work
from tests.integration.helpers import kill_group, wait_until, worker_env, worker_process

pytestmark = pytest.mark.slow
APP = "tests.apps.outboxed:app"


@pytest.fixture
def app(make_app, ministack_url):
    app = make_app(ministack_url)

    @app.job("outboxed", max_attempts=3, timeout=30)
    def outboxed(payload: Work, ctx) -> int:
        return payload.n

    app.provision()
    return app


def module(app, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.apps.outboxed", *args],
        env=worker_env(app),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )


def relay(app, dsn: str, *options: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "sqsjobs", "outbox", "relay", "--app", APP, "--dsn", dsn, *options],
        env=worker_env(app, POWERTOOLS_METRICS_DISABLED="true"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def outbox_rows(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        return count(conn)


def runs(runs_dir: Path) -> dict[int, list[str]]:
    return {int(p.name): p.read_text().splitlines() for p in runs_dir.iterdir()}


def test_200_transactions_from_8_processes_run_exactly_the_committed_jobs_once(app, dsn, tmp_path):
    runs_dir = tmp_path / "runs"
    runs_dir.mkdir()
    producers = [module(app, "produce", dsn, str(runs_dir), str(25 * i), "25") for i in range(8)]
    procs = [relay(app, dsn, "--batch-size", "20"), worker_process(app, APP, concurrency=8)]
    try:
        for p in producers:
            assert p.communicate(timeout=120)[0].strip() == "done"
        committed = {n for n in range(200) if n % 4}
        with psycopg.connect(dsn) as conn:  # the business rows: the jobs' transactions' own writes
            assert {int(r[0][1:]) for r in conn.execute("SELECT id FROM orders")} == committed
        wait_until(lambda: len(list(runs_dir.iterdir())) >= len(committed), 120, "the committed jobs ran")
        wait_until(lambda: outbox_rows(dsn) == 0, 30, "the relay emptied the outbox")
        time.sleep(1.0)  # room for a duplicate run to show up before the count
        done = runs(runs_dir)
        assert set(done) == committed
        assert {n: len(ids) for n, ids in done.items() if len(ids) != 1} == {}
        assert {app.get(ids[0]).status for ids in done.values()} == {JobStatus.SUCCEEDED}
    finally:
        kill_group(*producers, *procs)


def test_a_relay_killed_between_its_send_and_its_delete_loses_nothing_and_runs_nothing_twice(
    app, dsn, tmp_path
):
    runs_dir = tmp_path / "runs"
    runs_dir.mkdir()
    producer = module(app, "produce", dsn, str(runs_dir), "1000", "60")  # 45 commit (n % 4 != 0)
    assert producer.communicate(timeout=60)[0].strip() == "done"
    committed = {n for n in range(1000, 1060) if n % 4}
    crashing = module(app, "crash-relay", dsn, "10", "2")  # dies after its second batch's enqueue
    assert crashing.communicate(timeout=60)[0].strip() == "killed after 10"
    assert crashing.returncode == -9
    # The second batch's jobs exist and their rows are still there: they will be sent again.
    assert outbox_rows(dsn) == len(committed) - 10
    procs = [relay(app, dsn, "--batch-size", "10"), worker_process(app, APP, concurrency=8)]
    try:
        wait_until(lambda: outbox_rows(dsn) == 0, 60, "the second relay emptied the outbox")
        wait_until(lambda: len(list(runs_dir.iterdir())) >= len(committed), 60, "every committed job ran")
        time.sleep(1.0)
        done = runs(runs_dir)
        assert set(done) == committed
        assert {n: len(ids) for n, ids in done.items() if len(ids) != 1} == {}
    finally:
        kill_group(*procs)


def test_a_producer_killed_before_its_commit_enqueues_nothing(app, dsn, tmp_path):
    hung = module(app, "hang", dsn, str(tmp_path))
    job_id = hung.stdout.readline().strip()
    assert job_id  # the row is written, in a transaction that will never commit
    kill_group(hung)
    hung.stdout.close()
    wait_until(lambda: outbox_rows(dsn) == 0, 10, "the outbox (nothing committed)")
    proc = relay(app, dsn, "--poll", "0.2")
    try:
        # a later commit proves the relay has passed over the table
        with psycopg.connect(dsn) as conn, conn.transaction():
            later = app.enqueue("outboxed", Work(n=1, dir=str(tmp_path)), connection=conn)
        wait_until(lambda: outbox_rows(dsn) == 0, 30, "the relay moved the later job")
        assert app.get(later).status == JobStatus.QUEUED
        with pytest.raises(JobNotFound):
            app.get(job_id)
        assert outbox_rows(dsn) == 0
    finally:
        kill_group(proc)


def started(app, job_id: str):
    try:
        return app.get(job_id).started_at
    except JobNotFound:  # not moved by the relay yet
        return None


def test_idle_relay_latency_from_commit_to_job_start(app, dsn, tmp_path):
    procs = [relay(app, dsn), worker_process(app, APP, concurrency=2)]  # default 5 s poll: NOTIFY wakes it
    latencies = []
    try:
        with psycopg.connect(dsn) as conn:
            with conn.transaction():  # a first job, so that both processes are up before the measure
                first = app.enqueue("outboxed", Work(n=-1, dir=str(tmp_path)), connection=conn)
            wait_until(lambda: started(app, first), 60, "the first job started")
            for n in range(15):
                with conn.transaction():
                    job_id = app.enqueue("outboxed", Work(n=n, dir=str(tmp_path)), connection=conn)
                committed = time.time()
                wait_until(lambda i=job_id: started(app, i), 60, f"job {n} started")
                latencies.append(started(app, job_id).timestamp() - committed)
                time.sleep(0.2)  # idle again: the relay back on LISTEN, the worker on its long poll
    finally:
        kill_group(*procs)
    print(
        f"\noutbox idle latency commit -> job start over {len(latencies)} jobs: "
        f"p50 {statistics.median(latencies) * 1000:.0f} ms, max {max(latencies) * 1000:.0f} ms"
    )
    assert len(latencies) == 15
