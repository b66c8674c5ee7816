"""The fault proxy of the soak and the benchmark (bench/proxy.py), seen by boto3 with retries off.

Each fault kind must reach the client exactly as a real AWS failure does, and the two reset kinds
must differ in the one thing that matters: whether the write happened.
"""

from __future__ import annotations

import time
import urllib.request
import uuid
from collections.abc import Iterator

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError, ConnectionClosedError, ReadTimeoutError

from bench.proxy import AwsProxy, FaultPlan

NO_RETRIES = Config(retries={"total_max_attempts": 1}, read_timeout=5, connect_timeout=2)


def _client(service: str, url: str, config: Config = NO_RETRIES):  # type: ignore[no-untyped-def]
    return boto3.client(service, endpoint_url=url, region_name="us-east-1", config=config)


@pytest.fixture
def table(ministack_url: str) -> Iterator[str]:
    name = f"proxy{uuid.uuid4().hex[:8]}"
    ddb = _client("dynamodb", ministack_url)
    ddb.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    yield name
    ddb.delete_table(TableName=name)


@pytest.fixture
def queue_url(ministack_url: str) -> Iterator[str]:
    sqs = _client("sqs", ministack_url)
    url = sqs.create_queue(QueueName=f"proxy{uuid.uuid4().hex[:8]}")["QueueUrl"]
    yield url
    sqs.delete_queue(QueueUrl=url)


def _exists(ministack_url: str, table: str, key: str) -> bool:
    item = _client("dynamodb", ministack_url).get_item(
        TableName=table, Key={"pk": {"S": key}}, ConsistentRead=True
    )
    return "Item" in item


def _put(url: str, table: str, key: str, config: Config = NO_RETRIES) -> None:
    _client("dynamodb", url, config).put_item(TableName=table, Item={"pk": {"S": key}})


def test_counts_requests_by_service_and_action(ministack_url: str, table: str, queue_url: str) -> None:
    with AwsProxy(ministack_url) as proxy:
        _put(proxy.url, table, "a")
        _put(proxy.url, table, "b")
        sqs = _client("sqs", proxy.url)
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
        assert not proxy.faults_injected
        proxy.reset_counts()
        assert not proxy.counts
    assert _exists(ministack_url, table, "a")


def test_latency_is_added_to_every_request(ministack_url: str, table: str) -> None:
    with AwsProxy(ministack_url, latency_s=0.2) as proxy:
        _put(proxy.url, table, "warm")  # connection set-up out of the way
        began = time.monotonic()
        for i in range(5):
            _put(proxy.url, table, f"k{i}")
        assert time.monotonic() - began >= 5 * 0.2


def test_long_poll_is_not_cut_short(ministack_url: str, queue_url: str) -> None:
    with AwsProxy(ministack_url) as proxy:
        sqs = _client("sqs", proxy.url, Config(retries={"total_max_attempts": 1}, read_timeout=10))
        began = time.monotonic()
        answer = sqs.receive_message(QueueUrl=queue_url, WaitTimeSeconds=3)
        assert "Messages" not in answer
        assert time.monotonic() - began >= 2.5  # the emulator's wait, not the proxy's


def test_trace_times_each_exchange_in_order_and_marks_the_receives_that_delivered(
    ministack_url: str, queue_url: str
) -> None:
    with AwsProxy(ministack_url, latency_s=0.05) as proxy:
        sqs = _client("sqs", proxy.url)
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


def _only(kind: str, **extra: object) -> FaultPlan:
    return FaultPlan(**{kind: 1.0}, only_actions=frozenset({"PutItem", "sqs:SendMessage"}), **extra)  # type: ignore[arg-type]


def test_throttle_has_each_protocols_error_shape(ministack_url: str, table: str, queue_url: str) -> None:
    with AwsProxy(ministack_url, faults=_only("throttle")) as proxy:
        codes = set()
        for i in range(12):
            with pytest.raises(ClientError) as caught:
                _put(proxy.url, table, f"t{i}")
            assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
            codes.add(caught.value.response["Error"]["Code"])
        assert codes == {"ProvisionedThroughputExceededException", "ThrottlingException"}
        sqs_codes = set()
        for _ in range(12):
            with pytest.raises(ClientError) as caught:
                _client("sqs", proxy.url).send_message(QueueUrl=queue_url, MessageBody="x")
            sqs_codes.add(caught.value.response["Error"]["Code"])
        assert sqs_codes == {"ThrottlingException", "RequestThrottled"}
        # Actions outside only_actions pass untouched.
        assert "Messages" not in _client("sqs", proxy.url).receive_message(QueueUrl=queue_url)
        assert proxy.faults_injected == {"throttle": 24}
    assert not _exists(ministack_url, table, "t0")


def test_throttles_are_retried_by_botocore(ministack_url: str, table: str) -> None:
    # GIVEN half the writes throttled, WHEN the client retries (standard mode), THEN all land.
    plan = FaultPlan(throttle=0.5, only_actions=frozenset({"PutItem"}))
    retrying = Config(retries={"mode": "standard", "max_attempts": 10})
    with AwsProxy(ministack_url, faults=plan, seed=3) as proxy:
        for i in range(10):
            _put(proxy.url, table, f"r{i}", retrying)
        assert proxy.faults_injected["throttle"] > 0
        assert proxy.counts[("dynamodb", "PutItem")] == 10 + proxy.faults_injected["throttle"]
    assert all(_exists(ministack_url, table, f"r{i}") for i in range(10))


def test_http_5xx(ministack_url: str, table: str) -> None:
    with AwsProxy(ministack_url, faults=_only("http_5xx")) as proxy:
        statuses = set()
        for i in range(12):
            with pytest.raises(ClientError) as caught:
                _put(proxy.url, table, f"f{i}")
            statuses.add(caught.value.response["ResponseMetadata"]["HTTPStatusCode"])
        assert statuses == {500, 503}
        assert proxy.faults_injected == {"http_5xx": 12}
    assert not _exists(ministack_url, table, "f0")


def test_slow_answer_times_the_client_out_and_the_write_may_land_late(ministack_url: str, table: str) -> None:
    impatient = Config(retries={"total_max_attempts": 1}, read_timeout=0.5, connect_timeout=2)
    with AwsProxy(ministack_url, faults=_only("slow", slow_s=1.5)) as proxy:
        with pytest.raises(ReadTimeoutError):
            _put(proxy.url, table, "slow", impatient)
        assert proxy.faults_injected == {"slow": 1}
        deadline = time.monotonic() + 5
        while not _exists(ministack_url, table, "slow") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _exists(ministack_url, table, "slow")


def test_reset_before_forwarding_writes_nothing(ministack_url: str, table: str) -> None:
    with AwsProxy(ministack_url, faults=_only("reset_before")) as proxy:
        with pytest.raises(ConnectionClosedError):
            _put(proxy.url, table, "rb")
        assert proxy.faults_injected == {"reset_before": 1}
    assert not _exists(ministack_url, table, "rb")


def test_reset_after_forwarding_loses_the_answer_of_a_write_that_happened(
    ministack_url: str, table: str
) -> None:
    with AwsProxy(ministack_url, faults=_only("reset_after")) as proxy:
        with pytest.raises(ConnectionClosedError):
            _put(proxy.url, table, "ra")
        assert proxy.faults_injected == {"reset_after": 1}
    assert _exists(ministack_url, table, "ra")


def test_same_seed_same_fault_sequence(ministack_url: str, table: str) -> None:
    plan = FaultPlan(throttle=0.3, http_5xx=0.3, only_actions=frozenset({"PutItem"}))
    outcomes = []
    for _ in range(2):
        seen = []
        with AwsProxy(ministack_url, faults=plan, seed=42) as proxy:
            for i in range(15):
                try:
                    _put(proxy.url, table, f"s{i}")
                    seen.append("ok")
                except ClientError as exc:
                    seen.append(str(exc.response["ResponseMetadata"]["HTTPStatusCode"]))
        outcomes.append(seen)
    assert outcomes[0] == outcomes[1]
    assert len(set(outcomes[0])) > 1
