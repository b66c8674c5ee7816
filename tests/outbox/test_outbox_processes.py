"""The outbox's promises from outside: real producer, relay and worker processes, MiniStack, Postgres.

- 200 transactions from 8 producer processes, a quarter rolled back: exactly the committed jobs run,
  each once;
- a relay SIGKILLed between its enqueue and its delete: nothing lost, nothing run twice;
- a producer SIGKILLed before its commit: nothing enqueued;
- rows the relay can never enqueue (one of each kind) among good ones: set aside with their reason,
  the good rows of their partitions still move, the relay keeps running;
- a commit wakes the idle relay through LISTEN/NOTIFY (its poll an hour away), each of 15 times; the
  latency, commit → job start, is printed for docs/outbox.md, never asserted.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from typer.testing import CliRunner

from sqsjobs import App, JobNotFound, JobStatus
from sqsjobs.cli.main import cli
from sqsjobs.outbox import write_job
from sqsjobs.outbox.tables import count
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


def relay(
    app, dsn: str, *options: str, stderr: Any = subprocess.DEVNULL, **env: str
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "sqsjobs", "outbox", "relay", "--app", APP, "--dsn", dsn, *options],
        env=worker_env(app, POWERTOOLS_METRICS_DISABLED="true", **env),
        stdout=subprocess.DEVNULL,
        stderr=stderr,
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


#: The relay's polling fallback in the NOTIFY test: an hour, far past the test's waits, so that a row
#: moves within them only because the commit's NOTIFY woke the idle relay.
NO_POLL_S = 3600
#: The wake-ups the NOTIFY test counts (and times, for docs/outbox.md).
WAKE_UPS = 15


def test_a_commit_wakes_the_idle_relay_through_listen_notify(app, dsn, tmp_path):
    # GIVEN an idle relay that polls once an hour, and a worker
    procs = [relay(app, dsn, "--poll", str(NO_POLL_S)), worker_process(app, APP, concurrency=2)]
    latencies = []
    try:
        with psycopg.connect(dsn) as conn:
            with conn.transaction():  # a first job, so that both processes are up before the count
                first = app.enqueue("outboxed", Work(n=-1, dir=str(tmp_path)), connection=conn)
            wait_until(lambda: started(app, first), 60, "the first job started")
            # WHEN jobs are committed one at a time, each once the relay is idle again
            for n in range(WAKE_UPS):
                with conn.transaction():
                    job_id = app.enqueue("outboxed", Work(n=n, dir=str(tmp_path)), connection=conn)
                committed = time.time()
                # THEN each one moves and starts: no poll comes within the hour, so its NOTIFY woke the relay
                wait_until(lambda i=job_id: started(app, i), 30, f"job {n} moved by its NOTIFY")
                latencies.append(started(app, job_id).timestamp() - committed)
                time.sleep(0.2)  # idle again: the relay back on LISTEN, the worker on its long poll
    finally:
        kill_group(*procs)
    assert outbox_rows(dsn) == 0
    assert len(latencies) == WAKE_UPS  # each a wake-up; their figures are a report, never asserted
    print(
        f"\noutbox idle latency commit -> job start over {len(latencies)} jobs: "
        f"p50 {statistics.median(latencies) * 1000:.0f} ms, max {max(latencies) * 1000:.0f} ms"
    )


def outbox_cli(dsn: str, *args: str) -> Any:
    result = CliRunner().invoke(cli, ["outbox", *args, "--dsn", dsn, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_rows_the_relay_can_never_enqueue_are_set_aside_with_their_reason_and_the_rest_moves(
    app, dsn, tmp_path
):
    """One row of each permanent refusal among good rows, in the shared partition and in another.

    The producer writes with its own App (its own version of the types, its own limits): each bad
    row was valid where it was written, and is refused only by the relay's App.
    """
    runs_dir = tmp_path / "runs"
    runs_dir.mkdir()
    producer = App(app.name, endpoint_url=app.settings.endpoint_url)
    producer.job("outboxed")(lambda payload, ctx: None)  # any payload: no model here
    producer.job("outboxed.v2")(lambda payload, ctx: None)  # a type the relay's App does not have
    taken = app.enqueue("outboxed", Work(n=900, dir=str(runs_dir)), idempotency_key="taken")

    def work(n: int, **extra: Any) -> dict[str, Any]:
        return {"n": n, "dir": str(runs_dir), **extra}

    good: list[int] = []
    bad: dict[str, str] = {}
    with psycopg.connect(dsn) as conn, conn.transaction():

        def write(job_type: str, payload: Any, partition: str | None = None, **options: Any) -> str:
            registry = producer.registry
            return write_job(
                conn,
                registry,
                job_type,
                payload,
                settings=producer.settings,
                now=time.time(),
                partition=partition,
                **options,
            )

        for n in range(0, 3):
            write("outboxed", work(n))
            good.append(n)
        bad["unknown type"] = write("outboxed.v2", work(100))
        write("outboxed", work(3))
        bad["invalid payload"] = write("outboxed", {"n": "three", "dir": str(runs_dir)})
        bad["missing queue"] = write("outboxed", work(101), queue="nowhere")
        for n in range(4, 7):
            write("outboxed", work(n))
        bad["too large"] = write("outboxed", {"n": 102, "dir": "x" * 40_000})
        bad["no bucket"] = write("outboxed", {"n": 103, "dir": "y" * 8_000})
        write("outboxed", work(7))
        good.extend(range(3, 8))
        for n in range(10, 13):  # another partition, its poisoned row between good ones
            write("outboxed", work(n), "p2")
            if n == 11:
                bad["idempotency conflict"] = write("outboxed", work(104), "p2", idempotency_key="taken")
        good.extend(range(10, 13))
    assert bad["idempotency conflict"] == taken
    log = tmp_path / "relay.log"
    with log.open("wb") as stderr:
        procs = [
            relay(
                app,
                dsn,
                "--batch-size",
                "20",
                "--poll",
                "0.5",
                stderr=stderr,
                SQSJOBS_MAX_PAYLOAD_BYTES="32768",  # the producer's limit is 64 MiB
                SQSJOBS_INLINE_PAYLOAD_BYTES="4096",  # larger: an S3 object, in a bucket that is not there
                SQSJOBS_PAYLOAD_BUCKET=f"nowhere-{uuid.uuid4().hex[:8]}",
            ),
            worker_process(app, APP, concurrency=4),
        ]
    try:
        wait_until(lambda: outbox_rows(dsn) == 0, 30, "the relay emptied the outbox")
        wait_until(lambda: {*good, 900} <= {int(p.name) for p in runs_dir.iterdir()}, 30, "the good jobs ran")
        dead = outbox_cli(dsn, "dead")["rows"]
        reasons = {r["job_id"]: r["reason"] for r in dead}
        assert set(reasons) == set(bad.values())
        assert reasons[bad["unknown type"]].startswith("unknown job type")
        assert "PayloadInvalid" in reasons[bad["invalid payload"]]
        assert "PayloadTooLarge" in reasons[bad["too large"]]
        assert reasons[bad["missing queue"]].startswith(("QueueDoesNotExist", "AWS.SimpleQueueService"))
        assert reasons[bad["no bucket"]].startswith("NoSuchBucket")
        assert "idempotency key" in reasons[bad["idempotency conflict"]]
        assert {r["partition"] for r in dead if r["job_id"] == taken} == {"p2"}
        assert outbox_cli(dsn, "count") == {"rows": 0, "dead": len(bad)}
        for kind, job_id in bad.items():
            if kind != "idempotency conflict":  # its id names the key's first job, untouched
                with pytest.raises(JobNotFound):
                    app.get(job_id)
        assert app.get(taken).result == 900  # the key's job, with its own payload
        done = runs(runs_dir)
        assert set(done) == {*good, 900}  # no refused row ran (104: the conflicting payload)
        assert {n: len(ids) for n, ids in done.items() if len(ids) != 1} == {}
        # The relay runs on: a retried row comes back, is refused again, and a later job still moves.
        unknown = next(r["id"] for r in dead if r["job_id"] == bad["unknown type"])
        assert outbox_cli(dsn, "retry", str(unknown)) == {"retried": 1}
        with psycopg.connect(dsn) as conn, conn.transaction():
            app.enqueue("outboxed", Work(n=20, dir=str(runs_dir)), connection=conn)
        wait_until(lambda: (runs_dir / "20").exists(), 30, "a job committed after the refusals ran")
        wait_until(lambda: outbox_rows(dsn) == 0, 30, "the retried row was set aside again")
        assert outbox_cli(dsn, "count") == {"rows": 0, "dead": len(bad)}
        assert procs[0].poll() is None
    finally:
        kill_group(*procs)
    assert log.read_text().count("set aside, it cannot be enqueued") == len(bad) + 1
