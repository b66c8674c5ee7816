"""Routing around the worker: provision, doctor, stats, the HTTP API, foreign messages and the Lambda adapter.

Over real HTTP on MiniStack; the queues are looked at with plain SQS calls.
"""

from __future__ import annotations

import json
import time

import pytest

from sqsjobs import JobStatus
from sqsjobs.ops.doctor import queue_checks_flow
from sqsjobs.ops.stats import queue_stats_flow
from sqsjobs.runtime.lambda_sqs import LambdaWorker
from sqsjobs.runtime.sweeper import sweep_flow
from sqsjobs.transport import routes
from tests.api.helpers import client, serving
from tests.apps import routing
from tests.integration.helpers import attr, receive_dlq, sqs_call
from tests.integration.lambda_events import FakeContext, event_from, failed_ids, receive

ROUTED = {"priority_queues": {"work"}, "serialized_queues": {"device"}}


@pytest.fixture
def app(ministack_url, make_app):
    app = make_app(ministack_url, **ROUTED)
    app.registry.include(routing.app.registry)
    return app


def attributes(app, name: str) -> dict[str, str]:
    url = sqs_call(app, "get_queue_url", QueueName=name)["QueueUrl"]
    return sqs_call(app, "get_queue_attributes", QueueUrl=url, AttributeNames=["All"])["Attributes"]


def test_provision_creates_the_levels_and_the_fifo_queue_and_doctor_checks_them(app):
    report = app.provision()
    prefix = app.settings.queue_prefix
    # THEN each level is a standard queue redriving to the logical queue's DLQ ...
    dlq_arn = attributes(app, f"{prefix}-work-dlq")["QueueArn"]
    for level in ("high", "low"):
        redrive = json.loads(attributes(app, f"{prefix}-work-{level}")["RedrivePolicy"])
        assert redrive["deadLetterTargetArn"] == dlq_arn
        assert int(redrive["maxReceiveCount"]) == report.max_receive_count
    # ... the serialized queue is FIFO, its backstop a FIFO DLQ; a queue that opts into nothing gets nothing
    fifo = attributes(app, f"{prefix}-device.fifo")
    assert fifo["FifoQueue"] == "true"
    assert json.loads(fifo["RedrivePolicy"])["deadLetterTargetArn"].endswith(f"{prefix}-device-dlq.fifo")
    assert set(report.route_urls) == {"work\0high", "work\0low", "device\0fifo"}
    # AND provisioning again works (SetQueueAttributes is not sent FifoQueue, which it refuses)
    assert set(app.provision().route_urls) == set(report.route_urls)
    # AND doctor passes, then names the level that went missing
    assert all(c.level == "ok" for c in app.run(queue_checks_flow(app.settings, app.registry, "work")))
    sqs_call(app, "delete_queue", QueueUrl=report.route_urls["work\0low"])
    failed = [c for c in app.run(queue_checks_flow(app.settings, app.registry, "work")) if c.level == "fail"]
    assert [(c.name, c.detail) for c in failed] == [(f"queue {prefix}-work-low", "missing")]
    assert "sqsjobs provision" in failed[0].fix


def test_doctor_fails_a_type_whose_default_priority_its_queue_cannot_take(ministack_url, make_app):
    app = make_app(ministack_url)

    @app.job("bulk.export", queue="exports", priority="low")
    def export(payload: dict, ctx: object) -> None: ...

    app.provision()
    failed = [
        c for c in app.run(queue_checks_flow(app.settings, app.registry, "exports")) if c.level == "fail"
    ]
    assert [c.name for c in failed] == ["priority bulk.export"]
    assert "priority_queues" in failed[0].fix


def test_stats_count_every_level_and_show_each(app):
    app.provision()
    app.enqueue("work.run", {"label": "h"}, priority="high")
    for _ in range(2):
        app.enqueue("work.run", {"label": "l"}, priority="low")
    app.enqueue("work.run", {"label": "n"})
    stats = app.run(queue_stats_flow(app.settings, "work"))
    assert (stats.visible, stats.levels) == (4, {"high": 1, "normal": 1, "low": 2})
    plain = app.run(queue_stats_flow(app.settings.evolve(priority_queues=frozenset()), "work"))
    assert (plain.visible, plain.levels) == (1, {})


def test_the_http_api_takes_priority_and_key_and_answers_422_for_what_the_queue_cannot_take(app):
    app.provision()
    with serving(app, token="t") as url, client(url, "t") as http:
        ok = http.post("/jobs", json={"type": "work.run", "payload": {"label": "x"}, "priority": "high"})
        assert ok.status_code == 202, ok.text
        assert app.get(ok.json()["id"]).priority == "high"
        keyed = http.post("/jobs", json={"type": "device.command", "payload": {}, "serialize_key": "dev-1"})
        assert app.get(keyed.json()["id"]).serialize_key == "dev-1"
        refused = http.post("/jobs", json={"type": "device.command", "payload": {}, "priority": "low"})
        assert refused.status_code == 422
        assert refused.json()["type"].endswith("invalid-routing")
        assert "priority_queues" in refused.json()["detail"]
        bad = http.post("/jobs", json={"type": "work.run", "payload": {}, "priority": "urgent"})
        assert bad.status_code == 422


def test_a_foreign_message_with_a_priority_becomes_a_job_on_that_level_and_a_bad_one_goes_to_the_dlq(app):
    app.provision()
    worker = LambdaWorker(app)
    try:
        for body in (
            {
                "sqsjobs": 1,
                "type": "work.run",
                "payload": {"label": "f"},
                "priority": "high",
                "idempotency_key": "a",
            },
            {"sqsjobs": 1, "type": "work.run", "payload": {"label": "g"}, "serialize_key": "k"},
        ):
            sqs_call(
                app,
                "send_message",
                QueueUrl=app.run(app.queue_urls.flow(["work"]))["work"],
                MessageBody=json.dumps(body),
            )
        messages = receive(app, 2, queue="work")
        assert failed_ids(worker(event_from(app, messages, queue="work"), FakeContext())) == set()
    finally:
        worker.close()
    # THEN the good one's job waits on the high level; the one with a key the queue cannot take was dead-lettered
    (hint,) = receive(app, 1, queue=routes.route("work", "high"))
    assert app.get(json.loads(hint["Body"])["id"]).priority == "high"
    (dead,) = receive_dlq(app, "work")
    assert attr(dead, "sqsjobs-reason").startswith("invalid routing")


def test_the_lambda_adapter_runs_a_job_from_a_level_queue_and_a_fifo_queue(app, tmp_path):
    app.provision()
    log = tmp_path / "runs.jsonl"
    high = app.enqueue("work.run", {"label": "h", "log": str(log)}, priority="high")
    keyed = app.enqueue("device.command", {"label": "k", "log": str(log)}, serialize_key="d")
    worker = LambdaWorker(app)
    try:
        for key in (routes.route("work", "high"), routes.route("device", "fifo")):
            messages = receive(app, 1, queue=key)
            # the event's source ARN names the level's own queue, as the level's event source mapping sends it
            assert failed_ids(worker(event_from(app, messages, queue=key), FakeContext())) == set()
    finally:
        worker.close()
    assert app.get(high).status is JobStatus.SUCCEEDED
    assert app.get(keyed).status is JobStatus.SUCCEEDED


def hint_ids(app, key: str) -> list[str]:
    """The job ids of the hints the route's queue holds, taken off it: a hint read once and left there
    came back after the visibility timeout (5 s here) and was read again by a later check."""
    url = app.run(app.queue_urls.flow([key]))[key]
    answer = sqs_call(app, "receive_message", QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1)
    messages = answer.get("Messages", [])
    for m in messages:
        sqs_call(app, "delete_message", QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    return [json.loads(m["Body"])["id"] for m in messages]


def test_every_other_sender_routes_a_job_to_its_level_or_key(app):
    app.provision()
    high, low, keyed = (
        routes.route("work", "high"),
        routes.route("work", "low"),
        routes.route("device", "fifo"),
    )
    # a transaction's jobs
    with app.transaction() as tx:
        in_tx = tx.enqueue("work.run", {"label": "t"}, priority="high")
        keyed_tx = tx.enqueue("device.command", {"label": "t"}, serialize_key="dev-9")
    assert (hint_ids(app, high), hint_ids(app, keyed)) == ([in_tx], [keyed_tx])
    # the sweeper's send of a job held in the record (due beyond SQS's 15-minute delay)
    held = app.enqueue("work.run", {"label": "s"}, priority="low", delay=3600)
    assert hint_ids(app, low) == []
    report = app.run(sweep_flow(app.settings, app.queue_urls, time.time() + 3700))
    assert held in report.dispatched_held
    assert hint_ids(app, low) == [held]
    # a requeue of a cancelled job with a corrected payload (which sends a hint of its own): its
    # key's group holds the enqueue's hint, then the requeue's
    again = app.enqueue("device.command", {"label": "r"}, serialize_key="dev-10")
    app.cancel(again)
    app.retry(again, payload={"label": "r2"})
    assert hint_ids(app, keyed) == [again, again]
