"""``Replace()``, from outside: a worker process runs a document's re-index, and a newer enqueue of its key stops it.

Evidence: the files each run writes (tests/apps/replacing.py), and the records read over HTTP.
"""

from __future__ import annotations

import pytest

from sqsjobs import JobStatus
from tests.apps import replacing
from tests.integration.helpers import kill_group, wait_until, worker_process

pytestmark = pytest.mark.slow

APP = "tests.apps.replacing:app"


@pytest.fixture
def app(ministack_url, make_app):
    # lease 2 s: a running job's lease is renewed (and a replaced run told) about every second
    app = make_app(ministack_url, lease_s=2.0, visibility_timeout_s=3)
    app.registry.include(replacing.app.registry)
    app.provision()
    return app


def enqueue(app, runs_dir, version: int, **extra) -> str:
    payload = {"runs_dir": str(runs_dir), "version": version, "work_s": 30, **extra}
    return app.enqueue("reindex", payload, idempotency_key="doc-7")


@pytest.mark.parametrize("ignore_cancel", [False, True], ids=["handler-stops", "handler-ignores-it"])
def test_a_newer_enqueue_cancels_the_running_job_before_it_commits_and_runs_itself(
    app, tmp_path, ignore_cancel
):
    # GIVEN a worker running the re-index of document 7
    worker = worker_process(app, APP, concurrency=4)
    try:
        first = enqueue(app, tmp_path, 1, work_s=4 if ignore_cancel else 30, ignore_cancel=ignore_cancel)
        wait_until(lambda: (tmp_path / f"{first}.started").exists(), 30, "the first run started")

        # WHEN the document is enqueued again (the same key)
        second = enqueue(app, tmp_path, 2, work_s=0.2)

        # THEN the newer enqueue is a new job, and the first is cancelled at once, as replaced by it
        assert second != first and second.replaced == first and not second.deduplicated
        old = app.get(first)
        assert old.status is JobStatus.CANCELLED and old.reason == f"replaced by job {second}"
        # ... the new one runs and succeeds
        wait_until(lambda: app.get(second).status is JobStatus.SUCCEEDED, 30, "the second run")
        assert app.get(second).result == {"version": 2}
        if ignore_cancel:  # ... a handler that works on to its end: its success never lands
            wait_until(
                lambda: not app.get(first).lease_owner and _worked_out(app, first), 30, "first ran out"
            )
        else:  # ... a handler that watches for it is told, as of a cancel request, at its next heartbeat
            wait_until(lambda: (tmp_path / f"{first}.told").exists(), 30, "the first run told")
            assert (tmp_path / f"{first}.told").read_text() == "cancel"
    finally:
        kill_group(worker)
    old = app.get(first)
    assert old.status is JobStatus.CANCELLED and old.result is None
    assert old.reason == f"replaced by job {second}"


def _worked_out(app, job_id: str) -> bool:
    """The ignoring handler's four seconds are over (its finish was refused): give it a second more."""
    import time

    record = app.get(job_id)
    return record.finished_at is not None and time.time() - record.finished_at.timestamp() > 5


def test_a_waiting_job_is_cancelled_by_a_newer_enqueue_and_never_runs(app, tmp_path):
    # GIVEN the re-index of document 7, queued with no worker yet
    first = enqueue(app, tmp_path, 1, work_s=0.1)
    # WHEN it is enqueued again, then a worker starts
    second = enqueue(app, tmp_path, 2, work_s=0.1)
    assert second.replaced == first
    worker = worker_process(app, APP, concurrency=4)
    try:
        wait_until(lambda: app.get(second).status is JobStatus.SUCCEEDED, 30, "the second run")
    finally:
        kill_group(worker)
    # THEN the first never ran: cancelled, as replaced
    assert not (tmp_path / f"{first}.started").exists()
    old = app.get(first)
    assert old.status is JobStatus.CANCELLED and old.reason == f"replaced by job {second}"
