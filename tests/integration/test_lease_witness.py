"""A job whose handler runs longer than its message lives keeps a witness: its lease, then an attention entry.

SQS deletes a message ``message_retention_s`` after its first send, even while a worker holds it
invisible. A job whose handler outlives its message then has only its lease to say it is on its way,
and a lease brings nothing back by itself: once its owner dies, the job was rescued by its own
message coming back, which is gone. Real worker and sweeper processes on MiniStack (which drops a
message at its retention, hidden or not), queues keeping a message 60 s (SQS's least), and a
handler whose first attempt runs 80 s.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter

import pytest

from sqsjobs import JobStatus
from sqsjobs.ops.stranded import find_stranded
from tests.apps import stranding
from tests.integration.helpers import depth, kill_group, wait_until, worker_env

pytestmark = pytest.mark.slow

APP = "tests.apps.stranding:app"
RETENTION_S = 60
ENV = {
    "SQSJOBS_MESSAGE_RETENTION_S": str(RETENTION_S),
    # a pass every 5 s, not 2: each costs ~0.3 s of CPU (client and emulator: its features' sweeps and
    # the DLQs of every queue) and the scenario waits past a 60 s retention; stale after 5 s either way
    "SQSJOBS_SWEEP_INTERVAL_S": "5",
    "SQSJOBS_STALE_AFTER_S": "5",
}
#: The first attempt's run: well past the retention, so the message is gone before it ends.
RUN_S = RETENTION_S + 20
GONE = {"visible": 0, "in_flight": 0, "delayed": 0}


@pytest.fixture
def app(ministack_url, make_app):
    app = make_app(ministack_url, lease_s=3.0, visibility_timeout_s=2, message_retention_s=RETENTION_S)
    app.registry.include(stranding.app.registry)
    app.limits.include(stranding.app.limits)
    app.provision()
    return app


def runs(path) -> Counter[str]:
    lines = path.read_text().splitlines() if path.exists() else []
    return Counter(line.split()[0] for line in lines)


def spawn(app, out, *argv: str) -> subprocess.Popen[bytes]:
    """``sqsjobs <argv>`` on ``app``, its log lines appended to ``out`` (read when a test fails)."""
    with out.open("ab") as sink:
        return subprocess.Popen(
            [sys.executable, "-m", "sqsjobs", *argv, "--app", APP],
            env=worker_env(app, SQSJOBS_LOG_LEVEL="INFO", **ENV),
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def record(app, job_id: str) -> dict:
    return app.clients.boto3.get("dynamodb").get_item(
        TableName=app.settings.table_name, Key={"id": {"S": job_id}}, ConsistentRead=True
    )["Item"]


def nothing_left(app) -> None:
    """No message in the queue or its DLQ, and the audit finds no record without a witness.

    Called while the workers still run: a worker's deletes are batched, so one killed just after a
    finish may leave that finish's message for the next worker to drop.
    """
    wait_until(lambda: depth(app) == GONE, 30, "the last message deleted")
    assert depth(app, dlq=True) == GONE
    found = find_stranded(app.run, app.settings, time.time(), segments=2, grace_s=0.0)
    assert found.stranded == [], [s.to_dict() for s in found.stranded]


@pytest.mark.timeout(300)
def test_a_job_killed_after_its_message_expired_is_brought_back_by_the_sweeper(app, tmp_path):
    # GIVEN a job whose first attempt runs 80 s on a worker, a sweeper, and a 60 s retention
    log = tmp_path / "runs"
    out = tmp_path / "processes.log"
    victim = spawn(app, out, "worker", "--concurrency", "2", "--queues", "default")
    sweeper = spawn(app, out, "sweep")
    rescuer = None
    try:
        job_id = app.enqueue("long.run", {"runs": str(log), "sleep_first_s": RUN_S})
        wait_until(lambda: runs(log)[job_id] == 1, 60, "the first attempt started")
        # WHEN SQS drops its message (the retention passed while the worker held it) and the worker
        # is then killed (-9) mid-run
        wait_until(lambda: depth(app) == GONE, RETENTION_S + 30, "SQS dropped the message")
        assert app.get(job_id, load_result=False).status is JobStatus.RUNNING
        witness = record(app, job_id)  # written by the owner's heartbeat before the message went
        assert witness["attn"]["S"].startswith("pending#") and "payload" in witness, witness
        kill_group(victim)
        rescuer = spawn(app, out, "worker", "--concurrency", "2", "--queues", "default")
        # THEN once its lease lapses, the sweeper sends a hint and the job runs again, and succeeds
        wait_until(
            lambda: app.get(job_id, load_result=False).status is JobStatus.SUCCEEDED, 60, "the job succeeded"
        )
        wait_until(lambda: "attn" not in record(app, job_id), 30, "its attention entry removed")
        nothing_left(app)
    finally:
        kill_group(*(p for p in (victim, sweeper, rescuer) if p is not None))
    assert runs(log)[job_id] == 2
    assert app.get(job_id, load_result=False).attempt == 2


@pytest.mark.timeout(300)
def test_a_job_that_finishes_after_its_message_expired_lands_and_leaves_nothing(app, tmp_path):
    # GIVEN a job whose first attempt runs 80 s on a worker, a sweeper, and a 60 s retention
    log = tmp_path / "runs"
    out = tmp_path / "processes.log"
    worker = spawn(app, out, "worker", "--concurrency", "2", "--queues", "default")
    sweeper = spawn(app, out, "sweep")
    try:
        job_id = app.enqueue("long.run", {"runs": str(log), "sleep_first_s": RUN_S})
        wait_until(lambda: runs(log)[job_id] == 1, 60, "the first attempt started")
        # WHEN SQS drops its message while the handler still runs, and the handler then returns
        wait_until(lambda: depth(app) == GONE, RETENTION_S + 30, "SQS dropped the message")
        assert app.get(job_id, load_result=False).status is JobStatus.RUNNING
        witness = record(app, job_id)  # written by the owner's heartbeat before the message went
        assert witness["attn"]["S"].startswith("pending#") and "payload" in witness, witness
        # THEN its finish lands (attempt 1, run once), and no entry, message or copy is left behind
        wait_until(
            lambda: app.get(job_id, load_result=False).status is JobStatus.SUCCEEDED, 60, "the job succeeded"
        )
        wait_until(lambda: "attn" not in record(app, job_id), 30, "its attention entry removed")
        nothing_left(app)
    finally:
        kill_group(worker, sweeper)
    assert runs(log)[job_id] == 1
    assert app.get(job_id, load_result=False).attempt == 1
