"""The soak's fault proxy (tests/soak/faults.py), seen by boto3 with retries off.

Each fault kind must reach the client exactly as a real AWS failure does, and the two reset kinds
must differ in the one thing that matters: whether the write happened.
"""

from __future__ import annotations

import time

import pytest
from botocore.config import Config
from botocore.exceptions import ClientError, ConnectionClosedError, ReadTimeoutError

from tests.aws_scratch import client, exists, put
from tests.soak.faults import FaultPlan, FaultProxy


def test_without_a_plan_nothing_is_injected(ministack_url: str, table: str) -> None:
    with FaultProxy(ministack_url) as proxy:
        put(proxy.url, table, "a")
        assert proxy.counts == {("dynamodb", "PutItem"): 1}
        assert not proxy.faults_injected
    assert exists(ministack_url, table, "a")


def _only(kind: str, **extra: object) -> FaultPlan:
    return FaultPlan(**{kind: 1.0}, only_actions=frozenset({"PutItem", "sqs:SendMessage"}), **extra)  # type: ignore[arg-type]


def test_throttle_has_each_protocols_error_shape(ministack_url: str, table: str, queue_url: str) -> None:
    with FaultProxy(ministack_url, faults=_only("throttle")) as proxy:
        codes = set()
        for i in range(12):
            with pytest.raises(ClientError) as caught:
                put(proxy.url, table, f"t{i}")
            assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
            codes.add(caught.value.response["Error"]["Code"])
        assert codes == {"ProvisionedThroughputExceededException", "ThrottlingException"}
        sqs_codes = set()
        for _ in range(12):
            with pytest.raises(ClientError) as caught:
                client("sqs", proxy.url).send_message(QueueUrl=queue_url, MessageBody="x")
            sqs_codes.add(caught.value.response["Error"]["Code"])
        assert sqs_codes == {"ThrottlingException", "RequestThrottled"}
        # Actions outside only_actions pass untouched.
        assert "Messages" not in client("sqs", proxy.url).receive_message(QueueUrl=queue_url)
        assert proxy.faults_injected == {"throttle": 24}
    assert not exists(ministack_url, table, "t0")


def test_throttles_are_retried_by_botocore(ministack_url: str, table: str) -> None:
    # GIVEN half the writes throttled, WHEN the client retries (standard mode), THEN all land.
    plan = FaultPlan(throttle=0.5, only_actions=frozenset({"PutItem"}))
    retrying = Config(retries={"mode": "standard", "max_attempts": 10})
    with FaultProxy(ministack_url, faults=plan, seed=3) as proxy:
        for i in range(10):
            put(proxy.url, table, f"r{i}", retrying)
        assert proxy.faults_injected["throttle"] > 0
        assert proxy.counts[("dynamodb", "PutItem")] == 10 + proxy.faults_injected["throttle"]
    assert all(exists(ministack_url, table, f"r{i}") for i in range(10))


def test_http_5xx(ministack_url: str, table: str) -> None:
    with FaultProxy(ministack_url, faults=_only("http_5xx")) as proxy:
        statuses = set()
        for i in range(12):
            with pytest.raises(ClientError) as caught:
                put(proxy.url, table, f"f{i}")
            statuses.add(caught.value.response["ResponseMetadata"]["HTTPStatusCode"])
        assert statuses == {500, 503}
        assert proxy.faults_injected == {"http_5xx": 12}
    assert not exists(ministack_url, table, "f0")


def test_slow_answer_times_the_client_out_and_the_write_may_land_late(ministack_url: str, table: str) -> None:
    impatient = Config(retries={"total_max_attempts": 1}, read_timeout=0.5, connect_timeout=2)
    with FaultProxy(ministack_url, faults=_only("slow", slow_s=1.5)) as proxy:
        with pytest.raises(ReadTimeoutError):
            put(proxy.url, table, "slow", impatient)
        assert proxy.faults_injected == {"slow": 1}
        deadline = time.monotonic() + 5
        while not exists(ministack_url, table, "slow") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert exists(ministack_url, table, "slow")


def test_reset_before_forwarding_writes_nothing(ministack_url: str, table: str) -> None:
    with FaultProxy(ministack_url, faults=_only("reset_before")) as proxy:
        with pytest.raises(ConnectionClosedError):
            put(proxy.url, table, "rb")
        assert proxy.faults_injected == {"reset_before": 1}
    assert not exists(ministack_url, table, "rb")


def test_reset_after_forwarding_loses_the_answer_of_a_write_that_happened(
    ministack_url: str, table: str
) -> None:
    with FaultProxy(ministack_url, faults=_only("reset_after")) as proxy:
        with pytest.raises(ConnectionClosedError):
            put(proxy.url, table, "ra")
        assert proxy.faults_injected == {"reset_after": 1}
    assert exists(ministack_url, table, "ra")


def test_same_seed_same_fault_sequence(ministack_url: str, table: str) -> None:
    plan = FaultPlan(throttle=0.3, http_5xx=0.3, only_actions=frozenset({"PutItem"}))
    outcomes = []
    for _ in range(2):
        seen = []
        with FaultProxy(ministack_url, faults=plan, seed=42) as proxy:
            for i in range(15):
                try:
                    put(proxy.url, table, f"s{i}")
                    seen.append("ok")
                except ClientError as exc:
                    seen.append(str(exc.response["ResponseMetadata"]["HTTPStatusCode"]))
        outcomes.append(seen)
    assert outcomes[0] == outcomes[1]
    assert len(set(outcomes[0])) > 1
