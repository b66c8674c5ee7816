"""Signals from outside (issue 44): real worker processes on MiniStack wait for ``order.paid`` of their
order, time out, look back, and ``order.ship`` jobs are cancelled by ``order.cancelled``.

Evidence: the files each run writes (tests/apps/signalled.py) and the records as read back.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from sqsjobs import JobStatus
from tests.api.helpers import serving
from tests.apps import signalled
from tests.integration.helpers import kill_group, queue_url, sqs_call, wait_until, worker_env, worker_process

pytestmark = pytest.mark.slow

APP = "tests.apps.signalled:app"


@pytest.fixture
def app(ministack_url, make_app):
    # lease 2 s: a running job's lease is renewed (and a cancel seen) about every second
    app = make_app(ministack_url, lease_s=2.0, visibility_timeout_s=3)
    app.registry.include(signalled.app.registry)
    signalled.declare(app)
    app.provision()
    return app


def sweeper_process(app) -> subprocess.Popen[bytes]:
    """``sqsjobs sweep`` every second: it sends a job held asleep on its wait when its timeout comes."""
    return subprocess.Popen(
        [sys.executable, "-m", "sqsjobs", "sweep", "--app", APP],
        env=worker_env(app, SQSJOBS_SWEEP_INTERVAL_S="1"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def lines(runs_dir: Path, job_id: str, what: str) -> int:
    path = runs_dir / f"{job_id}.{what}"
    return len(path.read_text().splitlines()) if path.exists() else 0


def wait_for_payment(app, runs_dir: Path, order_id: int, timeout_s: float, **extra) -> str:
    payload = {"runs_dir": str(runs_dir), "order_id": order_id, "timeout_s": timeout_s, **extra}
    return app.enqueue("order.await_payment", payload)


def asleep(app, runs_dir: Path, job_id: str) -> None:
    """The job reached its wait and its run ended: queued, no slot held."""
    wait_until(
        lambda: lines(runs_dir, job_id, "waits") >= 1 and app.get(job_id).status is JobStatus.QUEUED,
        30,
        f"{job_id} waiting",
    )


def asleep_until(app, job_id: str) -> float:
    """When a job asleep wakes (0: it has not run yet: queued from its enqueue, due now)."""
    job = app.get(job_id)
    due = job.run_at.timestamp() if job.run_at is not None else 0.0
    return due if job.status is JobStatus.QUEUED and due > job.created_at.timestamp() + 30 else 0.0


def test_a_wait_for_order_7_ignores_order_8_resumes_on_7_once_and_a_second_signal_changes_nothing(
    app, tmp_path
):
    # GIVEN a worker and a job waiting for order 7's payment
    worker = worker_process(app, APP, concurrency=2)
    try:
        job_id = wait_for_payment(app, tmp_path, 7, timeout_s=120)
        asleep(app, tmp_path, job_id)

        # WHEN order 8 is paid: nobody waits for it
        other = app.signals.send("order.paid", {"order_id": 8, "amount": 80})
        # THEN the job still waits
        assert other.answered == []
        time.sleep(1.0)
        assert app.get(job_id).status is JobStatus.QUEUED and lines(tmp_path, job_id, "waits") == 1

        # WHEN order 7 is paid, twice
        sent = app.signals.send("order.paid", {"order_id": 7, "amount": 70})
        again = app.signals.send("order.paid", {"order_id": 7, "amount": 71})
        # THEN the first answers the job's wait, the second finds nobody waiting
        assert sent.answered == [f"{job_id}.t1"] and again.answered == []
        wait_until(lambda: app.get(job_id).status is JobStatus.SUCCEEDED, 30, "the job resumed")
    finally:
        kill_group(worker)
    job = app.get(job_id)
    # ... with the first payment's data, on its one attempt, its code before the wait run once
    assert job.result == {"paid": {"order_id": 7, "amount": 70}} and job.attempt == 1
    assert lines(tmp_path, job_id, "before") == 1 and lines(tmp_path, job_id, "waits") == 2


def test_a_wait_times_out_cleanly_and_a_signal_sent_before_it_is_seen_only_with_a_lookback(app, tmp_path):
    # GIVEN order 9 paid before anyone waits for it (the name keeps its signals 5 minutes)
    app.signals.send("order.paid", {"order_id": 9, "amount": 90})
    worker = worker_process(app, APP, concurrency=4)
    sweeper = sweeper_process(app)
    try:
        # WHEN three jobs wait: for order 7 (nothing comes), and twice for order 9, one looking back
        nothing = wait_for_payment(app, tmp_path, 7, timeout_s=3)
        blind = wait_for_payment(app, tmp_path, 9, timeout_s=3)
        back = wait_for_payment(app, tmp_path, 9, timeout_s=60, lookback_s=60)
        # THEN the one looking back sees the payment at once; the other two time out cleanly
        wait_until(lambda: all(app.get(j).status.terminal for j in (nothing, blind, back)), 45, "all ended")
    finally:
        kill_group(worker, sweeper)
    assert app.get(back).result == {"paid": {"order_id": 9, "amount": 90}}
    for job_id in (nothing, blind):
        job = app.get(job_id)
        assert job.status is JobStatus.SUCCEEDED and job.attempt == 1
        assert job.result["timed_out"].startswith("no signal order.paid order_id=")
        assert lines(tmp_path, job_id, "before") == 1


def test_cancel_on_cancels_a_running_job_at_its_next_heartbeat_and_a_queued_one(app, tmp_path):
    # GIVEN a worker shipping order 7 (a long run), order 8, and order 7's second parcel asleep (queued)
    worker = worker_process(app, APP, concurrency=4)
    try:
        running = app.enqueue("order.ship", {"runs_dir": str(tmp_path), "order_id": 7, "work_s": 30})
        napping = app.enqueue(
            "order.ship", {"runs_dir": str(tmp_path), "order_id": 7, "work_s": 0, "nap_s": 60}
        )
        other = app.enqueue("order.ship", {"runs_dir": str(tmp_path), "order_id": 8, "work_s": 4})
        wait_until(lambda: (tmp_path / f"{running}.started").exists(), 30, "order 7 shipping")
        wait_until(lambda: (tmp_path / f"{other}.started").exists(), 30, "order 8 shipping")
        wait_until(
            lambda: asleep_until(app, napping) > time.time() + 30, 30, "order 7's second parcel asleep"
        )

        # WHEN order 7 is cancelled
        sent = app.signals.send("order.cancelled", {"order_id": 7})

        # THEN both of its jobs are cancelled at once: the queued one never ships
        assert sorted(sent.cancelled) == sorted([running, napping])
        for job_id in (running, napping):
            job = app.get(job_id)
            assert (
                job.status is JobStatus.CANCELLED
                and job.reason == "cancelled by signal order.cancelled order_id=7"
            )
        # ... the running one's handler is told at its next heartbeat (lease 2 s: within ~1 s)
        told = wait_until(lambda: (tmp_path / f"{running}.told").exists(), 10, "the run told")
        # (the lease is 2 s: a running job's lease is renewed, and the renewal refused, past half of it)
        assert told < 4.0 and (tmp_path / f"{running}.told").read_text() == "cancel"
        # ... and order 8 ships
        wait_until(lambda: app.get(other).status is JobStatus.SUCCEEDED, 30, "order 8 shipped")
    finally:
        kill_group(worker)
    assert app.get(running).status is JobStatus.CANCELLED and app.get(running).result is None
    assert not (tmp_path / f"{napping}.started").exists()
    assert app.get(other).result == {"shipped": True}


def test_a_job_enqueued_before_its_cancel_signal_is_cancelled_at_its_claim_and_one_after_runs(app, tmp_path):
    # GIVEN order 7's shipment enqueued while no worker runs
    before = app.enqueue("order.ship", {"runs_dir": str(tmp_path), "order_id": 7, "work_s": 0})
    # WHEN order 7 is cancelled (nothing registered yet: the job was never claimed), then shipped again
    assert app.signals.send("order.cancelled", {"order_id": 7}).cancelled == []
    time.sleep(0.01)
    after = app.enqueue("order.ship", {"runs_dir": str(tmp_path), "order_id": 7, "work_s": 0})
    worker = worker_process(app, APP, concurrency=2)
    try:
        wait_until(lambda: all(app.get(j).status.terminal for j in (before, after)), 30, "both ended")
    finally:
        kill_group(worker)
    # THEN the first is cancelled at its claim, before its handler; the one enqueued after runs
    first = app.get(before)
    assert first.status is JobStatus.CANCELLED and not (tmp_path / f"{before}.started").exists()
    assert "cancelled by signal order.cancelled order_id=7" in str(first.reason or first.last_error)
    assert app.get(after).result == {"shipped": True}


def test_a_signal_posted_over_http_and_one_sent_by_an_aws_service_as_a_message_wake_their_waiters(
    app, tmp_path
):
    # GIVEN a worker and two jobs waiting, for orders 5 and 6
    worker = worker_process(app, APP, concurrency=4)
    try:
        by_http = wait_for_payment(app, tmp_path, 5, timeout_s=120)
        by_message = wait_for_payment(app, tmp_path, 6, timeout_s=120)
        asleep(app, tmp_path, by_http)
        asleep(app, tmp_path, by_message)
        # WHEN order 5's payment is POSTed with the API token, and order 6's is put on the
        # queue as a foreign message of the built-in type sqsjobs.signal (an EventBridge rule's target)
        with serving(app, token="s3cret-token-0123") as url:
            auth = {"Authorization": "Bearer s3cret-token-0123"}
            body = {"name": "order.paid", "data": {"order_id": 5}}
            assert httpx.post(url + "/signals", json=body).status_code == 401
            posted = httpx.post(url + "/signals", json=body, headers=auth)
            assert posted.json() == {"name": "order.paid", "answered": 1, "cancelled": 0}
            keyless = httpx.post(url + "/signals", json={"name": "order.paid", "data": {}}, headers=auth)
            assert keyless.status_code == 422
        message = {
            "sqsjobs": 1,
            "type": "sqsjobs.signal",
            "payload": {"name": "order.paid", "data": {"order_id": 6}},
        }
        sqs_call(app, "send_message", QueueUrl=queue_url(app), MessageBody=json.dumps(message))
        # THEN both wake with their data
        wait_until(lambda: all(app.get(j).status.terminal for j in (by_http, by_message)), 30, "both woke")
    finally:
        kill_group(worker)
    assert app.get(by_http).result == {"paid": {"order_id": 5}}
    assert app.get(by_message).result == {"paid": {"order_id": 6}}
