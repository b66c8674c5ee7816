"""Batch handlers, attacked from outside: real worker processes, copied messages, kill -9, a Lambda batch (MiniStack).

Evidence comes from the handler's own call log (tests/apps/batched.py: one line per job of each
call, written in one append), the records, and the queues. What each job must keep whatever its
call did: its own claim (a copy of its message never puts it in a second call), its own attempts
(a failing job is retried alone, then dead), and its own lease (a killed worker's jobs come back).
"""

from __future__ import annotations

import json
import signal
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from bench.batch_cost import measure
from sqsjobs import JobStatus
from sqsjobs.runtime.lambda_sqs import LambdaWorker
from tests.apps import batched
from tests.integration.helpers import (
    depth,
    kill_group,
    queue_url,
    receive_dlq,
    sqs_call,
    wait_until,
    worker_process,
)
from tests.integration.lambda_events import FakeContext, event_from, failed_ids, receive

pytestmark = pytest.mark.slow

APP = "tests.apps.batched:app"


@pytest.fixture
def app(ministack_url, make_app):
    app = make_app(ministack_url, lease_s=3.0, visibility_timeout_s=2)
    app.registry.include(batched.app.registry)  # the handlers the worker processes load
    app.limits.include(batched.app.limits)
    app.provision()
    return app


def calls(log: Path) -> list[tuple[str, int, str, int]]:
    """``(call id, size, job id, attempt)`` per line of the handler's log."""
    if not log.exists():
        return []
    return [
        (c, int(n), job, int(a))
        for c, n, job, a, _ in (line.split() for line in log.read_text().splitlines())
    ]


def copy_every_message(app, n: int) -> None:
    """Send a second copy of each of the queue's ``n`` messages straight into it, as SQS may deliver one twice."""
    url = queue_url(app)
    originals: dict[str, dict] = {}
    while len(originals) < n:
        originals.update({m["MessageId"]: m for m in _receive(app, url)})
    messages = list(originals.values())
    for i in range(0, len(messages), 10):
        chunk = messages[i : i + 10]
        sqs_call(
            app,
            "send_message_batch",
            QueueUrl=url,
            Entries=[{"Id": str(n), "MessageBody": m["Body"]} for n, m in enumerate(chunk)],
        )
        sqs_call(
            app,
            "change_message_visibility_batch",
            QueueUrl=url,
            Entries=[
                {"Id": str(n), "ReceiptHandle": m["ReceiptHandle"], "VisibilityTimeout": 0}
                for n, m in enumerate(chunk)
            ],
        )


def _receive(app, url: str) -> list[dict]:
    response = sqs_call(
        app, "receive_message", QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=60, WaitTimeSeconds=1
    )
    return list(response.get("Messages", []))


def test_a_batch_handler_over_500_copied_jobs_retries_only_the_failing_ones_and_runs_each_job_once(
    app, tmp_path
):
    # GIVEN 500 jobs of a batch type (max 50 per call), 7 of which fail every attempt (max_attempts 3,
    # no backoff), and a second copy of every message sent straight into the queue
    log = tmp_path / "calls.log"
    failing = {n * 71 for n in range(7)}
    # (a lease of 15 s, not the file's 3 s: "once" holds while a worker keeps its leases, and two
    # workers starting beside five other tests' processes on 2 cores stalled past 3 s in
    # fresh-clone run 33, so the other worker rightly claimed four jobs again)
    app.configure(lease_s=15.0)
    ids = app.enqueue_many(
        [
            {"type": "embed.doc", "payload": {"log": str(log), "n": n, "fail": n in failing}}
            for n in range(500)
        ]
    )
    bad = {ids[n] for n in failing}
    copy_every_message(app, 500)
    assert depth(app)["visible"] == 1000

    # WHEN two worker processes run them
    procs = [worker_process(app, APP, concurrency=4) for _ in range(2)]
    try:
        wait_until(lambda: len(calls(log)) >= 493 + 3 * len(bad), 120, "every attempt called", every_s=0.5)
        wait_until(
            lambda: all(app.get(i).status.terminal for i in bad), 30, "the failing jobs ended", every_s=0.5
        )
        wait_until(
            lambda: depth(app)["visible"] + depth(app)["in_flight"] == 0, 30, "queue drained", every_s=0.5
        )
    finally:
        kill_group(*procs)

    # THEN every call held at most 50 jobs, and calls gathered more than one receive's ten
    lines = calls(log)
    sizes = {c: n for c, n, _, _ in lines}
    assert max(sizes.values()) <= 50
    assert max(sizes.values()) > 10, sorted(sizes.values())
    assert Counter(c for c, _, _, _ in lines) == Counter(sizes)  # each call logged each of its jobs
    # ... no job was in two calls for one attempt, a good job ran once, a failing one once per attempt
    attempts: dict[str, list[int]] = defaultdict(list)
    for _, _, job, attempt in lines:
        attempts[job].append(attempt)
    assert {j: a for j, a in attempts.items() if j not in bad and a != [1]} == {}
    assert {j: sorted(attempts[j]) for j in bad} == {j: [1, 2, 3] for j in bad}
    # ... and the records say 493 succeeded at their first attempt, 7 dead after three
    statuses = Counter((app.get(i).status, app.get(i).attempt) for i in ids if i not in bad)
    assert statuses == Counter({(JobStatus.SUCCEEDED, 1): 493})
    dead = [app.get(i) for i in bad]
    assert {(j.status, j.attempt) for j in dead} == {(JobStatus.DEAD, 3)}
    assert all("attempts exhausted" in (j.reason or "") for j in dead)
    assert app.get(ids[1]).result == {"n": 1}
    # ... and each dead job's message is in the DLQ (a copy met after the death is sent there too)
    dlq: set[str] = set()
    wait_until(
        lambda: dlq.update(json.loads(m["Body"])["id"] for m in receive_dlq(app)) or dlq >= bad, 20, "DLQ"
    )
    assert dlq == bad


def test_a_worker_killed_mid_call_its_jobs_come_back_by_their_leases_and_run_once_more(app, tmp_path):
    # GIVEN a worker in the middle of a call of 5 jobs (the first attempt's call takes 25 s)
    log = tmp_path / "calls.log"
    ids = app.enqueue_many(
        [{"type": "embed.doc", "payload": {"log": str(log), "n": n, "first_sleep_s": 25}} for n in range(5)]
    )
    victim = worker_process(app, APP, concurrency=2)
    survivor = None
    try:
        wait_until(lambda: len(calls(log)) == 5, 30, "the call started")
        # WHEN it is killed with SIGKILL and another worker starts
        kill_group(victim)
        survivor = worker_process(app, APP, concurrency=2)
        # THEN its jobs come back when their leases run out, and succeed in another call
        wait_until(
            lambda: all(app.get(i).status is JobStatus.SUCCEEDED for i in ids), 60, "rerun", every_s=0.3
        )
    finally:
        kill_group(victim, *([survivor] if survivor else []))
    attempts: dict[str, list[int]] = defaultdict(list)
    for _, _, job, attempt in calls(log):
        attempts[job].append(attempt)
    assert {i: sorted(attempts[i]) for i in ids} == {i: [1, 2] for i in ids}
    assert {app.get(i).attempt for i in ids} == {2}


def test_jobs_waiting_longer_than_a_lease_for_their_call_keep_it_against_later_copies_and_a_deadline_ends_one(
    app, tmp_path
):
    # GIVEN 3 jobs of a type that gathers for 6 s, twice the 3 s lease, claimed by a worker
    log = tmp_path / "calls.log"
    ids = app.enqueue_many(
        [{"type": "embed.patient", "payload": {"log": str(log), "n": n}} for n in range(3)]
    )
    url = queue_url(app)
    originals: list[dict] = []
    while len(originals) < len(ids):
        originals += _receive(app, url)
    for m in originals:
        sqs_call(
            app,
            "change_message_visibility",
            QueueUrl=url,
            ReceiptHandle=m["ReceiptHandle"],
            VisibilityTimeout=0,
        )
    proc = worker_process(app, APP, concurrency=2)
    try:
        wait_until(
            lambda: all(app.get(i).status is JobStatus.RUNNING for i in ids), 30, "claimed", every_s=0.2
        )
        # AND a fourth job, not to start later than 3 s after its enqueue, claimed into the same
        # collector: the call comes about 6 s after the first claim, past its deadline
        late = app.enqueue("embed.patient", {"log": str(log), "n": 9}, expires_after=3)
        wait_until(lambda: app.get(late).status is JobStatus.RUNNING, 10, "the late one claimed", every_s=0.1)
        # WHEN copies of their messages arrive after the lease would have run out unrenewed
        delay = int(app.settings.lease_s) + 1
        entries = [
            {"Id": str(n), "MessageBody": m["Body"], "DelaySeconds": delay} for n, m in enumerate(originals)
        ]
        sqs_call(app, "send_message_batch", QueueUrl=url, Entries=entries)
        wait_until(
            lambda: all(app.get(i).status is JobStatus.SUCCEEDED for i in ids), 30, "succeeded", every_s=0.3
        )
        wait_until(lambda: app.get(late).status.terminal, 10, "the late one finished", every_s=0.3)
        wait_until(lambda: sum(depth(app).values()) == 0, 20, "copies dropped", every_s=0.3)
    finally:
        kill_group(proc)
    # THEN the copies found live leases: one call ran the three jobs, at their first attempt
    assert sorted((n, job, a) for _, n, job, a in calls(log)) == sorted((3, i, 1) for i in ids)
    assert {app.get(i).attempt for i in ids} == {1}
    # AND the job whose deadline passed in the collector never entered the call: expired, its
    # attempt given back, its message deleted (the queue is empty), nothing dead-lettered
    expired = app.get(late)
    assert expired.status is JobStatus.EXPIRED and expired.attempt == 0, expired
    assert expired.reason is not None and expired.reason.startswith("not started by its deadline")
    assert receive_dlq(app) == []


def test_a_drain_releases_the_jobs_waiting_for_their_call_visible_at_once_and_never_called(app, tmp_path):
    # GIVEN 3 jobs claimed by a worker and waiting for a call that gathers for 6 s
    log = tmp_path / "calls.log"
    ids = app.enqueue_many(
        [{"type": "embed.patient", "payload": {"log": str(log), "n": n}} for n in range(3)]
    )
    proc = worker_process(app, APP, concurrency=2, SQSJOBS_DRAIN_TIMEOUT_S="2")
    try:
        wait_until(
            lambda: all(app.get(i).status is JobStatus.RUNNING for i in ids), 30, "claimed", every_s=0.2
        )
        # WHEN it is told to stop
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        kill_group(proc)
    # THEN no call ran: they had not started, so they are released like any job held ahead of a
    # slot (their attempts not used up), their messages back for the next worker
    assert calls(log) == []
    assert {app.get(i).status for i in ids} == {JobStatus.QUEUED}
    messages = receive(app, 3, timeout_s=10)  # "at once" is timed in test_slots, with a long visibility
    assert sorted(json.loads(m["Body"])["id"] for m in messages) == sorted(ids)


def test_on_lambda_the_invocations_records_form_the_batch_and_failures_are_reported_per_record(app, tmp_path):
    # GIVEN 7 jobs of an async batch type (max 5 per call): one fails, one gets no outcome from the
    # handler; and a copy of one job's message in the same invocation
    log = tmp_path / "calls.log"
    payloads = [{"log": str(log), "n": n, "fail": n == 3, "skip": n == 5} for n in range(7)]
    ids = app.enqueue_many([{"type": "embed.async", "payload": p} for p in payloads])
    url = queue_url(app)
    sqs_call(app, "send_message", QueueUrl=url, MessageBody=_body_of(app, ids[0]))
    messages = receive(app, 8)
    worker = LambdaWorker(app)
    try:
        # WHEN the Lambda entry point handles the batch of 8 records
        response = worker(event_from(app, messages), FakeContext())
    finally:
        worker.close()
    # THEN the handler was called for the 7 jobs, at most 5 per call, each job once
    lines = calls(log)
    assert sorted(job for _, _, job, _ in lines) == sorted(ids)
    assert max(n for _, n, _, _ in lines) <= 5
    assert len({c for c, _, _, _ in lines}) == 2
    # ... the failing job and the one without an outcome are reported failed (retried), no other
    by_id = {json.loads(m["Body"])["id"]: m["MessageId"] for m in messages}
    assert set(failed_ids(response)) == {by_id[ids[3]], by_id[ids[5]]}
    statuses = {i: app.get(i) for i in ids}
    assert {i for i, j in statuses.items() if j.status is JobStatus.SUCCEEDED} == set(ids) - {ids[3], ids[5]}
    assert statuses[ids[3]].status is statuses[ids[5]].status is JobStatus.RETRY_SCHEDULED
    assert statuses[ids[5]].last_error is not None
    assert statuses[ids[5]].last_error.error_class == "BatchOutcomeError"


def test_on_lambda_a_job_its_limit_defers_never_enters_the_call(app, tmp_path):
    # GIVEN 5 jobs of a batch type under a limit of two running jobs, in one invocation
    log = tmp_path / "calls.log"
    ids = app.enqueue_many(
        [{"type": "embed.limited", "payload": {"log": str(log), "n": n}} for n in range(5)]
    )
    messages = receive(app, 5)
    worker = LambdaWorker(app)
    try:
        # WHEN the Lambda entry point handles them
        response = worker(event_from(app, messages), FakeContext())
    finally:
        worker.close()
    # THEN one call ran the two jobs the limit admitted; the three it deferred stay queued, unrun
    lines = calls(log)
    assert len(lines) == 2
    assert {n for _, n, _, _ in lines} == {2}
    ran = {job for _, _, job, _ in lines}
    assert {i for i in ids if app.get(i).status is JobStatus.SUCCEEDED} == ran
    assert {app.get(i).status for i in set(ids) - ran} == {JobStatus.QUEUED}
    assert len(failed_ids(response)) == 3


def _body_of(app, job_id: str) -> str:
    """The body of ``job_id``'s message, as its enqueue sent it (read from the queue, left visible)."""
    url = queue_url(app)
    seen: list[dict] = []
    while not any(json.loads(m["Body"]).get("id") == job_id for m in seen):
        seen += _receive(app, url)
    for m in seen:
        sqs_call(
            app,
            "change_message_visibility",
            QueueUrl=url,
            ReceiptHandle=m["ReceiptHandle"],
            VisibilityTimeout=0,
        )
    return next(str(m["Body"]) for m in seen if json.loads(m["Body"]).get("id") == job_id)


def test_a_job_under_a_batch_handler_costs_no_more_write_units_and_about_the_requests_of_a_single_one(
    ministack_url,
):
    # GIVEN the same 100 jobs run by a single handler, then by a batch handler (bench/batch_cost.py)
    single = measure(ministack_url, batch=False, jobs=100)
    batch = measure(ministack_url, batch=True, jobs=100)
    # THEN each job's own claim and finish cost what they cost alone, and about as many requests go
    # out: a call's finishes come ready together, a single handler's wait finish_linger_s for
    # company (0.56 against 0.51 requests per job when measured; 0.53 against 0.63 before the wait)
    assert batch.write_units <= single.write_units, (batch, single)
    assert batch.requests <= single.requests * 1.15, (batch, single)
    assert batch.dynamodb_writes <= single.dynamodb_writes * 1.25, (batch, single)
