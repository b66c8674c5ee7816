"""Payload versioning on MiniStack: jobs enqueued by an older deploy run under the current handler.

Producers here are Apps that register the job types at an older version (as the deploy before the
schema change did); the current code is ``tests/apps/upcasting.py`` (version 3, upcast steps 1→2→3
for ``profile.update``, 2→3 only for ``profile.retired``), run by real worker processes, the
Lambda entry point, and the operator's retry and replay.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from sqsjobs import JobStatus, PayloadInvalid
from sqsjobs.envelope import DLQ_JOB_ID, DLQ_REASON
from sqsjobs.ops.dlq import DlqFilter
from sqsjobs.ops.replay import replay_flow
from sqsjobs.runtime.lambda_sqs import LambdaWorker
from sqsjobs.store.codec import payload_hash
from sqsjobs.testing import all_finished, work_until
from tests.apps import upcasting
from tests.integration.helpers import attr, receive_dlq, wait_until
from tests.integration.lambda_events import FakeContext, event_from, failed_ids, receive

V1 = {"name": "Ada Lovelace", "email": "ada@example.com"}
V2 = {"first": "Grace", "last": "Hopper", "email": "grace@example.com"}
V3_OF_V1 = {"first": "Ada", "last": "Lovelace", "emails": ["ada@example.com"]}
V3_OF_V2 = {"first": "Grace", "last": "Hopper", "emails": ["grace@example.com"]}


@pytest.fixture
def deploys(ministack_url, make_app):
    """``deploys(version)``: an App of its own on one shared table and set of queues, with the job
    types at ``version`` (3: the current code, with its upcasts; below: an older deploy's producer)."""
    shared = f"u{os.urandom(5).hex()}"

    def deploy(version: int):
        app = make_app(
            ministack_url, f"{shared}-v{version}", table_name=f"{shared}-jobs", queue_prefix=shared
        )
        return upcasting.register(app) if version == 3 else upcasting.producer(app, version)

    return deploy


def start_worker(app) -> subprocess.Popen[bytes]:
    """A worker process of the current code on ``app``'s table and queues (its App is named after them)."""
    env = {
        **os.environ,
        "TEST_APP_NAME": app.settings.queue_prefix,
        "SQSJOBS_ENDPOINT_URL": str(app.settings.endpoint_url),
        "SQSJOBS_LEASE_S": str(app.settings.lease_s),
        "SQSJOBS_VISIBILITY_TIMEOUT_S": str(app.settings.visibility_timeout_s),
        "SQSJOBS_RECEIVE_WAIT_S": "1",
    }
    argv = [sys.executable, "-m", "sqsjobs", "worker", "--app", "tests.apps.upcasting:app"]
    return subprocess.Popen(
        argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


# ── the worker ───────────────────────────────────────────────────────────────────────────────
@pytest.mark.slow
def test_a_worker_upgrades_an_older_payload_step_by_step_before_the_handler_sees_it(deploys):
    # GIVEN jobs enqueued by the deploys of version 1 and 2, before any worker of version 3 runs
    v1, v2 = deploys(1), deploys(2)
    v1.provision()
    from_v1 = v1.enqueue("profile.update", V1)
    from_v2 = v2.enqueue("profile.update", V2)

    # WHEN a worker process of the current code (version 3) runs them
    proc = start_worker(v1)
    try:
        wait_until(all_finished(v1, [from_v1, from_v2]), 30, "both jobs finished")
    finally:
        stop(proc)

    # THEN the handler saw each payload upgraded through the steps it needed, and validated
    first, second = v1.get(from_v1), v1.get(from_v2)
    assert (first.status, first.result) == (JobStatus.SUCCEEDED, V3_OF_V1)
    assert (second.status, second.result) == (JobStatus.SUCCEEDED, V3_OF_V2)
    # AND the records keep the payload as it was enqueued: its version and hash
    assert (first.payload_version, first.payload_hash) == (1, payload_hash("profile.update", 1, V1))
    assert (second.payload_version, second.payload_hash) == (2, payload_hash("profile.update", 2, V2))


@pytest.mark.slow
def test_a_payload_that_cannot_be_upgraded_dies_with_the_reason_and_the_worker_runs_on(deploys):
    # GIVEN an upcast step that raises (a version-1 payload without an email), a version the type no
    # longer reads (profile.retired starts at 2), and a payload newer than the worker's handler
    v1, v4 = deploys(1), deploys(4)
    v1.provision()
    broken = v1.enqueue("profile.update", {"name": "Ada Lovelace"})
    retired = v1.enqueue("profile.retired", V1)
    newer = v4.enqueue("profile.update", {"written": "by version 4"})

    proc = start_worker(v1)
    try:
        wait_until(all_finished(v1, [broken, retired]), 30, "both jobs dead")
        # WHEN a good job comes after them, to the same worker process
        after = v1.enqueue("profile.update", V1)
        wait_until(all_finished(v1, [after]), 30, "the next job finished")
        wait_until(lambda: v1.get(newer).history, 30, "the newer payload was seen")
        # THEN the worker is still running (bad input never kills a worker)
        assert proc.poll() is None
    finally:
        stop(proc)

    assert v1.get(after).result == V3_OF_V1
    # the step that raised is named, in the record and in the DLQ message
    dead = v1.get(broken)
    assert (dead.status, dead.reason) == (JobStatus.DEAD, "payload upcast 2→3 failed")
    assert dead.last_error is not None and dead.last_error.error_class == "UpcastError"
    assert "upcast 2→3 of 'profile.update' failed: KeyError: 'email'" in dead.last_error.message
    assert dead.payload == {"name": "Ada Lovelace"}  # kept as enqueued, for a retry
    # the retired version too, permanently (one attempt of two used)
    gone = v1.get(retired)
    assert (gone.status, gone.reason, gone.attempt) == (JobStatus.DEAD, "no upcast from version 1", 1)
    dlq = {attr(m, DLQ_JOB_ID): attr(m, DLQ_REASON) for m in receive_dlq(v1)}
    assert dlq == {broken: "payload upcast 2→3 failed", retired: "no upcast from version 1"}
    # and the newer payload was parked for a newer worker, as before: released, not failed
    parked = v1.get(newer)
    assert (parked.status, parked.attempt, [h.outcome for h in parked.history]) == (
        JobStatus.QUEUED,
        0,
        ["released"],
    )


def test_the_lambda_entry_point_upgrades_the_same_way(deploys):
    # GIVEN a version-1 payload and one whose upcast raises, delivered to the Lambda entry point
    v1, v3 = deploys(1), deploys(3)
    v3.provision()
    ok = v1.enqueue("profile.update", V1)
    broken = v1.enqueue("profile.update", {"name": "Ada Lovelace"})
    worker = LambdaWorker(v3)
    try:
        response = worker(event_from(v3, receive(v3, 2)), FakeContext())
    finally:
        worker.close()
    # THEN the upgraded one succeeded, the other is dead (not a batch failure that cycles it)
    assert failed_ids(response) == set()
    assert v3.get(ok).result == V3_OF_V1
    assert (v3.get(broken).status, v3.get(broken).reason) == (JobStatus.DEAD, "payload upcast 2→3 failed")


# ── the operator's retry and replay ──────────────────────────────────────────────────────────
def test_retry_and_replay_upgrade_an_old_dead_payload_and_validate_it_before_requeuing(deploys):
    # GIVEN jobs of version 1 that died under the version-1 deploy (its handler was broken)
    v1 = deploys(1)
    v1.provision()
    retried, replayed = (v1.enqueue("profile.update", V1) for _ in range(2))
    unfit = v1.enqueue("profile.update", {"name": "Ada Lovelace"})  # no email: its 2→3 step raises
    work_until(v1, all_finished(v1, [retried, replayed, unfit]))
    assert {v1.get(j).status for j in (retried, replayed, unfit)} == {JobStatus.DEAD}

    # WHEN the current code (version 3) retries one and replays another from the DLQ
    v3 = deploys(3)
    job = v3.retry(retried)
    summary = v3.run(
        replay_flow(
            settings=v3.settings,
            registry=v3.registry,
            queue_urls=v3.queue_urls,
            queues=["default"],
            flt=DlqFilter(job_ids=frozenset({replayed, unfit})),
            clock=v3.clock,
        )
    )

    # THEN both are queued with the payload they had (version 1: the worker upgrades it)...
    assert (job.status, job.payload, job.payload_version) == (JobStatus.QUEUED, V1, 1)
    assert v3.get(replayed).status is JobStatus.QUEUED
    # ...and the one whose upgrade fails is refused by both, naming the step, and stays dead
    outcomes = {i.job_id: (i.outcome, i.reason) for i in summary.items}
    assert outcomes[replayed] == ("replayed", "")
    assert outcomes[unfit][0] == "skipped"
    assert "upcast 2→3 of 'profile.update' failed: KeyError" in outcomes[unfit][1]
    with pytest.raises(PayloadInvalid, match=r"cannot be retried with the current code: upcast 2→3"):
        v3.retry(unfit)
    assert v3.get(unfit).status is JobStatus.DEAD

    work_until(v3, all_finished(v3, [retried, replayed]))
    assert [v3.get(j).result for j in (retried, replayed)] == [V3_OF_V1, V3_OF_V1]
