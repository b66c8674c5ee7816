"""The Lambda entry point, fed SQS events built from real MiniStack messages, with a fake Lambda context.

What the ESM would do with the reply is not simulated: the tests look at the reply itself, the
records, the DLQ and the messages' visibility.
"""

from __future__ import annotations

import json
import threading
import time

import pytest

from sqsjobs import JobStatus
from sqsjobs.envelope import DLQ_JOB_ID, DLQ_REASON
from sqsjobs.errors import InvalidBatchResponse, InvalidEvent
from sqsjobs.runtime.lambda_event import batch_response, parse_event
from sqsjobs.runtime.lambda_sqs import DEADLINE_MARGIN_S, LambdaWorker
from tests.apps import lambda_app
from tests.integration.helpers import attr, depth, receive_dlq, send_raw
from tests.integration.lambda_events import FakeContext, event_from, failed_ids, log_lines, receive


@pytest.fixture
def lambda_env(ministack_url, make_app):
    """A provisioned App with the test app's handlers, and a LambdaWorker on it (closed afterwards)."""
    made = []

    def make(**settings):
        app = make_app(ministack_url, **settings)
        app.registry.include(lambda_app.app.registry)
        app.provision()
        worker = LambdaWorker(app)
        made.append(worker)
        return app, worker

    yield make
    for worker in made:
        worker.close()


def by_job(messages):
    return {json.loads(m["Body"]).get("id"): m["MessageId"] for m in messages if m["Body"].startswith("{")}


def test_one_batch_maps_every_outcome_to_the_partial_batch_response(lambda_env):
    # GIVEN a success, a retry, a permanent failure, an unknown type and a malformed body in one batch
    app, worker = lambda_env(visibility_timeout_s=1)
    ok = app.enqueue("ok", {"n": 1})
    flaky = app.enqueue("flaky", {"delay_s": 60})
    boom = app.enqueue("boom", {"order": 7})
    unknown = app.enqueue("no.such.type", {}, queue="default")
    send_raw(app, "this is not an sqsjobs message")
    messages = receive(app, 5)
    ids = by_job(messages)
    malformed = next(m["MessageId"] for m in messages if not m["Body"].startswith("{"))

    # WHEN the Lambda entry point handles it
    response = worker(event_from(app, messages), FakeContext())

    # THEN only the retry is reported as failed: the ESM deletes everything else
    assert failed_ids(response) == {ids[flaky]}
    assert app.get(ok).status is JobStatus.SUCCEEDED
    retried = app.get(flaky)
    assert (retried.status, retried.attempt) == (JobStatus.RETRY_SCHEDULED, 1)
    assert (app.get(boom).status, app.get(boom).reason) == (JobStatus.DEAD, "permanent error")
    assert app.get(unknown).status is JobStatus.DEAD
    assert "unknown job type" in (app.get(unknown).reason or "")
    # ... the dead job, the unknown type and the malformed body are in the DLQ with their reasons
    dlq = {m["Body"]: m for m in receive_dlq(app)}
    assert len(dlq) == 3
    reasons = {attr(m, DLQ_REASON) for m in dlq.values()}
    assert "permanent error" in reasons
    assert any(r.startswith("unknown job type") for r in reasons)
    assert any(r.startswith("malformed message") for r in reasons)
    assert {attr(m, DLQ_JOB_ID) for m in dlq.values() if DLQ_JOB_ID in m["MessageAttributes"]} == {
        boom,
        unknown,
    }
    # ... and the retry's message was re-armed to its 60 s backoff: after the queue's 1 s visibility
    # timeout every other message is back (no ESM deleted them here), the retry's is not
    time.sleep(2.0)
    back = {m["MessageId"] for m in receive(app, 4)}
    assert back == {ids[ok], ids[boom], ids[unknown], malformed}
    assert depth(app)["in_flight"] >= 1


def test_the_deadline_guard_leaves_records_that_cannot_finish_unstarted(lambda_env, capfd):
    # GIVEN a job whose 30 s timeout does not fit the 10 s left, beside one whose 5 s does
    app, worker = lambda_env(visibility_timeout_s=30)
    slow = app.enqueue("slow", {})
    ok = app.enqueue("ok", {"n": 2})
    messages = receive(app, 2)
    ids = by_job(messages)

    # WHEN the invocation started with a minute but has 10 s left when the records start
    capfd.readouterr()
    response = worker(event_from(app, messages), FakeContext(start_ms=60_000, then_ms=10_000))

    # THEN the slow one is reported failed without a claim (no attempt used), and is visible again at once
    assert failed_ids(response) == {ids[slow]}
    assert (app.get(slow).status, app.get(slow).attempt) == (JobStatus.QUEUED, 0)
    assert app.get(ok).status is JobStatus.SUCCEEDED
    again = receive(app, 1, timeout_s=5)
    assert again[0]["MessageId"] == ids[slow]
    # ... and a WARNING names its timeout and the time left (a later invocation can still run it)
    lines = log_lines(capfd.readouterr().err)
    [late] = [line for line in lines if line["message"].startswith("record not started")]
    assert late["level"] == "WARNING"
    assert "'slow' has a 30 s timeout" in late["message"]
    assert "10.0 s this invocation has left" in late["message"]
    assert not [line for line in lines if line["level"] == "ERROR"]

    # WHEN a whole invocation (10 s) could never fit it
    response = worker(event_from(app, again), FakeContext(start_ms=10_000))

    # THEN it is still not started, it is left in flight (not hot-looped) ...
    assert failed_ids(response) == {ids[slow]}
    assert (app.get(slow).status, app.get(slow).attempt) == (JobStatus.QUEUED, 0)
    assert depth(app)["visible"] == 0  # its visibility was not reset to 0
    # ... and ERROR lines name its timeout and the function's (the type's, and the record's)
    errors = [line["message"] for line in log_lines(capfd.readouterr().err) if line["level"] == "ERROR"]
    assert len(errors) == 2
    assert all("'slow' has a 30 s timeout" in e and "10.0 s timeout" in e for e in errors)

    # WHEN a later invocation of that function gets another record of the queue, not a slow one
    other = app.enqueue("ok", {"n": 3})
    response = worker(event_from(app, receive(app, 1, timeout_s=5)), FakeContext(start_ms=10_000))

    # THEN that record runs, and the ERROR about the type that can never run here is logged again
    assert failed_ids(response) == set() and app.get(other).status is JobStatus.SUCCEEDED
    errors = [line for line in log_lines(capfd.readouterr().err) if line["level"] == "ERROR"]
    assert [e["job_types"] for e in errors] == [{"slow": 30.0}]


def test_jobs_without_an_explicit_timeout_run_within_the_invocation_s_remaining_time(lambda_env):
    # GIVEN two jobs of a type registered without a timeout (the 300 s default does not fit a minute)
    app, worker = lambda_env(visibility_timeout_s=30)
    jobs = [app.enqueue("plain", {"n": n}) for n in (1, 2)]
    messages = receive(app, 2)

    # WHEN an invocation with 60 s left handles them
    started = time.time()
    response = worker(event_from(app, messages), FakeContext(start_ms=60_000))

    # THEN both run and succeed in that invocation: nothing is left to cycle until redrive
    assert failed_ids(response) == set()
    for job_id in jobs:
        job = app.get(job_id)
        assert (job.status, job.attempt) == (JobStatus.SUCCEEDED, 1)
        # ... and each handler's deadline was the invocation's, less the margin to record and ack
        deadline = job.result["deadline"]
        assert started < deadline <= time.time() + 60 - DEADLINE_MARGIN_S


def test_a_job_without_an_explicit_timeout_that_outruns_the_invocation_is_a_timeout_failure(lambda_env):
    # GIVEN a job with no explicit timeout whose handler needs 20 s, on a queue whose messages come
    # back 4 s after a receive, with 6 s leases (renewed at half, with seconds to spare: a 1 s lease,
    # renewed with 0.5 s to spare, lapsed once under the whole suite's load)
    app, worker = lambda_env(visibility_timeout_s=4, lease_s=6.0)
    job_id = app.enqueue("nap", {"sleep_s": 20})
    # ... beside a job that finishes at once and a bad message dead-lettered at once: both reported
    # as a success, so the ESM deletes them only when the whole invocation returns
    quick_id = app.enqueue("nap", {"sleep_s": 0})
    send_raw(app, "this is not json")
    messages = receive(app, 3)
    [message] = [m for m in messages if by_job([m]).keys() == {job_id}]

    # WHEN an invocation with only 12 s left handles it (its run ends at 10 s, past the visibility
    # timeout and the lease, so both must be kept up)
    result = {}
    runner = threading.Thread(
        target=lambda: result.update(response=worker(event_from(app, messages), FakeContext(start_ms=12_000)))
    )
    runner.start()
    seen_running = 0
    try:
        # THEN as long as it runs, up to the invocation's end, it keeps a live lease and its message
        # stays hidden (the event source mapping would otherwise hand it to another invocation), and
        # so do the finished records' messages, which wait for the reply
        while runner.is_alive():
            job = app.get(job_id)
            if job.status is JobStatus.RUNNING:
                seen_running += 1
                assert job.lease_expires is not None and job.lease_expires.timestamp() > time.time()
                assert depth(app)["visible"] == 0, "a message of the batch came back"
            time.sleep(0.2)
    finally:
        runner.join(timeout=30)
    assert seen_running >= 10  # observed over the whole run, not only its first moments
    response = result["response"]

    # THEN it is recorded as a timeout: the attempt is used and a retry is scheduled, never a silent skip
    job = app.get(job_id)
    assert (job.status, job.attempt) == (JobStatus.RETRY_SCHEDULED, 1)
    assert job.lease_expires is None
    assert job.last_error is not None and job.last_error.error_class == "JobTimeout"
    # ... at the deadline the invocation gave it: the 12 s left, less the margin kept for recording it
    assert f"ran past its {12 - DEADLINE_MARGIN_S:g} s timeout" in job.last_error.message
    # ... and its message stays in the queue, re-armed for the retry: the witness that brings it back
    assert failed_ids(response) == {message["MessageId"]}
    assert app.get(quick_id).status is JobStatus.SUCCEEDED
    assert len(receive_dlq(app)) == 1
    [again] = receive(app, 1, timeout_s=30)
    assert again["MessageId"] == message["MessageId"]


def test_a_record_whose_job_is_already_running_elsewhere_is_reported_done(lambda_env):
    # GIVEN the same message delivered twice (at-least-once), the first copy already claimed and running
    app, worker = lambda_env(visibility_timeout_s=1)
    job_id = app.enqueue("ok", {"n": 3})
    first = receive(app, 1)
    worker(event_from(app, first), FakeContext())
    time.sleep(1.5)
    duplicate = receive(app, 1)  # the first copy was never deleted (no ESM here): it is back

    # WHEN the duplicate is handled after the job finished
    response = worker(event_from(app, duplicate), FakeContext())

    # THEN it is reported as success (the ESM deletes it) and the job ran once
    assert failed_ids(response) == set()
    assert (app.get(job_id).status, app.get(job_id).attempt) == (JobStatus.SUCCEEDED, 1)


def test_the_response_only_ever_names_messages_of_the_batch():
    # MiniStack deletes a whole batch on an unknown or empty id; AWS fails it: never return one
    assert batch_response(["a", "b"], ["b", "b"]) == {"batchItemFailures": [{"itemIdentifier": "b"}]}
    assert batch_response(["a"], []) == {"batchItemFailures": []}
    with pytest.raises(InvalidBatchResponse):
        batch_response(["a", "b"], ["c"])
    with pytest.raises(InvalidBatchResponse):
        batch_response(["a", "b"], [""])


def test_events_that_are_not_sqs_batches_are_refused():
    with pytest.raises(InvalidEvent):
        parse_event({"detail-type": "Scheduled Event"})
    with pytest.raises(InvalidEvent):
        parse_event({"Records": [{"eventSource": "aws:sqs", "body": "{}"}]})  # no messageId/receipt
    with pytest.raises(InvalidEvent):
        parse_event({"Records": [{"eventSource": "aws:s3", "messageId": "m"}]})


def test_a_long_job_keeps_its_lease_during_the_invocation(lambda_env):
    # GIVEN a job that runs longer than its lease (the ECS worker's heartbeat renews it; so must Lambda)
    app, worker = lambda_env(lease_s=1.0)

    started, finish = threading.Event(), threading.Event()
    started_at: list[float] = []

    @app.job("long", timeout=20)
    def long(payload, ctx):
        started_at.append(time.monotonic())
        started.set()
        finish.wait(15)  # it runs until the test has looked at its lease
        return "done"

    job_id = app.enqueue("long", {})
    event = event_from(app, receive(app, 1))
    result = {}
    runner = threading.Thread(target=lambda: result.update(response=worker(event, FakeContext())))
    runner.start()
    try:
        # WHEN two lease lengths have passed since the handler started (its claim committed before):
        # waited on the handler itself, as long as the invocation runs (a cold invocation on a loaded
        # machine once took over 10 s to reach it)
        while not started.wait(0.05):
            assert runner.is_alive(), ("the invocation ended and the job never started", result)
        time.sleep(max(0.0, started_at[0] + 2 * app.settings.lease_s - time.monotonic()))
        job = app.get(job_id)
        # THEN the lease is still live, so a duplicate delivery could not rescue the job
        assert job.status is JobStatus.RUNNING
        assert job.lease_expires is not None and job.lease_expires.timestamp() > time.time()
    finally:
        finish.set()
        runner.join(timeout=15)
    assert failed_ids(result["response"]) == set()
    assert (app.get(job_id).status, app.get(job_id).lease_epoch) == (JobStatus.SUCCEEDED, 1)
