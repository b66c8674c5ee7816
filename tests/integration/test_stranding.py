"""No stranded record where two features meet: every unfinished job keeps a witness that brings it back.

Each test runs real worker processes on MiniStack with the limits that make a meeting bite
(short redrive limits, long holds), no sweeper unless it says so, and then asks the records and
the queues: every job ended, or is still on its way with a witness.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from pathlib import Path

import pytest

from bench.proxy import AwsProxy, Pending, Step
from sqsjobs import JobStatus
from sqsjobs.ops.stranded import find_stranded
from sqsjobs.runtime.lambda_sqs import LambdaWorker
from sqsjobs.runtime.sweeper import sweep
from sqsjobs.transport import routes
from tests.apps import stranding
from tests.integration.helpers import kill_group, queue_url, sqs_call, wait_until, worker_process
from tests.integration.lambda_events import FakeContext, event_from, failed_ids, invocation_process, receive

pytestmark = pytest.mark.slow

APP = "tests.apps.stranding:app"
#: The tries botocore makes per call in the worker the witness test throttles (its own retry
#: settings, ``AWS_MAX_ATTEMPTS``): a write refused this many times in a row failed for good.
TRIES = 2
THROTTLED = json.dumps(
    {
        "__type": "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException",
        "message": "The level of configured provisioned throughput for the table was exceeded.",
    }
).encode()


class ThrottledWitness(AwsProxy):
    """Answers the first ``TRIES`` witness writes of job ``victim`` as throttled, as DynamoDB would.

    A witness write is the owner's UpdateItem that gives its running job a ``pending`` attention
    entry (``store/outlived.py``); the worker makes no other. ``landed``: such writes forwarded since.
    """

    def __init__(self, upstream: str, victim: str) -> None:
        super().__init__(upstream)
        self.victim = victim
        self.refused = 0
        self.landed = 0

    async def _before_forward(self, pending: Pending, writer: asyncio.StreamWriter) -> Step:
        if pending.service != "dynamodb" or pending.action != "UpdateItem":
            return "forward"
        request = json.loads(pending.message.body)
        attn = request.get("ExpressionAttributeValues", {}).get(":attn", {}).get("S", "")
        if request["Key"]["id"]["S"] != self.victim or not attn.startswith("pending#"):
            return "forward"
        if self.refused == TRIES:
            self.landed += 1
            return "forward"
        self.refused += 1
        pending.fault = "throttle"
        head = [
            "HTTP/1.1 400 Bad Request",
            "Content-Type: application/x-amz-json-1.0",
            "x-amzn-ErrorType: ProvisionedThroughputExceededException",
            "x-amzn-RequestId: 00000000-0000-0000-0000-000000000000",
            f"Content-Length: {len(THROTTLED)}",
        ]
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + THROTTLED)
        await writer.drain()
        return "answered"


def runs(path: Path) -> Counter[str]:
    lines = path.read_text().splitlines() if path.exists() else []
    return Counter(line.split()[0] for line in lines)


def depth(app, url: str) -> int:
    attrs = sqs_call(app, "get_queue_attributes", QueueUrl=url, AttributeNames=["All"])["Attributes"]
    return int(attrs["ApproximateNumberOfMessages"]) + int(attrs["ApproximateNumberOfMessagesNotVisible"])


def test_serialized_jobs_deferred_by_a_held_limit_past_the_redrive_limit_all_run(
    ministack_url, make_app, tmp_path
):
    # GIVEN a serialized queue under a concurrency-1 limit, and a FIFO redrive limit of 6 receives
    settings = {"serialized_queues": {"device"}, "max_receive_count": 6}
    env = {"SQSJOBS_SERIALIZED_QUEUES": "device", "SQSJOBS_MAX_RECEIVE_COUNT": "6"}
    app = make_app(ministack_url, **settings)
    app.registry.include(stranding.app.registry)
    app.provision()
    log = tmp_path / "runs"
    holder = app.enqueue("hold", {"runs": str(log), "sleep_s": 15})
    workers = [worker_process(app, APP, concurrency=2, queues="default,device", **env)]
    try:
        wait_until(lambda: runs(log)[holder] == 1, 30, "the holder's start")
        # WHEN nine serialized jobs over three keys wait on the held slot, far more deferrals than
        # the redrive limit allows, with two workers and no sweeper
        steps = [app.enqueue("device.step", {"runs": str(log)}, serialize_key=f"k{i % 3}") for i in range(9)]
        workers.append(worker_process(app, APP, concurrency=2, queues="default,device", **env))
        # THEN every one of them runs, once: none was left to SQS's redrive with a queued record
        wait_until(
            lambda: all(app.get(j, load_result=False).status is JobStatus.SUCCEEDED for j in steps),
            90,
            "every serialized job succeeded",
        )
        assert {j: runs(log)[j] for j in steps} == dict.fromkeys(steps, 1)
        backstop = sqs_call(app, "get_queue_url", QueueName=routes.fifo_dlq_name(app.settings, "device"))
        assert depth(app, backstop["QueueUrl"]) == 0
    finally:
        kill_group(*workers)


def test_a_message_deleted_under_running_jobs_leaves_each_a_witness_down_to_its_last_attempt(
    ministack_url, make_app, tmp_path
):
    # GIVEN two running jobs of a type with two attempts: one on its last attempt (15 s), one on its
    # first (4 s, then it asks to run again 1 s later); 3 s leases, a 2 s visibility, no sweeper; the
    # worker's DynamoDB answers the first witness write of the last attempt's job as throttled, as
    # often as botocore tries it (the write fails)
    app = make_app(ministack_url, lease_s=3.0, visibility_timeout_s=2)
    app.registry.include(stranding.app.registry)
    app.limits.include(stranding.app.limits)
    app.provision()
    log = tmp_path / "runs"
    last = app.enqueue("plain", {"runs": str(log), "retry_first_s": 0.2, "sleep_second_s": 15})
    proxy = ThrottledWitness(ministack_url, last)
    proxy.start()
    throttled = {
        "SQSJOBS_ENDPOINT_URL": proxy.url,
        "AWS_RETRY_MODE": "standard",
        "AWS_MAX_ATTEMPTS": str(TRIES),
    }
    worker = worker_process(app, APP, concurrency=2, **throttled)
    workers = [worker]
    try:
        wait_until(lambda: runs(log)[last] == 2, 30, "the last attempt's start")
        first = app.enqueue("plain", {"runs": str(log), "sleep_first_s": 4, "retry_first_s": 1})
        wait_until(lambda: runs(log)[first] == 1, 30, "the other job's start")
        # WHEN an operator purges the queue under them (their messages are gone)
        url = sqs_call(app, "get_queue_url", QueueName=app.settings.queue_name("default"))["QueueUrl"]
        sqs_call(app, "purge_queue", QueueUrl=url)
        # THEN the job that asks to run again is not re-armed on nothing: a fresh copy brings it back
        wait_until(lambda: app.get(first).status is JobStatus.SUCCEEDED, 30, "the retried job succeeded")
        assert runs(log)[first] == 2
        assert proxy.refused == TRIES  # the last attempt's witness write was refused for good once
        # AND WHEN the worker running the last attempt is killed while it runs
        assert app.get(last).status is JobStatus.RUNNING
        kill_group(worker)
        workers.append(worker_process(app, APP, concurrency=2))
        wait_until(lambda: app.get(last).lease_expires.timestamp() < time.time(), 10, "its lease lapsed")
        # THEN its record kept a witness the sweeper follows (its owner wrote it again after the
        # throttled write), and the job ends dead, unrun a third time, saying its attempts were used
        # up by runs that never finished
        assert sweep(app).redispatched == [last], f"witness writes landed: {proxy.landed}"
        wait_until(lambda: app.get(last).status.terminal, 20, "the last attempt's job ended")
    finally:
        kill_group(*workers)
        proxy.stop()
    job = app.get(last)
    assert job.status is JobStatus.DEAD and job.attempt == 2, job
    assert job.reason is not None and job.reason.startswith("attempts exhausted (2/2)"), job.reason
    assert runs(log)[last] == 2
    # AND the audit finds no unfinished job left without a witness
    found = find_stranded(app.run, app.settings, time.time(), segments=1, grace_s=0.0)
    assert found.stranded == [], [s.to_dict() for s in found.stranded]


def test_a_message_purged_under_a_lambda_invocation_leaves_each_running_job_a_witness(
    ministack_url, make_app, tmp_path
):
    # GIVEN one invocation of the Lambda entry point (in a process of its own) running two jobs of a
    # type with two attempts and a 60 s timeout: one on its last attempt (50 s), one on its first (4 s,
    # then it asks to run again 1 s later); 3 s leases, no sweeper, no event source mapping (the test
    # receives, invokes, and deletes what a reply reports done)
    app = make_app(ministack_url, lease_s=3.0, visibility_timeout_s=10)
    function = make_app(ministack_url, app.name, lease_s=3.0, visibility_timeout_s=10)
    for each in (app, function):
        each.registry.include(stranding.app.registry)
        each.limits.include(stranding.app.limits)
    app.provision()
    url = queue_url(app)
    log = tmp_path / "runs"
    # the invocations this test makes in its own process, on an App of their own as a function has
    # (its clients belong to the invocations' event loop)
    here = LambdaWorker(function)

    def invoke(messages):
        response = here(event_from(app, messages), FakeContext(start_ms=120_000))
        for m in messages:
            if m["MessageId"] not in failed_ids(response):
                sqs_call(app, "delete_message", QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])

    try:
        last = app.enqueue("plain", {"runs": str(log), "retry_first_s": 0.2, "sleep_second_s": 50})
        invoke(receive(app, 1))  # its first attempt asks to run again
        first = app.enqueue("plain", {"runs": str(log), "sleep_first_s": 4, "retry_first_s": 1})
        invocation = invocation_process(app, APP, event_from(app, receive(app, 2, timeout_s=15)), tmp_path)
        try:
            wait_until(lambda: runs(log) == {last: 2, first: 1}, 30, "both runs' start")
            # WHEN an operator purges the queue under them (their messages are gone)
            sqs_call(app, "purge_queue", QueueUrl=url)
            # THEN the job that asks to run again is not re-armed on nothing: a fresh copy of its
            # message comes back, and the invocation it starts runs the job again
            [copy] = receive(app, 1, timeout_s=30)
            invoke([copy])
            assert (app.get(first).status, runs(log)[first]) == (JobStatus.SUCCEEDED, 2)
            # AND WHEN the invocation still running the last attempt is lost (its sandbox killed)
            assert app.get(last).status is JobStatus.RUNNING
        finally:
            kill_group(invocation)
        wait_until(lambda: app.get(last).lease_expires.timestamp() < time.time(), 10, "its lease lapsed")
        # THEN its record kept a witness the sweeper follows, and the job ends dead, unrun a third
        # time, saying its attempts were used up by runs that never finished
        assert sweep(app).redispatched == [last]
        invoke(receive(app, 1))
    finally:
        here.close()
    job = app.get(last)
    assert job.status is JobStatus.DEAD and job.attempt == 2, job
    assert job.reason is not None and job.reason.startswith("attempts exhausted (2/2)"), job.reason
    assert runs(log)[last] == 2
