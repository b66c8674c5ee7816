"""A job cancelled while it waited can always be retried: its payload is kept, or its message stays.

A job cancelled while it waited has its payload only in its message; the worker that meets the
message copies the payload into the record, then deletes the message. An operator's retry of such a
job sends no hint: the message, still queued, is its witness. The two meet when the retry lands
between the worker's read of the record (``cancelled``) and its keeping of the payload: the keep is
refused, and the message must stay. Forced here with a proxy that holds the worker's keep until the
test's retry has landed; a real ``sqsjobs worker`` process, records read from MiniStack. A worker
that has no handler for the type keeps the payload as well, and a retry once the message may be
gone (SQS's retention) is refused rather than left queued with nothing to bring it back.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from bench.proxy import Pending
from sqsjobs import App, JobStatus
from sqsjobs._clock import FakeClock
from sqsjobs.errors import PayloadInvalid
from tests.apps import guarantees
from tests.integration.helpers import copy_messages, depth, kill_group, wait_until, worker_process
from tests.integration.holding import HoldFirst

pytestmark = pytest.mark.slow

APP = "tests.apps.guarantees:app"
#: Long: a message left to come back by itself would start its job only after this.
VISIBILITY_S = 60


def keeps_a_payload(pending: Pending, body: str) -> bool:
    """The worker's keeping of a cancelled job's payload (``operator.keep_payload``)."""
    values = json.loads(body).get("ExpressionAttributeValues", {}) if pending.action == "UpdateItem" else {}
    return ":cancelled" in values and ":payload" in values


def provisioned(app: App) -> App:
    """``app`` with the handlers of tests/apps/guarantees.py, its table and queues created."""
    app.registry.include(guarantees.app.registry)
    app.provision()
    return app


def runs_once(app, job_id: str, runs_dir: Path) -> None:
    """A worker with the handler runs the retried job, once (its run log has one line)."""
    worker = worker_process(app, APP)
    try:
        wait_until(lambda: app.get(job_id).status is JobStatus.SUCCEEDED, 30, "the retried job")
    finally:
        kill_group(worker)
    assert len((runs_dir / job_id).read_text().splitlines()) == 1


def test_a_retry_landing_while_the_worker_keeps_the_payload_runs_the_job_once_at_once(
    ministack_url, make_app, tmp_path
):
    app = provisioned(make_app(ministack_url, visibility_timeout_s=VISIBILITY_S))
    # GIVEN a job cancelled while it waited: its payload is in its message only
    job_id = app.enqueue("count", {"runs_dir": str(tmp_path), "sleep_s": 0})
    assert app.cancel(job_id) == "cancelled"
    with HoldFirst(ministack_url, keeps_a_payload) as proxy:
        worker = worker_process(app, APP, SQSJOBS_ENDPOINT_URL=proxy.url)
        try:
            # WHEN the worker has read the record cancelled and is about to keep the payload ...
            assert proxy.held.wait(30), "the worker never tried to keep the payload"
            # ... an operator retries the job (no hint: its message carries the payload) ...
            app.retry(job_id)
            assert app.get(job_id).status is JobStatus.QUEUED
            # ... and only then does the worker's keep reach DynamoDB (refused: the job is queued)
            proxy.release.set()
            # THEN the message was not deleted: the job runs once, well before the message's
            # visibility timeout could have brought it back by itself
            waited = wait_until(lambda: app.get(job_id).status is JobStatus.SUCCEEDED, 30, "the retried job")
        finally:
            kill_group(worker)
    assert waited < VISIBILITY_S / 2
    assert len((tmp_path / job_id).read_text().splitlines()) == 1


def test_a_job_whose_payload_went_with_its_expired_message_is_not_retried_without_one(
    ministack_url, make_app, tmp_path
):
    app = provisioned(make_app(ministack_url, message_retention_s=60))
    # GIVEN a job cancelled while it waited, and no worker ever met its message
    job_id = app.enqueue("count", {"runs_dir": str(tmp_path), "sleep_s": 0})
    assert app.cancel(job_id) == "cancelled"
    # WHEN an operator retries it when its message is about to expire (or has): 50 s of 60 later
    later = make_app(ministack_url, name=app.name, message_retention_s=60, clock=FakeClock(time.time() + 50))
    later.registry.include(guarantees.app.registry)  # the same table and queues: not provisioned again
    # THEN the retry is refused, saying why and what to do, and the record stays cancelled: a queued
    # record whose payload SQS deleted would have nothing to bring it back
    with pytest.raises(PayloadInvalid, match=r"message_retention_s.*payload="):
        later.retry(job_id)
    assert app.get(job_id).status is JobStatus.CANCELLED
    # ... while a retry that gives the payload again runs the job once (and the old message, which
    # carries the old payload's hash, is refused by the claim)
    app.retry(job_id, payload={"runs_dir": str(tmp_path), "sleep_s": 0.01})
    runs_once(app, job_id, tmp_path)


def test_a_worker_without_the_handler_keeps_a_cancelled_jobs_payload_before_dropping_its_message(
    ministack_url, make_app, tmp_path
):
    app = provisioned(make_app(ministack_url))
    # GIVEN a job cancelled while it waited (its payload is in its message only)
    job_id = app.enqueue("count", {"runs_dir": str(tmp_path), "sleep_s": 0})
    assert app.cancel(job_id) == "cancelled"
    # WHEN a worker of another deploy, which has no handler for its type, meets its message
    stranger = worker_process(app, "tests.apps.slotted:app")
    try:
        wait_until(lambda: depth(app) == {"visible": 0, "in_flight": 0, "delayed": 0}, 30, "the message gone")
    finally:
        kill_group(stranger)
    # THEN the message is gone but the payload was kept, and the job stays cancelled ...
    job = app.get(job_id)
    assert (job.status, job.payload) == (JobStatus.CANCELLED, {"runs_dir": str(tmp_path), "sleep_s": 0})
    # ... so a retry brings it back with its payload, and a worker with the handler runs it once
    assert app.retry(job_id).payload == job.payload
    runs_once(app, job_id, tmp_path)


def test_copies_of_cancelled_jobs_messages_are_deleted_once_the_payload_is_kept_a_null_one_included(
    ministack_url, make_app, tmp_path
):
    app = provisioned(make_app(ministack_url))
    # GIVEN two jobs cancelled while they waited, one with a null payload, and three extra copies
    # of each one's message in the queue
    payload = {"runs_dir": str(tmp_path), "sleep_s": 0}
    counted, null = app.enqueue("count", payload), app.enqueue("nothing", None)
    assert app.cancel(counted) == app.cancel(null) == "cancelled"
    copy_messages(app, expected=2, copies=3)
    # WHEN a worker meets all eight messages
    worker = worker_process(app, APP)
    try:
        wait_until(lambda: depth(app) == {"visible": 0, "in_flight": 0, "delayed": 0}, 30, "every copy gone")
    finally:
        kill_group(worker)
    # THEN one copy kept the payload and the others were deleted: none was cycled to the DLQ, the
    # null payload included (it needs no keeping), and neither job ran
    assert depth(app, dlq=True) == {"visible": 0, "in_flight": 0, "delayed": 0}
    assert (app.get(counted).status, app.get(counted).payload) == (JobStatus.CANCELLED, payload)
    assert (app.get(null).status, app.get(null).payload) == (JobStatus.CANCELLED, None)
    assert not (tmp_path / counted).exists()
    # ... and both can be retried, each with its payload
    assert app.retry(counted).payload == payload
    assert app.retry(null).status is JobStatus.QUEUED
