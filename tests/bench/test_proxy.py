"""The bench's counting proxy (bench/proxy.py), seen by boto3 with retries off.

It must count every request by service and action whatever the protocol, add its latency to each,
leave long polls alone, and time each exchange when asked.
"""

from __future__ import annotations

import time
import urllib.request

from botocore.config import Config

from bench.proxy import AwsProxy
from tests.aws_scratch import client, exists, put


def test_counts_requests_by_service_and_action(ministack_url: str, table: str, queue_url: str) -> None:
    with AwsProxy(ministack_url) as proxy:
        put(proxy.url, table, "a")
        put(proxy.url, table, "b")
        sqs = client("sqs", proxy.url)
        sqs.send_message(QueueUrl=queue_url, MessageBody="x")
        got = sqs.receive_message(QueueUrl=queue_url, WaitTimeSeconds=1)["Messages"]
        sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=got[0]["ReceiptHandle"])
        # The query protocol (Action in a form body) is recognised too.
        form = urllib.request.Request(
            proxy.url,
            data=b"Action=ListQueues&Version=2012-11-05",
            headers={
                "Content-Type": "application/x-www-form-urlencoded",
                "Authorization": "AWS4-HMAC-SHA256 Credential=testing/20240101/us-east-1/sqs/aws4_request, "
                "SignedHeaders=host, Signature=0",
            },
        )
        with urllib.request.urlopen(form, timeout=5) as answer:
            assert answer.status == 200

        assert proxy.counts == {
            ("dynamodb", "PutItem"): 2,
            ("sqs", "SendMessage"): 1,
            ("sqs", "ReceiveMessage"): 1,
            ("sqs", "DeleteMessage"): 1,
            ("sqs", "ListQueues"): 1,
        }
        proxy.reset_counts()
        assert not proxy.counts
    assert exists(ministack_url, table, "a")


def test_latency_is_added_to_every_request(ministack_url: str, table: str) -> None:
    with AwsProxy(ministack_url, latency_s=0.2) as proxy:
        put(proxy.url, table, "warm")  # connection set-up out of the way
        began = time.monotonic()
        for i in range(5):
            put(proxy.url, table, f"k{i}")
        assert time.monotonic() - began >= 5 * 0.2


def test_long_poll_is_not_cut_short(ministack_url: str, queue_url: str) -> None:
    with AwsProxy(ministack_url) as proxy:
        sqs = client("sqs", proxy.url, Config(retries={"total_max_attempts": 1}, read_timeout=10))
        began = time.monotonic()
        answer = sqs.receive_message(QueueUrl=queue_url, WaitTimeSeconds=3)
        assert "Messages" not in answer
        assert time.monotonic() - began >= 2.5  # the emulator's wait, not the proxy's


def test_trace_times_each_exchange_in_order_and_marks_the_receives_that_delivered(
    ministack_url: str, queue_url: str
) -> None:
    with AwsProxy(ministack_url, latency_s=0.05) as proxy:
        sqs = client("sqs", proxy.url)
        sqs.get_queue_attributes(QueueUrl=queue_url)  # connection set-up, before the trace
        proxy.trace()
        began = time.time()
        sqs.receive_message(QueueUrl=queue_url, WaitTimeSeconds=0)
        sqs.send_message(QueueUrl=queue_url, MessageBody="hint")
        sqs.receive_message(QueueUrl=queue_url, WaitTimeSeconds=1)
        ended = time.time()
        exchanges = proxy.trace(on=False)
        assert proxy.exchanges is None
    assert [(e.action, e.delivered) for e in exchanges] == [
        ("ReceiveMessage", False),
        ("SendMessage", False),
        ("ReceiveMessage", True),
    ]
    for e in exchanges:
        assert began <= e.received <= e.forwarded <= e.answered <= e.returned <= ended
        assert e.forwarded - e.received >= 0.05  # the added latency, before forwarding
    assert exchanges[0].returned <= exchanges[1].received
