"""The DLQ reconciler from outside: messages SQS redrove, duplicate and stale copies, one ``sqsjobs sweep --once``.

MiniStack moves a message to the DLQ lazily, at the receive after ``maxReceiveCount`` (2 here): the
tests receive it themselves with a raw SQS client, no worker running, until it is moved; then a
sweeper process runs one pass, and a worker process shows the job runs again.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time

import pytest

from sqsjobs import JobNotFound, JobStatus
from sqsjobs import envelope as env
from sqsjobs._aws import Call, one
from sqsjobs.testing import all_finished, work_until
from sqsjobs.transport import routes, sqs
from tests.apps import redriven
from tests.integration.helpers import (
    depth,
    kill_group,
    queue_url,
    spawn,
    sqs_call,
    worker_env,
    worker_process,
)
from tests.integration.test_guarantees import runs, wait_until

APP = "tests.apps.redriven:app"
SETTINGS = {"SQSJOBS_MAX_RECEIVE_COUNT": "2", "SQSJOBS_SERIALIZED_QUEUES": "device"}


@pytest.fixture
def app(ministack_url, make_app):
    app = make_app(ministack_url, max_receive_count=2, serialized_queues={"device"})
    app.registry.include(redriven.app.registry)
    app.provision()
    return app


def url_of(app, name: str) -> str:
    return str(sqs_call(app, "get_queue_url", QueueName=name)["QueueUrl"])


def fifo_urls(app) -> tuple[str, str]:
    """The serialized queue ``device``'s FIFO queue and its backstop DLQ."""
    fifo = url_of(app, routes.queue_name(app.settings, routes.route("device", routes.FIFO)))
    return fifo, url_of(app, routes.fifo_dlq_name(app.settings, "device"))


def visible(app, url: str) -> int:
    attrs = sqs_call(app, "get_queue_attributes", QueueUrl=url, AttributeNames=["All"])["Attributes"]
    return int(attrs["ApproximateNumberOfMessages"]) + int(attrs["ApproximateNumberOfMessagesNotVisible"])


def redrive(app, url: str, dlq_url: str) -> None:
    """Receive the queue's messages without ever finishing them, until SQS moves them to ``dlq_url``.

    Long-polled, with a deadline rather than a number of tries: a worker process killed just before
    may have left a long poll open on SQS's side, which takes the next message and hides it for a
    visibility timeout; the loop waits for it to come back instead of racing it.
    """
    deadline = time.monotonic() + 30
    # Until the queue is empty: a worker killed just before may also have left a message it had
    # finished but not yet deleted (its delete was still lingering in a batch); it goes too.
    while visible(app, url) or not visible(app, dlq_url):
        if time.monotonic() > deadline:
            raise AssertionError("SQS did not redrive the message within 30 s of receives")
        sqs_call(
            app,
            "receive_message",
            QueueUrl=url,
            MaxNumberOfMessages=10,
            VisibilityTimeout=0,
            WaitTimeSeconds=1,
        )


def read_all(app, url: str) -> list[dict]:
    """Every message of a queue (hidden for 30 s: the test reads them once)."""
    out: list[dict] = []
    while True:
        got = sqs_call(
            app,
            "receive_message",
            QueueUrl=url,
            MaxNumberOfMessages=10,
            WaitTimeSeconds=1,
            VisibilityTimeout=30,
            MessageAttributeNames=["All"],
            AttributeNames=["All"],
        )
        if not got.get("Messages"):
            return out
        out += got["Messages"]


def record(app, job_id: str) -> dict:
    key = {"TableName": app.settings.table_name, "Key": {"id": {"S": job_id}}, "ConsistentRead": True}
    return app.run(one(Call("dynamodb", "get_item", key)))["Item"]


def set_redispatches(app, job_id: str, n: int) -> None:
    """As if the reconciler had re-dispatched the job ``n`` times already."""
    app.run(
        one(
            Call(
                "dynamodb",
                "update_item",
                {
                    "TableName": app.settings.table_name,
                    "Key": {"id": {"S": job_id}},
                    "UpdateExpression": "SET dlq_redispatches = :n",
                    "ExpressionAttributeValues": {":n": {"N": str(n)}},
                },
            )
        )
    )


def sweep(app) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "sqsjobs", "sweep", "--once", "--app", APP],
        env=worker_env(app, **SETTINGS, SQSJOBS_LOG_LEVEL="INFO"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    print(done.stdout, done.stderr)  # the pass's log line, shown when a test fails
    assert done.returncode == 0, done.stderr


def succeeded(app, job_id: str) -> bool:
    """The job exists (a fire's job is made by the worker) and succeeded."""
    try:
        return app.get(job_id).status is JobStatus.SUCCEEDED
    except JobNotFound:
        return False


def run_in_a_worker_process(app, job_id: str) -> None:
    proc = worker_process(app, APP, **SETTINGS)
    try:
        wait_until(lambda: succeeded(app, job_id), 60, "the job succeeded")
    finally:
        kill_group(proc)


# ── a job whose message SQS redrove ──────────────────────────────────────────────────────────
@pytest.mark.slow
def test_a_queued_job_whose_message_sqs_redrove_is_re_dispatched_and_then_runs(app, tmp_path):
    job_id = app.enqueue("count", {"runs_dir": str(tmp_path)})
    main, dlq = queue_url(app, "default"), queue_url(app, "default", dlq=True)
    redrive(app, main, dlq)
    # GIVEN a record that says queued while its only message sits in the DLQ
    assert app.get(job_id).status is JobStatus.QUEUED
    assert (visible(app, main), visible(app, dlq)) == (0, 1)

    sweep(app)
    # THEN the job was re-dispatched: counted in its record, its message back in its queue, the DLQ empty
    assert record(app, job_id)["dlq_redispatches"] == {"N": "1"}
    assert (visible(app, main), visible(app, dlq)) == (1, 0)
    assert app.get(job_id).status is JobStatus.QUEUED
    # AND a worker runs it, once
    run_in_a_worker_process(app, job_id)
    assert len(runs(tmp_path, job_id)) == 1


@pytest.mark.slow
def test_past_the_redispatch_bound_the_record_is_made_dead_with_the_redrive_reason(app, tmp_path):
    job_id = app.enqueue("count", {"runs_dir": str(tmp_path)})
    set_redispatches(app, job_id, 3)
    dlq = queue_url(app, "default", dlq=True)
    redrive(app, queue_url(app, "default"), dlq)

    sweep(app)
    # THEN the record is dead, says why, and keeps the payload (replayable); the DLQ copy stays
    job = app.get(job_id)
    assert job.status is JobStatus.DEAD
    assert job.reason == (
        "SQS redrove its message to the DLQ after 2 receives without a finish; re-dispatched 3 time(s) before"
    )
    assert job.payload == {"runs_dir": str(tmp_path)}
    assert "dlq_redispatches" not in record(app, job_id)
    assert [json.loads(m["Body"])["id"] for m in read_all(app, dlq)] == [job_id]
    assert runs(tmp_path, job_id) == []


@pytest.mark.slow
def test_a_serialized_job_redriven_to_the_fifo_backstop_is_re_dispatched_in_its_group_or_made_dead(
    app, tmp_path
):
    fifo, backstop = fifo_urls(app)
    job_id = app.enqueue("device.count", {"runs_dir": str(tmp_path)}, serialize_key="k1")
    redrive(app, fifo, backstop)
    assert app.get(job_id).status is JobStatus.QUEUED

    sweep(app)
    # THEN its message is back in the FIFO queue, in its group, and the backstop DLQ is empty
    assert (visible(app, fifo), visible(app, backstop)) == (1, 0)
    back = sqs_call(
        app, "receive_message", QueueUrl=fifo, AttributeNames=["MessageGroupId"], VisibilityTimeout=0
    )
    assert back["Messages"][0]["Attributes"]["MessageGroupId"] == "k1"
    run_in_a_worker_process(app, job_id)

    # AND one past the bound is made dead, its copy moved into the standard DLQ with the reason
    dead_id = app.enqueue("device.count", {"runs_dir": str(tmp_path)}, serialize_key="k2")
    set_redispatches(app, dead_id, 3)
    redrive(app, fifo, backstop)
    sweep(app)
    assert app.get(dead_id).status is JobStatus.DEAD
    assert visible(app, backstop) == 0
    [copy] = read_all(app, queue_url(app, "device", dlq=True))
    assert copy["MessageAttributes"]["sqsjobs-job-id"]["StringValue"] == dead_id
    assert copy["MessageAttributes"]["sqsjobs-reason"]["StringValue"].startswith("SQS redrove its message")


# ── copies: one per dead job, none for a finished one, the rest left ─────────────────────────
@pytest.mark.slow
def test_after_a_pass_the_dlq_holds_one_copy_per_dead_job_and_what_is_not_a_job(app, tmp_path):
    dead_id = app.enqueue("broken", {"runs_dir": str(tmp_path)})
    ok_id = app.enqueue("count", {"runs_dir": str(tmp_path)})
    main, dlq = queue_url(app, "default"), queue_url(app, "default", dlq=True)
    got = sqs_call(
        app, "receive_message", QueueUrl=main, MaxNumberOfMessages=10, WaitTimeSeconds=1, VisibilityTimeout=0
    )
    bodies = {json.loads(m["Body"])["id"]: m["Body"] for m in got["Messages"]}
    assert set(bodies) == {dead_id, ok_id}
    work_until(app, all_finished(app, [dead_id, ok_id]))
    assert (app.get(dead_id).status, app.get(ok_id).status) == (JobStatus.DEAD, JobStatus.SUCCEEDED)
    # GIVEN the worker's copy of the dead job, two more copies of it (duplicate hints SQS redrove),
    # a copy of the succeeded job, a body that is not JSON and a job that has no record
    orphan = json.dumps(json.loads(bodies[ok_id]) | {"id": "no-such-job"})
    for body in (bodies[dead_id], bodies[dead_id], bodies[ok_id], "not json", orphan):
        sqs_call(app, "send_message", QueueUrl=dlq, MessageBody=body)
    assert visible(app, dlq) == 6

    sweep(app)
    # THEN one copy of the dead job is left, the worker's (it says why), the copy of the succeeded job
    # is gone, and what is not a job stays
    left = read_all(app, dlq)
    assert sorted(m["Body"] for m in left) == sorted([bodies[dead_id], "not json", orphan])
    [kept] = [m for m in left if m["Body"] == bodies[dead_id]]
    assert kept["MessageAttributes"]["sqsjobs-reason"]["StringValue"] == "permanent error"


@pytest.mark.slow
def test_a_pass_over_a_dlq_holding_a_100000_deep_body_completes_and_leaves_that_body(app, tmp_path):
    dead_id = app.enqueue("broken", {"runs_dir": str(tmp_path)})
    main, dlq = queue_url(app, "default"), queue_url(app, "default", dlq=True)
    got = sqs_call(
        app, "receive_message", QueueUrl=main, MaxNumberOfMessages=10, WaitTimeSeconds=1, VisibilityTimeout=0
    )
    [body] = [m["Body"] for m in got["Messages"]]
    work_until(app, all_finished(app, [dead_id]))
    # GIVEN the dead job's copy, a duplicate of it, and a body no JSON parser can nest, in the DLQ
    deep = "[" * 100_000 + "]" * 100_000
    for extra in (body, deep):
        sqs_call(app, "send_message", QueueUrl=dlq, MessageBody=extra)
    assert visible(app, dlq) == 3

    sweep(app)  # exits 0: the pass completed
    # THEN the duplicate is gone, and what is not a job stays for an operator
    assert sorted(m["Body"] for m in read_all(app, dlq)) == sorted([body, deep])


# ── a sweeper stopped in the middle of its scan ──────────────────────────────────────────────
@pytest.mark.slow
def test_a_sweeper_stopped_mid_scan_hands_back_the_dlq_messages_it_hid(app):
    """SIGTERM while the reconciler's scan holds DLQ messages hidden: they are visible once it exits.

    Before, the stop closed the pass and the messages stayed hidden for the scan's hide time (30 s
    and more): a DLQ read right after a stop (``make demo``'s, an operator's) saw nothing.
    """
    dlq = queue_url(app, "default", dlq=True)
    n = 300  # hints of jobs with no record: each costs the scan a read, so the scan lasts a while
    for start in range(0, n, 10):
        entries = [
            {"Id": str(i), "MessageBody": env.Envelope(f"gone-{start + i}", "count").to_body()}
            for i in range(10)
        ]
        sqs_call(app, "send_message_batch", QueueUrl=dlq, Entries=entries)
    proc = spawn(app, APP, "sweep", **SETTINGS)
    try:
        wait_until(
            lambda: depth(app, dlq=True)["in_flight"] > 0,
            60,
            "the sweeper's scan hid DLQ messages",
            every_s=0.01,
        )
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        wait_until(
            lambda: depth(app, dlq=True)["visible"] == n, 2, "every DLQ message visible after the stop"
        )
        got = sqs_call(app, "receive_message", QueueUrl=dlq, MaxNumberOfMessages=10, VisibilityTimeout=0)
        assert len(got.get("Messages", [])) == 10
    finally:
        kill_group(proc)


def test_a_flow_cancelled_while_its_receive_is_in_flight_still_hands_back_what_that_receive_hid(app):
    """The stop's race: SQS hides messages for a receive whose answer the cancelled caller never reads.

    The driver (``run_async``) lets the receive finish and gives its answer to the flow before the
    cancellation, so a scan can hand those messages back; dropped, they stay hidden for the hide time.
    """
    dlq = queue_url(app, "default", dlq=True)
    held: list[str] = []

    def scanning():  # as the reconciler's scan: a receive that hides, hand back what it holds if stopped
        try:
            response = yield Call(
                "sqs", "receive_message", {"QueueUrl": dlq, "WaitTimeSeconds": 10, "VisibilityTimeout": 300}
            )
            held.extend(m["ReceiptHandle"] for m in response.get("Messages", []))
            yield Call("sqs", "get_queue_attributes", {"QueueUrl": dlq})  # judging it
        except asyncio.CancelledError:
            entries = [(str(i), h, 0) for i, h in enumerate(held)]
            if entries:
                yield Call(
                    "sqs", "change_message_visibility_batch", sqs.change_visibility_batch(dlq, entries)
                )
            raise

    async def go() -> None:
        await app.arun(one(Call("sqs", "get_queue_attributes", {"QueueUrl": dlq})))  # the client made
        task = asyncio.ensure_future(app.arun(scanning()))
        await asyncio.sleep(0.5)  # its long poll waits on the empty DLQ
        # WHEN a message arrives, SQS answers the poll with it, and the flow is cancelled before
        # it read that answer (the loop blocked meanwhile, as a busy process's may be)
        sqs_call(app, "send_message", QueueUrl=dlq, MessageBody=env.Envelope("gone", "count").to_body())
        wait_until(lambda: depth(app, dlq=True)["in_flight"] == 1, 10, "SQS to hand the poll the message")
        task.cancel()
        try:
            with pytest.raises(asyncio.CancelledError):
                await task
        finally:
            await app.aclose()

    asyncio.run(go())
    # THEN the flow read the message and handed it back: visible at once, not after the 300 s hide
    assert len(held) == 1
    wait_until(lambda: depth(app, dlq=True)["visible"] == 1, 5, "the message visible after the cancel")


# ── a schedule fire SQS redrove before any worker turned it into its job ─────────────────────
@pytest.mark.slow
def test_a_redriven_schedule_fire_is_sent_back_a_bounded_number_of_times_and_its_job_runs_once(app, tmp_path):
    from sqsjobs.schedules.expressions import parse_instant
    from sqsjobs.schedules.plugin import idempotency_key
    from sqsjobs.store.codec import idempotent_job_id

    at = "2026-11-28T10:00:00Z"
    fire = env.Fire("nightly", at, "count", {"runs_dir": str(tmp_path)}).to_body()
    at_limit = env.Fire("weekly", at, "count", {"runs_dir": str(tmp_path)}).to_body()
    unsubstituted = env.Fire("hourly", env.SCHEDULED_TIME, "count", {"runs_dir": str(tmp_path)}).to_body()
    main, dlq = queue_url(app, "default"), queue_url(app, "default", dlq=True)
    # GIVEN fires SQS redrove (no worker reason): one fresh, one sent back as often as the bound
    # allows already, one without its occurrence's time; and one a worker refused with a reason
    sqs_call(app, "send_message", QueueUrl=dlq, MessageBody=fire)
    sent_back = {env.FIRE_REDISPATCHES: {"DataType": "Number", "StringValue": "3"}}
    sqs_call(app, "send_message", QueueUrl=dlq, MessageBody=at_limit, MessageAttributes=sent_back)
    sqs_call(app, "send_message", QueueUrl=dlq, MessageBody=unsubstituted)
    refused = {env.DLQ_REASON: {"DataType": "String", "StringValue": "schedule 'x': unknown job type"}}
    rejected = env.Fire("x", at, "count", {"runs_dir": str(tmp_path)}).to_body()
    sqs_call(app, "send_message", QueueUrl=dlq, MessageBody=rejected, MessageAttributes=refused)

    sweep(app)
    # THEN the fresh fire is back in its queue, counted once; the rest stay for an operator
    [back] = read_all(app, main)
    assert back["Body"] == fire and back["MessageAttributes"][env.FIRE_REDISPATCHES]["StringValue"] == "1"
    assert sorted(m["Body"] for m in read_all(app, dlq)) == sorted([at_limit, unsubstituted, rejected])
    # AND a worker turns it into its occurrence's job, which runs once
    job_id = idempotent_job_id("count", idempotency_key("nightly", parse_instant(at)))
    sqs_call(
        app,
        "change_message_visibility",
        QueueUrl=main,
        ReceiptHandle=back["ReceiptHandle"],
        VisibilityTimeout=0,
    )
    run_in_a_worker_process(app, job_id)
    assert len(runs(tmp_path, job_id)) == 1
