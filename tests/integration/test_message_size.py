"""1 MiB messages: queues made at SQS's largest message size, and payloads up to it sent inline, with no S3 call.

MiniStack 1.5.33 enforces both limits as AWS does: a queue's ``MaximumMessageSize`` (1,048,577 bytes
refused at the 1 MiB default, 2,000 at 1 KiB) and SendMessageBatch's 1 MiB total
(``BatchRequestTooLong``), so a batch cut too large fails here as it would on AWS.
"""

from __future__ import annotations

import hashlib

import pytest

from sqsjobs import JobStatus
from sqsjobs._aws import Call, one
from sqsjobs.config import MAX_MESSAGE_BYTES
from tests.apps import large
from tests.integration.helpers import depth, worker_process

pytestmark = pytest.mark.slow

ECHO = "large.echo"
KB = 1000


@pytest.fixture
def app(ministack_url, make_app):
    """A provisioned producer App with the claim-check test handler; its ``requests`` count its own calls."""
    app = make_app(ministack_url)
    app.registry.include(large.app.registry)
    app.provision()
    app.requests.reset()  # count what the test does, not provision's calls
    return app


def s3_requests(app):
    return {op: n for (service, op), n in app.requests.counts.items() if service == "s3"}


def bucket_keys(app):
    listed = app.run(one(Call("s3", "list_objects_v2", {"Bucket": app.settings.payload_bucket})))
    return [o["Key"] for o in listed.get("Contents", [])]


def test_provisioned_queues_and_dlqs_take_1_mib_messages_and_a_256_kib_queue_is_raised(app):
    # GIVEN a queue an older release made at 256 KiB
    queue = app.provision().queue_urls["default"]
    attributes = {"QueueUrl": queue, "Attributes": {"MaximumMessageSize": "262144"}}
    app.run(one(Call("sqs", "set_queue_attributes", attributes)))
    # WHEN provision runs again
    report = app.provision()
    # THEN every queue and DLQ says 1 MiB
    for url in [*report.queue_urls.values(), *report.dlq_urls.values()]:
        asked = {"QueueUrl": url, "AttributeNames": ["MaximumMessageSize"]}
        attrs = app.run(one(Call("sqs", "get_queue_attributes", asked)))
        assert attrs["Attributes"]["MaximumMessageSize"] == str(MAX_MESSAGE_BYTES) == "1048576", url


def test_a_900_kb_payload_travels_in_the_message_to_a_worker_process_with_no_s3_request(app):
    blob = "p" * (900 * KB)
    # WHEN a producer enqueues a 900 KB payload
    job_id = app.enqueue(ECHO, {"blob": blob})
    # THEN it made no S3 request (with 256 KiB messages: a PUT here and a GET at the claim)
    assert s3_requests(app) == {}
    assert bucket_keys(app) == []
    # ... and a worker process runs it with the whole payload, which only the message can have carried
    proc = worker_process(app, "tests.apps.large:app", concurrency=1)
    try:
        job = app.wait(job_id, timeout=60)
    finally:
        proc.terminate()
        proc.wait(30)
    assert job.status is JobStatus.SUCCEEDED
    assert job.result["blob_bytes"] == 900 * KB
    assert job.result["blob_sha256"] == hashlib.sha256(blob.encode()).hexdigest()
    assert bucket_keys(app) == [], "nothing went through the claim-check bucket"


def test_three_300_kb_payloads_go_in_one_send_batch(app):
    # WHEN three 300 KB jobs are enqueued together (900 KB of bodies: one batch under SQS's 1 MiB total)
    ids = app.enqueue_many([{"type": ECHO, "payload": {"blob": str(i) * (300 * KB)}} for i in range(3)])
    # THEN one SendMessageBatch carried them all, and S3 saw nothing
    assert len(ids) == 3
    assert app.requests.counts[("sqs", "SendMessageBatch")] == 1
    assert app.requests.counts[("sqs", "SendMessage")] == 0
    assert s3_requests(app) == {}
    assert depth(app)["visible"] == 3


def test_four_300_kb_payloads_are_cut_into_batches_sqs_takes(app):
    # WHEN 1.2 MB of bodies are enqueued together (one batch would be refused: BatchRequestTooLong)
    ids = app.enqueue_many([{"type": ECHO, "payload": {"blob": str(i) * (300 * KB)}} for i in range(4)])
    # THEN two batches carried them, every job has its hint, and S3 saw nothing
    assert app.requests.counts[("sqs", "SendMessageBatch")] == 2
    assert [app.get(i).status for i in ids] == [JobStatus.QUEUED] * 4
    assert depth(app)["visible"] == 4
    assert s3_requests(app) == {}
