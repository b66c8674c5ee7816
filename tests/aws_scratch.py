"""A scratch table and queue on the suite's emulator, and boto3 clients without retries.

What the proxy tests share: the bench's counting proxy (tests/bench/test_proxy.py) and the soak's
fault proxy (tests/soak/test_fault_proxy.py) are both seen by a plain boto3 client.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import boto3
import pytest
from botocore.config import Config

NO_RETRIES = Config(retries={"total_max_attempts": 1}, read_timeout=5, connect_timeout=2)


def client(service: str, url: str, config: Config = NO_RETRIES):  # type: ignore[no-untyped-def]
    return boto3.client(service, endpoint_url=url, region_name="us-east-1", config=config)


@pytest.fixture
def table(ministack_url: str) -> Iterator[str]:
    name = f"proxy{uuid.uuid4().hex[:8]}"
    ddb = client("dynamodb", ministack_url)
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
    sqs = client("sqs", ministack_url)
    url = sqs.create_queue(QueueName=f"proxy{uuid.uuid4().hex[:8]}")["QueueUrl"]
    yield url
    sqs.delete_queue(QueueUrl=url)


def exists(ministack_url: str, table: str, key: str) -> bool:
    item = client("dynamodb", ministack_url).get_item(
        TableName=table, Key={"pk": {"S": key}}, ConsistentRead=True
    )
    return "Item" in item


def put(url: str, table: str, key: str, config: Config = NO_RETRIES) -> None:
    client("dynamodb", url, config).put_item(TableName=table, Item={"pk": {"S": key}})
