"""Expiry (docs/flow-control-expiry.md), attacked from outside: MiniStack over HTTP, real worker processes.

A job not started by its deadline ends ``expired`` and its handler never runs, whichever way its
message reaches a worker: late from a backlog, copied back into the queue after expiry, copied with
its deadline stripped, sent by a thin producer that cannot know the type's bound, or held in the
record for the sweeper. Evidence comes from outside the worker: the run log each handler appends to
(tests/apps/expiring.py), the record, the queue and the DLQ.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sqsjobs import ExpiryInvalid, JobNotFound, JobStatus
from sqsjobs.runtime.sweeper import sweep
from sqsjobs.testing import all_finished, work_until
from tests.apps import expiring
from tests.integration.helpers import (
    depth,
    queue_url,
    receive_dlq,
    send_raw,
    sqs_call,
    wait_until,
    worker_env,
)

pytestmark = pytest.mark.slow

APP = "tests.apps.expiring:app"


@pytest.fixture
def app(ministack_url, make_app):
    app = make_app(ministack_url, lease_s=3.0, visibility_timeout_s=2)
    app.registry.include(expiring.app.registry)  # the same handlers the worker processes load
    app.provision()
    return app


@pytest.fixture
def start_worker(app):
    """Start a real worker process (``concurrency`` slots) on the app's queues; all are killed afterwards."""
    procs: list[subprocess.Popen] = []

    def start(concurrency: int = 4) -> subprocess.Popen:
        proc = subprocess.Popen(
            [sys.executable, "-m", "sqsjobs", "worker", "--app", APP, "--concurrency", str(concurrency)],
            env=worker_env(app),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def runs(runs_dir: Path, job_id: str) -> list[dict]:
    path = runs_dir / job_id
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def status(app, job_id: str) -> JobStatus | None:
    try:
        return app.get(job_id).status
    except JobNotFound:  # no record yet (any other error is a failure, not "not yet")
        return None


def drained(app) -> bool:
    return depth(app) == {"visible": 0, "in_flight": 0, "delayed": 0}


def take_message(app) -> dict:
    """The one message on the queue, received (hidden for 60 s) with a long poll, as a copy to send back."""
    response = sqs_call(
        app, "receive_message", QueueUrl=queue_url(app), WaitTimeSeconds=20, VisibilityTimeout=60
    )
    (message,) = response["Messages"]
    return message


def test_a_backlog_reached_late_expires_the_jobs_past_their_deadline_and_runs_the_others(
    app, start_worker, tmp_path
):
    # GIVEN one slot, taken by a job that runs 4 s, and behind it jobs with a 2 s and a 60 s deadline
    start_worker(concurrency=1)
    blocker = app.enqueue("reports.free", {"runs_dir": str(tmp_path), "sleep_s": 4})
    wait_until(lambda: runs(tmp_path, blocker), 30, "the blocker started")
    late = [
        app.enqueue("reports.free", {"runs_dir": str(tmp_path), "i": i}, expires_after=2) for i in range(3)
    ]
    in_time = app.enqueue("reports.free", {"runs_dir": str(tmp_path), "i": 9}, expires_after=60)
    # WHEN the worker reaches them after the blocker
    wait_until(
        lambda: all(status(app, j) is not None and status(app, j).terminal for j in [*late, in_time]),
        60,
        "all finished",
    )
    # THEN the late ones expired without running, the other ran; nothing went to the DLQ
    for job_id in late:
        job = app.get(job_id)
        assert job.status is JobStatus.EXPIRED and job.attempt == 0, job
        assert job.reason is not None and job.reason.startswith("not started by its deadline")
        assert job.start_by is not None and job.finished_at is not None and job.finished_at > job.start_by
        assert runs(tmp_path, job_id) == []
    assert app.get(in_time).status is JobStatus.SUCCEEDED and len(runs(tmp_path, in_time)) == 1
    wait_until(lambda: drained(app), 20, "queue drained")
    assert receive_dlq(app) == []


def test_a_message_copied_back_into_the_queue_after_expiry_never_runs(app, start_worker, tmp_path):
    # GIVEN a job with a 2 s deadline, its message copied (held aside) while no worker runs
    job_id = app.enqueue("reports.free", {"runs_dir": str(tmp_path)}, expires_after=2)
    copy = take_message(app)
    body = json.loads(copy["Body"])
    assert body["start_by"] == app.get(job_id).start_by.timestamp()
    time.sleep(2.5)
    start_worker()
    # WHEN the copy comes back after the deadline, and a second copy with its deadline stripped
    # (the worker cannot see the deadline in it: only the claim's condition on the record can)
    send_raw(app, copy["Body"])
    stripped = {k: v for k, v in body.items() if k != "start_by"}
    send_raw(app, json.dumps(stripped))
    # THEN the job expired, both copies were deleted, the handler never ran, nothing was dead-lettered
    wait_until(lambda: status(app, job_id) is JobStatus.EXPIRED, 30, "expired")
    # the original comes back too
    sqs_call(
        app,
        "change_message_visibility",
        QueueUrl=queue_url(app),
        ReceiptHandle=copy["ReceiptHandle"],
        VisibilityTimeout=0,
    )
    wait_until(lambda: drained(app), 30, "every copy deleted")
    assert runs(tmp_path, job_id) == []
    assert receive_dlq(app) == []
    assert app.get(job_id).status is JobStatus.EXPIRED


def test_a_stripped_copy_is_refused_by_the_claim_condition_while_the_record_is_still_queued(
    app, start_worker, tmp_path
):
    # GIVEN a job whose deadline passed while its record still says queued (no worker met it yet),
    # and on the queue only a copy of its message without the deadline
    job_id = app.enqueue("reports.free", {"runs_dir": str(tmp_path)}, expires_after=2)
    original = take_message(app)
    stripped = {k: v for k, v in json.loads(original["Body"]).items() if k != "start_by"}
    sqs_call(app, "delete_message", QueueUrl=queue_url(app), ReceiptHandle=original["ReceiptHandle"])
    send_raw(app, json.dumps(stripped))
    time.sleep(2.5)
    assert app.get(job_id).status is JobStatus.QUEUED
    # WHEN a worker receives it
    start_worker()
    # THEN the claim is refused by the record's own deadline: the job expires, never runs
    wait_until(lambda: status(app, job_id) is JobStatus.EXPIRED, 30, "expired")
    wait_until(lambda: drained(app), 30, "the copy deleted")
    assert runs(tmp_path, job_id) == []
    assert receive_dlq(app) == []


def test_a_thin_producer_cannot_weaken_the_types_bound(app, start_worker, tmp_path):
    # GIVEN a producer process that has no handler code enqueues a type whose bound is 15 s
    def thin_enqueue() -> str:
        out = subprocess.run(
            [sys.executable, "-m", "tests.apps.thin_producer", "reports.build", str(tmp_path)],
            env=worker_env(app),
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        return out.stdout.strip()

    late = thin_enqueue()
    record = app.get(late)
    assert record.start_by is None  # it could not know the type's bound, and wrote none
    # WHEN the worker that has the handler starts after the bound, and a second job comes in time
    time.sleep(expiring.TYPE_BOUND_S + 0.5)
    start_worker()
    wait_until(lambda: status(app, late) is JobStatus.EXPIRED, 30, "the late one expired")
    in_time = thin_enqueue()
    wait_until(lambda: status(app, in_time) is JobStatus.SUCCEEDED, 30, "the timely one ran")
    # THEN the worker applied the type's bound from created_at: the late job never ran
    assert runs(tmp_path, late) == []
    assert len(runs(tmp_path, in_time)) == 1
    assert receive_dlq(app) == []


def test_a_producer_with_the_handler_writes_the_types_deadline_and_an_enqueues_own_wins(app):
    # GIVEN the type's bound of 15 s, and an enqueue that asks for 60 s
    typed = app.get(app.enqueue("reports.build", {"runs_dir": "/nowhere"}))
    own = app.get(app.enqueue("reports.build", {"runs_dir": "/nowhere"}, expires_after=60))
    # THEN each record carries its deadline from its enqueue time
    assert typed.start_by is not None and own.start_by is not None
    assert round(typed.start_by.timestamp() - typed.created_at.timestamp(), 3) == expiring.TYPE_BOUND_S
    assert round(own.start_by.timestamp() - own.created_at.timestamp(), 3) == 60
    # AND a job that would expire before it may start is refused at enqueue, nothing written
    with pytest.raises(ExpiryInvalid, match="before it may start"):
        app.enqueue("reports.build", {"runs_dir": "/nowhere"}, delay=expiring.TYPE_BOUND_S + 5)


def test_a_held_job_past_its_deadline_is_expired_by_the_sweeper_not_sent(app, tmp_path):
    # GIVEN two held jobs (run_at beyond the 15 min SQS delay): one with its own deadline just after
    # its run_at, one from a thin producer (no deadline in the record: the type's 15 s bound applies)
    own = app.enqueue("reports.free", {"runs_dir": str(tmp_path)}, delay=1000, expires_after=1001)
    thin = subprocess.run(
        [sys.executable, "-m", "tests.apps.thin_producer", "reports.build", str(tmp_path), "--delay", "1000"],
        env=worker_env(app),
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()
    assert app.get(thin).start_by is None and app.get(own).start_by is not None
    # WHEN the sweeper first reaches them after both deadlines (here: its clock is 1,002 s ahead)
    # (the type's bound, expiring.TYPE_BOUND_S, is the registry's)
    report = sweep(app, now=time.time() + 1002)
    # THEN both are expired instead of sent, their held entries gone, no message on the queue
    assert sorted(report.expired) == sorted([own, thin]) and report.dispatched_held == []
    for job_id in (own, thin):
        job = app.get(job_id)
        assert job.status is JobStatus.EXPIRED and "attn" not in job.extra, job
    assert depth(app) == {"visible": 0, "in_flight": 0, "delayed": 0}
    # AND a sweep before a deadline still sends (the held job of a type without a bound)
    sent = app.enqueue("reports.free", {"runs_dir": str(tmp_path)}, delay=1000)
    report = sweep(app, now=time.time() + 1002)
    assert report.dispatched_held == [sent] and report.expired == []


def test_a_job_started_before_its_deadline_is_not_expired_by_a_later_retry(app, start_worker, tmp_path):
    # GIVEN a worker that is up (a first job ran), and a type with a 5 s bound whose first attempt
    # fails and retries 6 s later (after the deadline)
    start_worker()
    warm = app.enqueue("reports.free", {"runs_dir": str(tmp_path)})
    wait_until(lambda: status(app, warm) is JobStatus.SUCCEEDED, 60, "the worker is up")
    job_id = app.enqueue("reports.flaky", {"runs_dir": str(tmp_path), "retry_after_s": 6})
    # WHEN the retry comes due after the deadline
    wait_until(lambda: status(app, job_id) is not None and status(app, job_id).terminal, 40, "finished")
    # THEN it ran again and succeeded: expiry bounds the wait for a first start only
    job = app.get(job_id)
    assert job.status is JobStatus.SUCCEEDED, job
    attempts = runs(tmp_path, job_id)
    assert [r["attempt"] for r in attempts] == [1, 2]
    assert attempts[1]["at"] > job.start_by.timestamp()


def test_an_expiring_job_costs_what_any_job_costs_and_an_expired_one_two_write_units(ministack_url, make_app):
    # GIVEN a producer and an in-process worker that count DynamoDB's own consumed capacity
    producer = make_app(ministack_url, measure_capacity=True)
    producer.registry.include(expiring.app.registry)
    producer.provision()
    worker = make_app(ministack_url, producer.name, measure_capacity=True)
    worker.registry.include(expiring.app.registry)
    blob = {"runs_dir": "/tmp", "blob": "x" * 512}
    # WHEN ten jobs with a deadline run in time
    producer.requests.reset()
    ids = [producer.enqueue("reports.free", blob, expires_after=600) for _ in range(10)]
    ran = work_until(worker, all_finished(producer, ids), concurrency=10)
    assert {producer.get(i).status for i in ids} == {JobStatus.SUCCEEDED}
    registry = sum(ran.presence.capacity.values())
    units = producer.requests.units("write") + worker.requests.units("write") - registry
    # THEN they cost the happy path's three write units each (enqueue, claim, finish)
    assert units == pytest.approx(3.0 * 10), units
    # AND ten jobs found expired cost two each (enqueue, expire), no index write, no read
    producer.requests.reset()
    worker.requests.reset()
    late = [producer.enqueue("reports.free", blob, expires_after=0.5) for _ in range(10)]
    time.sleep(1)
    ran = work_until(worker, all_finished(producer, late), concurrency=10)
    assert {producer.get(i).status for i in late} == {JobStatus.EXPIRED}
    registry = sum(ran.presence.capacity.values())
    units = producer.requests.units("write") + worker.requests.units("write") - registry
    assert units == pytest.approx(2.0 * 10), units
    assert (
        worker.requests.units("write", "index:attention") - ran.presence.capacity.get("index:attention", 0)
        == 0
    )
