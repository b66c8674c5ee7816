"""Jobs sent from outside sqsjobs (docs/enqueue-from-aws.md), attacked from outside: MiniStack over HTTP.

Each body is put on the queue with a plain ``send_message``, as the AWS service or a Go/Node program
would; a real worker process (or the Lambda entry point) handles it. Evidence comes from outside the
worker: the run log the handler appends to (tests/apps/foreign.py), the record, the queues and the DLQ.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import uuid
from pathlib import Path

import boto3
import pytest

from sqsjobs import JobNotFound, JobStatus
from sqsjobs.envelope import DLQ_ERROR_CLASS, DLQ_JOB_TYPE, DLQ_REASON
from sqsjobs.runtime.execution import Execution
from sqsjobs.runtime.lambda_sqs import LambdaWorker
from sqsjobs.store.codec import idempotent_job_id
from sqsjobs.store.runs import CLOCK_SKEW_S
from sqsjobs.transport import sqs
from sqsjobs.transport.dead_letters import decode
from tests.apps import foreign
from tests.integration.helpers import attr, depth, queue_url, receive_dlq, sqs_call, wait_until, worker_env
from tests.integration.lambda_events import FakeContext, event_from, failed_ids, receive

pytestmark = pytest.mark.slow

APP = "tests.apps.foreign:app"
TYPE = "orders.ship"


@pytest.fixture
def app(ministack_url, make_app):
    app = make_app(ministack_url, lease_s=3.0, visibility_timeout_s=2)
    app.registry.include(foreign.app.registry)  # the same handler the worker processes load
    app.provision()
    return app


def start_worker(app, concurrency: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "sqsjobs", "worker", "--app", APP, "--concurrency", str(concurrency)],
        env=worker_env(app),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


@pytest.fixture
def worker(app):
    """A real worker process on the app's queues, killed afterwards; the test may check it still runs."""
    proc = start_worker(app, concurrency=4)
    yield proc
    if proc.poll() is None:
        proc.kill()
        proc.wait(10)


def send(app, body: str, **params) -> str:
    """A plain SendMessage, as the AWS service or another language's SDK makes it; the message id."""
    return str(
        sqs_call(app, "send_message", QueueUrl=queue_url(app), MessageBody=body, **params)["MessageId"]
    )


def runs(runs_dir: Path, job_id: str) -> list[dict]:
    path = runs_dir / job_id
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def succeeded(app, job_id: str) -> bool:
    try:
        return app.get(job_id).status is JobStatus.SUCCEEDED
    except JobNotFound:  # no record yet (any other error is a failure, not "not yet")
        return False


def dlq_by_body(app, n: int) -> dict[str, dict]:
    """The ``n`` messages in the DLQ, by body (received until all are seen; each stays hidden 30 s)."""
    found: dict[str, dict] = {}
    deadline = time.monotonic() + 20
    while len(found) < n and time.monotonic() < deadline:
        found |= {m["Body"]: m for m in receive_dlq(app)}
    assert len(found) == n, f"{len(found)} of {n} messages in the DLQ"
    return found


def drained(app) -> bool:
    return depth(app) == {"visible": 0, "in_flight": 0, "delayed": 0}


# ── the shapes each sender produces ─────────────────────────────────────────────────────────
def eventbridge_body(event: dict) -> str:
    """What a rule's input transformer delivers for the template of ``SqsJobs.enqueue_from_rule``:
    InputPathsMap ``{"detail": "$.detail", "id": "$.id"}``, InputTemplate
    ``{"sqsjobs":1,"type":"orders.ship","payload":<detail>,"idempotency_key":<id>}`` (EventBridge
    splices the detail's JSON and quotes the string id)."""
    return (
        '{"sqsjobs":1,"type":"orders.ship","payload":'
        + json.dumps(event["detail"])
        + ',"idempotency_key":'
        + json.dumps(event["id"])
        + "}"
    )


def sns_notification(message: str, message_id: str) -> str:
    """What SNS delivers to a subscription *without* raw message delivery (the message is a string inside)."""
    return json.dumps(
        {
            "Type": "Notification",
            "MessageId": message_id,
            "TopicArn": "arn:aws:sns:us-east-1:000000000000:orders",
            "Message": message,
            "Timestamp": "2026-11-23T01:00:00.000Z",
            "SignatureVersion": "1",
            "Signature": "EXAMPLE==",
            "SigningCertURL": "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-x.pem",
            "UnsubscribeURL": "https://sns.us-east-1.amazonaws.com/?Action=Unsubscribe",
        },
        indent=2,
    )


def test_each_senders_shape_runs_once_with_the_payload_its_handler_validated(app, worker, tmp_path):
    runs_dir = str(tmp_path)
    # GIVEN one body per kind of sender, each sent with a plain SendMessage
    event = {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": "OrderPlaced",
        "source": "shop.orders",
        "account": "000000000000",
        "time": "2026-11-23T01:00:00Z",
        "region": "us-east-1",
        "resources": [],
        "detail": {"order_id": "41", "runs_dir": runs_dir},
    }
    send(app, eventbridge_body(event))
    # SNS with raw message delivery: the body is what the publisher published (its attributes ride beside it)
    send(
        app,
        json.dumps(
            {
                "sqsjobs": 1,
                "type": TYPE,
                "payload": {"order_id": 42, "runs_dir": runs_dir},
                "idempotency_key": "order-42",
            }
        ),
        MessageAttributes={"source": {"DataType": "String", "StringValue": "billing"}},
    )
    # SNS without raw delivery: the notification wraps it; its SNS MessageId keys the job
    sns_id = str(uuid.uuid4())
    send(
        app,
        sns_notification(
            json.dumps({"sqsjobs": 1, "type": TYPE, "payload": {"order_id": 43, "runs_dir": runs_dir}}),
            sns_id,
        ),
    )
    # a Step Functions sqs:sendMessage task: MessageBody {"sqsjobs": 1, "type": ..., "payload.$": "$.order",
    # "idempotency_key.$": "$$.Execution.Name", "tenant.$": "$.tenant"}, serialised by the service
    send(
        app,
        '{"sqsjobs":1,"type":"orders.ship","payload":{"order_id":44,"runs_dir":DIR,"express":true},'
        '"idempotency_key":"exec-7f3a","tenant":"acme"}'.replace("DIR", json.dumps(runs_dir)),
    )
    # a Go service (json.Marshal of a struct with omitempty) without a key: its SQS message id keys it
    go_id = send(
        app,
        '{"sqsjobs":1,"type":"orders.ship","payload":{"order_id":45,"runs_dir":DIR}}'.replace(
            "DIR", json.dumps(runs_dir)
        ),
    )

    jobs = {
        41: idempotent_job_id(TYPE, event["id"]),
        42: idempotent_job_id(TYPE, "order-42"),
        43: idempotent_job_id(TYPE, f"sns:{sns_id}"),
        44: idempotent_job_id(TYPE, "exec-7f3a", "acme"),
        45: idempotent_job_id(TYPE, f"sqs:{go_id}"),
    }
    # WHEN the worker drains the queue
    wait_until(lambda: all(succeeded(app, j) for j in jobs.values()), 60, "every job succeeded")
    wait_until(lambda: drained(app), 30, "queue drained")

    # THEN each ran once, with its payload as the handler validated it ("41" → 41, the default filled in)
    for order, job_id in jobs.items():
        (run,) = runs(tmp_path, job_id)
        assert run["payload"] == {"order_id": order, "runs_dir": runs_dir, "express": order == 44}
        assert run["attempt"] == 1
        assert app.get(job_id).result == order
    assert runs(tmp_path, jobs[44])[0]["tenant"] == "acme"
    assert app.get(jobs[41]).idempotency_key == event["id"]
    assert receive_dlq(app) == []
    assert worker.poll() is None


def test_one_message_sent_twice_with_its_key_is_one_job_that_runs_once(app, worker, tmp_path):
    # GIVEN the same body with the same key sent twice (a sender's retry; SNS or EventBridge delivering twice),
    # and the same SNS notification delivered twice (same SNS MessageId, two SQS messages)
    body = json.dumps(
        {
            "sqsjobs": 1,
            "type": TYPE,
            "idempotency_key": "retry-me",
            "payload": {"order_id": 1, "runs_dir": str(tmp_path)},
        }
    )
    notification = sns_notification(
        json.dumps({"sqsjobs": 1, "type": TYPE, "payload": {"order_id": 2, "runs_dir": str(tmp_path)}}),
        "sns-dup-1",
    )
    for _ in range(2):
        send(app, body)
        send(app, notification)
    keyed, by_sns = idempotent_job_id(TYPE, "retry-me"), idempotent_job_id(TYPE, "sns:sns-dup-1")

    # WHEN the worker handles all four, and the queue is empty again
    wait_until(lambda: succeeded(app, keyed) and succeeded(app, by_sns), 60, "both jobs succeeded")
    wait_until(lambda: drained(app), 30, "queue drained")

    # THEN each job ran exactly once, on its first attempt
    assert [len(runs(tmp_path, keyed)), len(runs(tmp_path, by_sns))] == [1, 1]
    assert app.get(keyed).attempt == app.get(by_sns).attempt == 1
    assert receive_dlq(app) == []


def test_a_message_redelivered_after_its_visibility_timeout_is_the_same_job(app, tmp_path):
    # GIVEN a message without a key, handled by a worker that then died before deleting it
    # (its job enqueued, its Ack never applied): SQS delivers the same message again after the timeout
    message_id = send(
        app, json.dumps({"sqsjobs": 1, "type": TYPE, "payload": {"order_id": 3, "runs_dir": str(tmp_path)}})
    )
    url = queue_url(app)
    response = sqs_call(
        app, "receive_message", **sqs.receive(url, max_messages=1, wait_s=5) | {"VisibilityTimeout": 2}
    )
    (delivery,) = sqs.deliveries("default", url, response)

    async def die_before_delete() -> None:
        assert (await Execution(app, "died-before-delete").handle(delivery)).kind == "delete"
        await app.aclose()

    asyncio.run(die_before_delete())
    job_id = idempotent_job_id(TYPE, f"sqs:{message_id}")
    assert app.get(job_id).status is JobStatus.QUEUED

    # WHEN a worker process handles the hint and the redelivered message
    proc = subprocess.Popen(
        [sys.executable, "-m", "sqsjobs", "worker", "--app", APP],
        env=worker_env(app),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        wait_until(lambda: succeeded(app, job_id), 60, "job succeeded")
        wait_until(lambda: drained(app), 30, "queue drained (the redelivery was handled)")
    finally:
        proc.kill()
        proc.wait(10)

    # THEN the redelivery found the same job: one run
    assert len(runs(tmp_path, job_id)) == 1
    assert app.get(job_id).attempt == 1


def test_bad_messages_go_to_the_dlq_with_their_reason_and_the_worker_keeps_running(app, worker, tmp_path):
    runs_dir = str(tmp_path)
    # GIVEN a job already enqueued under a key, then a message that reuses the key with another payload
    first = json.dumps(
        {
            "sqsjobs": 1,
            "type": TYPE,
            "idempotency_key": "k1",
            "payload": {"order_id": 1, "runs_dir": runs_dir},
        }
    )
    send(app, first)
    wait_until(lambda: succeeded(app, idempotent_job_id(TYPE, "k1")), 30, "first job succeeded")
    bad = {
        "invalid payload": {
            "sqsjobs": 1,
            "type": TYPE,
            "payload": {"order_id": "many", "runs_dir": runs_dir},
        },
        "unknown job type": {"sqsjobs": 1, "type": "orders.nope", "payload": {}},
        "idempotency conflict": {
            "sqsjobs": 1,
            "type": TYPE,
            "idempotency_key": "k1",
            "payload": {"order_id": 2, "runs_dir": runs_dir},
        },
        "malformed message": {"sqsjobs": 1, "type": TYPE, "idempotencyKey": "k2"},
    }
    bodies = {reason: json.dumps(body) for reason, body in bad.items()}
    bodies["not JSON"] = "order 7 please"
    bodies["SNS without an sqsjobs message"] = sns_notification("hello", "sns-x")
    for body in bodies.values():
        send(app, body)
    # ... and after them, a good one
    good = json.dumps(
        {
            "sqsjobs": 1,
            "type": TYPE,
            "idempotency_key": "after",
            "payload": {"order_id": 9, "runs_dir": runs_dir},
        }
    )
    send(app, good)

    # WHEN the worker has handled them all
    wait_until(lambda: succeeded(app, idempotent_job_id(TYPE, "after")), 60, "the good message ran")
    wait_until(lambda: drained(app), 30, "queue drained")

    # THEN each bad one is in the DLQ, as sent, with a reason that says what is wrong
    dead = dlq_by_body(app, len(bodies))
    reasons = {body: attr(dead[body], DLQ_REASON) for body in bodies.values()}
    assert reasons[bodies["invalid payload"]].startswith(
        "invalid payload: payload for 'orders.ship' does not validate"
    )
    assert "order_id" in reasons[bodies["invalid payload"]]
    assert reasons[bodies["unknown job type"]] == "unknown job type 'orders.nope'"
    assert reasons[bodies["idempotency conflict"]].startswith("idempotency conflict: idempotency key 'k1'")
    assert "unknown field(s) idempotencyKey" in reasons[bodies["malformed message"]]
    assert reasons[bodies["not JSON"]].startswith("malformed message: message body is not JSON")
    assert "raw message delivery" in reasons[bodies["SNS without an sqsjobs message"]]
    assert attr(dead[bodies["invalid payload"]], DLQ_ERROR_CLASS) == "PayloadInvalid"
    assert attr(dead[bodies["unknown job type"]], DLQ_JOB_TYPE) == "orders.nope"
    # ... and `sqsjobs dlq list` shows each with its type and reason (no job id: nothing to replay)
    listed = decode("default", queue_url(app, dlq=True), dead[bodies["invalid payload"]])
    assert (listed.job_type, listed.job_id, listed.malformed) == (TYPE, None, "")
    assert listed.reason == reasons[bodies["invalid payload"]]
    # ... nothing bad ran, the first job ran once, and the worker is still running
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [idempotent_job_id(TYPE, "k1"), idempotent_job_id(TYPE, "after")]
    )
    assert len(runs(tmp_path, idempotent_job_id(TYPE, "k1"))) == 1
    assert worker.poll() is None


def test_a_delay_is_honoured(app, worker, tmp_path):
    # GIVEN a message that asks for a 3 s delay (EventBridge cannot set DelaySeconds, so the body says it)
    before_send = time.time()
    send(
        app,
        json.dumps(
            {
                "sqsjobs": 1,
                "type": TYPE,
                "idempotency_key": "later",
                "delay_s": 3,
                "payload": {"order_id": 5, "runs_dir": str(tmp_path)},
            }
        ),
    )
    job_id = idempotent_job_id(TYPE, "later")

    # WHEN the worker handles it
    wait_until(lambda: succeeded(app, job_id), 60, "job succeeded")

    # THEN it was due 3 s after it was sent, and was not started before (within the claim's clock allowance)
    (run,) = runs(tmp_path, job_id)
    assert run["run_at"] >= before_send + 3 - 0.001  # SentTimestamp is in whole milliseconds
    assert run["started_at"] >= run["run_at"] - CLOCK_SKEW_S


def test_the_lambda_entry_point_enqueues_the_message_runs_the_job_and_ignores_a_redelivery(app, tmp_path):
    worker = LambdaWorker(app)
    try:
        # GIVEN a message without a key, handled by the Lambda entry point
        body = json.dumps(
            {"sqsjobs": 1, "type": TYPE, "payload": {"order_id": "6", "runs_dir": str(tmp_path)}}
        )
        message_id = send(app, body)
        (message,) = receive(app, 1)
        assert failed_ids(worker(event_from(app, [message]), FakeContext())) == set()
        job_id = idempotent_job_id(TYPE, f"sqs:{message_id}")
        assert app.get(job_id).status is JobStatus.QUEUED
        # WHEN the hint it sent comes back in an event, with the same message again
        # (its delete lost: the ESM deletes on success, this test does not; its visibility timeout ends now)
        sqs_call(
            app,
            "change_message_visibility",
            QueueUrl=queue_url(app),
            ReceiptHandle=message["ReceiptHandle"],
            VisibilityTimeout=0,
        )
        batch = receive(app, 2)
        assert message_id in {m["MessageId"] for m in batch}
        assert failed_ids(worker(event_from(app, batch), FakeContext())) == set()
        # ... and the hint the redelivery sent, too
        for m in batch:
            sqs_call(app, "delete_message", QueueUrl=queue_url(app), ReceiptHandle=m["ReceiptHandle"])
        (again,) = receive(app, 1)
        assert failed_ids(worker(event_from(app, [again]), FakeContext())) == set()
    finally:
        worker.close()

    # THEN the job ran once, with the validated payload
    assert app.get(job_id).status is JobStatus.SUCCEEDED
    (run,) = runs(tmp_path, job_id)
    assert run["payload"]["order_id"] == 6


def test_eventbridge_and_sns_on_the_emulator_deliver_messages_the_worker_runs_once(app, worker, tmp_path):
    """The real services' rendering (MiniStack's EventBridge input transformer and SNS delivery), not ours."""
    runs_dir = str(tmp_path)
    clients = {"endpoint_url": app.settings.endpoint_url, "region_name": app.settings.region}
    events, topics = boto3.client("events", **clients), boto3.client("sns", **clients)
    url = queue_url(app)
    queue_arn = sqs_call(app, "get_queue_attributes", QueueUrl=url, AttributeNames=["QueueArn"])[
        "Attributes"
    ]["QueueArn"]
    # GIVEN a rule whose input transformer is the one SqsJobs.enqueue_from_rule synthesizes
    rule = f"{app.name}-orders"
    rule_arn = events.put_rule(Name=rule, EventPattern=json.dumps({"source": ["shop.orders"]}))["RuleArn"]
    events.put_targets(
        Rule=rule,
        Targets=[
            {
                "Id": "jobs",
                "Arn": queue_arn,
                "InputTransformer": {
                    "InputPathsMap": {"detail": "$.detail", "id": "$.id"},
                    "InputTemplate": '{"sqsjobs":1,"type":"orders.ship","payload":<detail>,"idempotency_key":<id>}',
                },
            }
        ],
    )
    # ... a topic with a raw subscription (enqueue_from_topic), and one without raw delivery
    raw = topics.create_topic(Name=f"{app.name}-raw")["TopicArn"]
    wrapped = topics.create_topic(Name=f"{app.name}-wrapped")["TopicArn"]
    try:
        topics.subscribe(
            TopicArn=raw, Protocol="sqs", Endpoint=queue_arn, Attributes={"RawMessageDelivery": "true"}
        )
        topics.subscribe(TopicArn=wrapped, Protocol="sqs", Endpoint=queue_arn)
        # ... and the queue policy the CDK helpers add (what real AWS needs before it delivers)
        allow = [
            {
                "Effect": "Allow",
                "Principal": {"Service": f"{service}.amazonaws.com"},
                "Action": "sqs:SendMessage",
                "Resource": queue_arn,
                "Condition": {"ArnEquals": {"aws:SourceArn": source}},
            }
            for service, source in (("events", rule_arn), ("sns", raw), ("sns", wrapped))
        ]
        policy = json.dumps({"Version": "2012-10-17", "Statement": allow})
        sqs_call(app, "set_queue_attributes", QueueUrl=url, Attributes={"Policy": policy})

        # WHEN an event is put and two messages are published
        put = events.put_events(
            Entries=[
                {
                    "Source": "shop.orders",
                    "DetailType": "OrderPlaced",
                    "Detail": json.dumps({"order_id": "61", "runs_dir": runs_dir}),
                }
            ]
        )
        topics.publish(
            TopicArn=raw,
            Message=json.dumps(
                {
                    "sqsjobs": 1,
                    "type": TYPE,
                    "idempotency_key": "order-62",
                    "payload": {"order_id": 62, "runs_dir": runs_dir},
                }
            ),
        )
        published = topics.publish(
            TopicArn=wrapped,
            Message=json.dumps(
                {"sqsjobs": 1, "type": TYPE, "payload": {"order_id": 63, "runs_dir": runs_dir}}
            ),
        )

        # THEN each is one job, keyed by the event id, the publisher's key and the SNS message id, run once
        jobs = {
            61: idempotent_job_id(TYPE, put["Entries"][0]["EventId"]),
            62: idempotent_job_id(TYPE, "order-62"),
            63: idempotent_job_id(TYPE, f"sns:{published['MessageId']}"),
        }
        wait_until(lambda: all(succeeded(app, j) for j in jobs.values()), 60, "every job succeeded")
        wait_until(lambda: drained(app), 30, "queue drained")
    finally:
        events.remove_targets(Rule=rule, Ids=["jobs"])
        events.delete_rule(Name=rule)
        for topic in (raw, wrapped):
            topics.delete_topic(TopicArn=topic)
    for order, job_id in jobs.items():
        assert [r["payload"]["order_id"] for r in runs(tmp_path, job_id)] == [order]
    assert receive_dlq(app) == []


# ── dedup modes in the message ─────────────────────────────────────────────────────────────
def ran_jobs(runs_dir: Path) -> dict[str, list[dict]]:
    """Every job that ran, by id, with its runs (one file per job: tests/apps/foreign.py)."""
    return {p.name: runs(runs_dir, p.name) for p in runs_dir.iterdir()} if runs_dir.exists() else {}


def nothing_visible_or_in_flight(app) -> bool:
    """Every message sent so far was handled (a delayed one may still wait for its time)."""
    now = depth(app)
    return now["visible"] == now["in_flight"] == 0


def order(runs_dir: Path, n: int, **fields) -> str:
    return json.dumps(
        {"sqsjobs": 1, "type": TYPE, "payload": {"order_id": n, "runs_dir": str(runs_dir)}, **fields}
    )


def test_a_senders_dedup_mode_holds_like_an_enqueues(app, worker, tmp_path):
    throttled, windowed, unique, debounced = (tmp_path / name for name in ("t", "w", "u", "d"))
    for folder in (throttled, windowed, unique, debounced):
        folder.mkdir()
    # GIVEN three senders throttling one key, and two sending one payload under a one-hour window
    for n in (1, 2, 3):
        send(app, order(throttled, n, idempotency_key="t1", throttle=3600))
    for _ in range(2):
        send(app, order(windowed, 7, idempotency_key="w1", dedupe_for=3600))
    # ... a burst under a debounce, each message handled before the next is sent (a sender's order;
    # the job's own message waits, delayed, for the quiet period)
    for n in (1, 2, 3):
        send(app, order(debounced, n, idempotency_key="d1", debounce=5, debounce_max=60))
        wait_until(lambda: nothing_visible_or_in_flight(app), 30, "the debounced message handled")
    # ... and a key held while its job is live
    send(app, order(unique, 1, idempotency_key="u1", unique="while_active"))

    # WHEN the worker has run what they asked for
    wait_until(lambda: len(ran_jobs(throttled)) and len(ran_jobs(windowed)), 60, "the windowed jobs ran")
    wait_until(
        lambda: len(ran_jobs(debounced)) == 1 and len(ran_jobs(unique)) == 1, 60, "debounce and unique"
    )
    # ... and the unique key is enqueued again once its job has finished
    (first_unique,) = ran_jobs(unique)
    wait_until(lambda: succeeded(app, first_unique), 30, "the unique key's first job finished")
    send(app, order(unique, 2, idempotency_key="u1", unique="while_active"))
    wait_until(lambda: len(ran_jobs(unique)) == 2, 60, "a new job for the freed key")
    wait_until(lambda: drained(app), 30, "queue drained")

    # THEN throttle: one job, run once; dedupe_for: one job for the same payload, run once
    assert [len(r) for r in ran_jobs(throttled).values()] == [1]
    assert [len(r) for r in ran_jobs(windowed).values()] == [1]
    # ... debounce: one job, run once, with the last payload of the burst
    [[debounced_run]] = ran_jobs(debounced).values()
    assert debounced_run["payload"]["order_id"] == 3
    # ... while_active: a second job once the first finished, each run once
    assert sorted(r[0]["payload"]["order_id"] for r in ran_jobs(unique).values()) == [1, 2]
    assert receive_dlq(app) == []


def test_a_window_counts_from_when_the_sender_sent_not_from_when_the_worker_read(app, tmp_path):
    # GIVEN a two-second throttle window, and a message sent well inside one window
    window_s = 2.0
    while (time.time() % window_s) > 0.8:  # at least 1.2 s before the window ends
        time.sleep(0.05)
    sent_slot = int(time.time() * 1000) // int(window_s * 1000)
    send(app, order(tmp_path, 1, idempotency_key="late", throttle=window_s))
    # WHEN no worker reads it until that window has passed
    time.sleep(window_s + 0.5)
    proc = start_worker(app, concurrency=2)
    try:
        wait_until(lambda: len(ran_jobs(tmp_path)) == 1, 60, "the throttled job ran")
    finally:
        proc.kill()
        proc.wait(10)
    # THEN its job is the one of the window it was sent in (a redelivery later is the same job)
    expected = idempotent_job_id(TYPE, f"late\0throttle/{int(window_s * 1000)}ms@{sent_slot}")
    assert list(ran_jobs(tmp_path)) == [expected]


def test_a_malformed_or_contradictory_dedup_mode_goes_to_the_dlq_with_its_reason(app, worker, tmp_path):
    bodies = {
        "unknown unique": order(tmp_path, 1, idempotency_key="m1", unique="forever"),
        "no key": order(tmp_path, 2, dedupe_for=60),
        "negative window": order(tmp_path, 3, idempotency_key="m3", throttle=-5),
        "two modes": order(tmp_path, 4, idempotency_key="m4", throttle=60, dedupe_for=60),
        "max without debounce": order(tmp_path, 5, idempotency_key="m5", debounce_max=60),
    }
    for body in bodies.values():
        send(app, body)
    send(app, order(tmp_path, 9, idempotency_key="fine", throttle=60))
    wait_until(lambda: len(ran_jobs(tmp_path)) == 1, 60, "the good message ran")
    wait_until(lambda: drained(app), 30, "queue drained")
    dead = dlq_by_body(app, len(bodies))
    reasons = {name: attr(dead[body], DLQ_REASON) for name, body in bodies.items()}
    assert '"unique" must be "while_active"' in reasons["unknown unique"]
    assert 'needs an "idempotency_key"' in reasons["no key"]
    assert '"throttle" must be a positive number' in reasons["negative window"]
    assert reasons["two modes"].startswith("invalid dedup mode: give one of")
    assert reasons["max without debounce"].startswith("invalid dedup mode: debounce_max needs debounce")
    assert worker.poll() is None
