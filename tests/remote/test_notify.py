"""Per-job notification from outside: worker processes, a real webhook receiver, queues on MiniStack.

The receiver answers 500 twice before it takes a delivery; a worker is SIGKILLed while deliveries
are being retried; the receiver keeps each webhook-id's first accepted event, as the Standard
Webhooks spec asks a receiver to, and checks every signature with the ``standardwebhooks`` package.
"""

from __future__ import annotations

import base64
import json
import secrets

import pytest
from standardwebhooks import Webhook

from sqsjobs import JobStatus, Notify
from sqsjobs.envelope import DLQ_ERROR_CLASS, DLQ_JOB_TYPE
from sqsjobs.errors import NotifyInvalid
from sqsjobs.notify.sender import secret_env
from tests.integration.helpers import kill_group, wait_until, worker_process
from tests.remote.receiver import receiving

pytestmark = pytest.mark.slow

APP = "tests.apps.polyglot:app"
SECRET = "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()


def caption(app, tmp_path, notify) -> str:
    return app.enqueue("py.caption", {"runs_dir": str(tmp_path), "title": "t"}, notify=notify)


def worker(app, **env: str):
    return worker_process(app, APP, concurrency=4, **env)


def dead_letters(app) -> list[dict[str, str]]:
    sqs = app.clients.boto3.get("sqs")
    url = sqs.get_queue_url(QueueName=app.settings.dlq_name("default"))["QueueUrl"]
    found = []
    while messages := sqs.receive_message(
        QueueUrl=url, MaxNumberOfMessages=10, MessageAttributeNames=["All"], WaitTimeSeconds=1
    ).get("Messages", []):
        found += [{k: v["StringValue"] for k, v in m.get("MessageAttributes", {}).items()} for m in messages]
    return found


def test_a_receiver_that_fails_twice_hears_each_end_once_signed_across_a_killed_worker(app, tmp_path):
    env = {"SQSJOBS_WEBHOOK_ALLOW": "127.0.0.1", secret_env("service-a"): SECRET}
    with receiving(answers=(500, 500, 200)) as (url, received):
        jobs = [caption(app, tmp_path, Notify(url=url, secret="service-a")) for _ in range(3)]
        first = worker(app, **env)
        try:
            wait_until(lambda: len(received.requests) >= 3, 60, "the first deliveries tried")
        finally:
            kill_group(first)  # SIGKILL while deliveries wait for their retries
        second = worker(app, **env)
        try:
            wait_until(lambda: len(received.accepted()) == 3, 90, "every end delivered")
        finally:
            kill_group(second)
        by_id = received.by_id()
    # each job's end arrived under one webhook-id, refused twice, then taken: one event per job
    events = received.accepted()
    assert sorted(e["data"]["id"] for e in events.values()) == sorted(jobs)
    assert all([status for _, _, status in by_id[i]][:3] == [500, 500, 200] for i in events)
    for webhook_id, requests in by_id.items():
        for headers, body, _ in requests:
            # every request is signed with the configured secret, and says what ended, never the payload
            assert Webhook(SECRET).verify(body, headers) == json.loads(body)
            assert headers["webhook-id"] == webhook_id
    for event in events.values():
        assert event["type"] == "job.succeeded" and event["data"]["status"] == "succeeded"
        assert event["data"]["result"] == {"caption": "t: None"}
        assert "payload" not in event["data"] and "runs_dir" not in json.dumps(event)
    assert [app.get(j).status for j in jobs] == [JobStatus.SUCCEEDED] * 3


def test_webhooks_to_loopback_or_the_metadata_address_are_refused_unless_allowed(app, tmp_path):
    dead: list[dict[str, str]] = []

    def three_dead() -> bool:
        dead.extend(dead_letters(app))
        return len(dead) >= 3

    with receiving() as (url, received):
        jobs = [
            caption(app, tmp_path, Notify(url=url)),  # http://127.0.0.1:<port>
            caption(app, tmp_path, {"url": "https://169.254.169.254/latest/meta-data"}),
            caption(app, tmp_path, {"url": "https://[::1]:9/hooks"}),
        ]
        proc = worker(app)  # no SQSJOBS_WEBHOOK_ALLOW
        try:
            wait_until(three_dead, 60, "three dead deliveries")
        finally:
            kill_group(proc)
        assert received.requests == []
    # each delivery died at once, in the DLQ with why; the jobs themselves succeeded
    assert [(d[DLQ_JOB_TYPE], d[DLQ_ERROR_CLASS]) for d in dead] == [("sqsjobs.notify", "WebhookRefused")] * 3
    assert [app.get(j).status for j in jobs] == [JobStatus.SUCCEEDED] * 3


def test_a_notify_target_is_checked_at_enqueue(app, tmp_path):
    for bad in (
        {"url": "ftp://x"},
        {"url": "https://a", "queue": "https://q"},
        {},
        {"secret": "s"},
        {"mail": "x"},
    ):
        with pytest.raises(NotifyInvalid):
            caption(app, tmp_path, bad)


def test_an_end_is_told_to_an_sqs_queue(app, tmp_path):
    sqs = app.clients.boto3.get("sqs")
    replies = sqs.create_queue(QueueName=f"{app.name}-replies")["QueueUrl"]
    job_id = caption(app, tmp_path, Notify(queue=replies))
    proc = worker(app)
    try:
        wait_until(lambda: app.get(job_id).status is JobStatus.SUCCEEDED, 60, "the job succeeded")
        got: list[dict] = []
        wait_until(
            lambda: (
                got.extend(sqs.receive_message(QueueUrl=replies, WaitTimeSeconds=1).get("Messages", []))
                or got
            ),
            60,
            "the reply",
        )
    finally:
        kill_group(proc)
    [message] = got
    event = json.loads(message["Body"])
    assert (event["type"], event["data"]["id"], event["data"]["status"]) == (
        "job.succeeded",
        job_id,
        "succeeded",
    )
