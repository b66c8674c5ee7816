"""The boto3/aioboto3 drivers: what each request costs besides the SDK's own work.

AWS is stubbed (botocore's ``Stubber`` answers at ``before-call``, nothing is sent), so these
tests look at what the drivers and clients do around a request.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiobotocore.stub import AioStubber
from botocore.stub import Stubber

from sqsjobs import App, TransportError
from sqsjobs._aws import Call, one

URL = "https://sqs.us-east-1.amazonaws.com/123456789012/q"


def _app(**settings: Any) -> App:
    return App("drv", endpoint_url="http://127.0.0.1:9", **settings)


def test_the_sync_driver_counts_each_call_by_its_api_name():
    app = _app()
    client = app.clients.boto3.get("sqs")
    with Stubber(client) as stub:
        stub.add_response("get_queue_url", {"QueueUrl": URL}, {"QueueName": "q"})
        stub.add_response("get_queue_url", {"QueueUrl": URL}, {"QueueName": "q"})
        stub.add_client_error("get_queue_url", "AWS.SimpleQueueService.NonExistentQueue")
        for _ in range(2):
            assert app.run(one(Call("sqs", "get_queue_url", {"QueueName": "q"})))["QueueUrl"] == URL
        with pytest.raises(TransportError):  # a refused call was still made: it counts
            app.run(one(Call("sqs", "get_queue_url", {"QueueName": "q"})))
    assert app.requests.snapshot() == {"sqs.GetQueueUrl": 3}
    app.close()


def test_the_async_driver_counts_each_call_and_registers_no_event_hook_per_request():
    app = _app()

    async def main() -> None:
        client = await app.clients.aiobotocore.get("dynamodb")
        # The SDK's own handlers only: the counter is the driver's, not a hook run inside each request.
        hooks = client.meta.events._emitter._handlers.prefix_search("before-call.dynamodb.GetItem")
        assert not [h for h in hooks if "sqsjobs" in getattr(h, "__module__", "")]
        with AioStubber(client) as stub:
            for _ in range(3):
                stub.add_response("get_item", {}, {"TableName": "t", "Key": {"id": {"S": "a"}}})
            for _ in range(3):
                await app.arun(
                    one(Call("dynamodb", "get_item", {"TableName": "t", "Key": {"id": {"S": "a"}}}))
                )
        await app.aclose()

    asyncio.run(main())
    assert app.requests.snapshot() == {"dynamodb.GetItem": 3}
    assert app.requests.total("dynamodb") == 3


def test_measuring_capacity_asks_dynamodb_for_it_and_adds_it_up():
    app = _app(measure_capacity=True)
    client = app.clients.boto3.get("dynamodb")
    sent: list[dict[str, Any]] = []
    client.meta.events.register_last(
        "before-parameter-build.dynamodb.UpdateItem", lambda params, **_: sent.append(dict(params))
    )
    params = {
        "TableName": "t",
        "Key": {"id": {"S": "a"}},
        "UpdateExpression": "SET a = :a",
        "ExpressionAttributeValues": {":a": {"S": "x"}},
    }
    consumed = {"TableName": "t", "CapacityUnits": 1.0, "Table": {"CapacityUnits": 1.0}}
    with Stubber(client) as stub:
        stub.add_response("update_item", {"ConsumedCapacity": consumed})
        app.run(one(Call("dynamodb", "update_item", params)))
    assert sent[0]["ReturnConsumedCapacity"] == "INDEXES"
    assert app.requests.units("write", "table") == 1.0
    assert app.requests.snapshot() == {"dynamodb.UpdateItem": 1}
    app.close()


def test_the_sync_clients_share_one_session_so_botocore_loads_its_data_once():
    app = _app()
    dynamodb, sqs = app.clients.boto3.get("dynamodb"), app.clients.boto3.get("sqs")
    assert dynamodb is app.clients.boto3.get("dynamodb")
    # One session: one loader, whose cache holds the endpoints and models for every client.
    assert dynamodb._loader is sqs._loader
    app.close()


@pytest.mark.parametrize(("concurrency", "pool"), [(1, 64), (10, 64), (48, 64), (100, 116), (500, 516)])
def test_the_connection_pools_fit_the_concurrency(concurrency: int, pool: int):
    # A worker's running jobs each have a request in flight: past the pool's limit, aiohttp would
    # queue them for a connection and urllib3 would open throwaway ones.
    app = _app(concurrency=concurrency)
    assert app.clients.boto3.get("dynamodb").meta.config.max_pool_connections == pool

    async def main() -> int:
        client = await app.clients.aiobotocore.get("sqs")
        await app.aclose()
        return int(client.meta.config.max_pool_connections)

    assert asyncio.run(main()) == pool
    app.close()
