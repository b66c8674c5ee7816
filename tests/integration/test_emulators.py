"""Specifications of the two emulator harnesses the suite stands on.

- ``sqsjobs.local.emulator.EmbeddedMoto``: moto's server with every request serialised,
  so that concurrent conditional claims have exactly one winner (stock moto lets
  several win), while a long-poll receive does not hold the lock as it waits.
- ``tests.emulators.MiniStack``: a private MiniStack process that starts healthy,
  resets cleanly and leaves no process behind.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from typer.testing import CliRunner

from sqsjobs.cli.main import cli
from sqsjobs.errors import ConfigurationError
from sqsjobs.local.emulator import EmbeddedMoto
from tests.emulators import MiniStack

# Enough connections for the 8 claimers plus a waiter; no retries, so a failure shows as one.
CLIENT_CONFIG = Config(max_pool_connections=16, retries={"mode": "standard", "max_attempts": 1})


@pytest.fixture(autouse=True)
def fake_aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    for name in list(os.environ):
        if name.startswith("AWS_ENDPOINT_URL") or name in ("AWS_PROFILE", "AWS_SESSION_TOKEN"):
            monkeypatch.delenv(name)


@pytest.fixture(scope="module")
def moto_url() -> Iterator[str]:
    with EmbeddedMoto() as server:
        yield server.endpoint_url


@pytest.fixture(scope="module")
def ministack() -> Iterator[MiniStack]:
    server = MiniStack()
    server.start()
    try:
        yield server
    finally:
        server.stop()


def client(service: str, endpoint_url: str) -> Any:
    return boto3.session.Session().client(service, endpoint_url=endpoint_url, config=CLIENT_CONFIG)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def create_table(ddb: Any) -> str:
    name = unique("claims")
    ddb.create_table(
        TableName=name,
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        BillingMode="PAY_PER_REQUEST",
    )
    return name


# --- EmbeddedMoto -------------------------------------------------------------------------------


def test_concurrent_conditional_claims_have_exactly_one_winner(moto_url: str) -> None:
    # moto's check-then-write is a few bytecodes wide; with the default 5 ms GIL switch
    # interval, stock moto in-process shows a double claim in only some runs. Switching
    # threads every 0.1 ms widens the window: stock moto then failed this test 5 runs out of 5.
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-4)
    try:
        _claim_race(moto_url)
    finally:
        sys.setswitchinterval(previous)


def _claim_race(moto_url: str) -> None:
    workers, items = 8, 60
    table = create_table(client("dynamodb", moto_url))
    keys = [f"job-{i}" for i in range(items)]
    start = threading.Barrier(workers)

    def claim_all(worker: int) -> list[str]:
        ddb = client("dynamodb", moto_url)
        me = f"worker-{worker}"
        won = []
        start.wait()
        for key in keys:
            try:
                ddb.update_item(
                    TableName=table,
                    Key={"pk": {"S": key}},
                    UpdateExpression="SET #o = :me",
                    ConditionExpression="attribute_not_exists(#o)",
                    ExpressionAttributeNames={"#o": "owner"},
                    ExpressionAttributeValues={":me": {"S": me}},
                )
            except ClientError as exc:
                assert exc.response["Error"]["Code"] == "ConditionalCheckFailedException"
            else:
                won.append(key)
        return won

    with ThreadPoolExecutor(workers) as pool:
        wins = list(pool.map(claim_all, range(workers)))

    winners: dict[str, list[int]] = {key: [] for key in keys}
    for worker, won in enumerate(wins):
        for key in won:
            winners[key].append(worker)
    double = {key: who for key, who in winners.items() if len(who) != 1}
    assert double == {}, f"items without exactly one owner: {double}"

    ddb = client("dynamodb", moto_url)
    for key in keys:
        owner = ddb.get_item(TableName=table, Key={"pk": {"S": key}}, ConsistentRead=True)["Item"]["owner"]
        assert owner == {"S": f"worker-{winners[key][0]}"}


def test_long_poll_wakes_on_send_without_holding_the_lock(moto_url: str) -> None:
    sqs = client("sqs", moto_url)
    queue_url = sqs.create_queue(QueueName=unique("longpoll"))["QueueUrl"]
    table = create_table(client("dynamodb", moto_url))
    received: dict[str, Any] = {}
    receiving = threading.Event()

    def long_poll() -> None:
        consumer = client("sqs", moto_url)
        receiving.set()
        started = time.monotonic()
        answer = consumer.receive_message(QueueUrl=queue_url, WaitTimeSeconds=20, MaxNumberOfMessages=1)
        received["at"] = time.monotonic()
        received["elapsed"] = received["at"] - started
        received["messages"] = answer.get("Messages", [])

    waiter = threading.Thread(target=long_poll)
    waiter.start()
    receiving.wait()
    time.sleep(0.3)  # let the receive reach the server and start waiting

    # Another client's writes go through while the receive waits (a held lock would
    # block them until the 20 s wait ran out, after the receive returned).
    ddb = client("dynamodb", moto_url)
    for i in range(5):
        ddb.put_item(TableName=table, Item={"pk": {"S": f"during-wait-{i}"}})
        time.sleep(0.05)
    put_done = time.monotonic()
    assert "at" not in received, "the receive returned before anything was sent"

    sqs.send_message(QueueUrl=queue_url, MessageBody="wake up")
    waiter.join(timeout=30)
    assert not waiter.is_alive()

    assert [m["Body"] for m in received["messages"]] == ["wake up"]
    assert put_done < received["at"]
    # ~0.6 s on a quiet machine; 4.7 s once under the whole suite's load, hence a 20 s wait: a
    # waiter that did not wake on the send would return at 20 s, not before 15
    assert received["elapsed"] < 15, "the waiter should wake on the send, well within its 20 s wait"


def test_empty_long_poll_returns_no_messages(moto_url: str) -> None:
    sqs = client("sqs", moto_url)
    queue_url = sqs.create_queue(QueueName=unique("empty"))["QueueUrl"]

    started = time.monotonic()
    answer = sqs.receive_message(QueueUrl=queue_url, WaitTimeSeconds=1)

    assert answer.get("Messages", []) == []
    assert time.monotonic() - started >= 0.9, "an empty long poll waits out its wait"


def test_out_of_range_wait_is_still_rejected_by_moto(moto_url: str) -> None:
    sqs = client("sqs", moto_url)
    queue_url = sqs.create_queue(QueueName=unique("badwait"))["QueueUrl"]

    with pytest.raises(ClientError) as caught:
        sqs.receive_message(QueueUrl=queue_url, WaitTimeSeconds=21)

    assert caught.value.response["Error"]["Code"] == "InvalidParameterValue"


def test_import_does_not_need_a_running_server() -> None:
    server = EmbeddedMoto()
    with pytest.raises(RuntimeError, match="not started"):
        _ = server.endpoint_url
    server.stop()  # stopping a server that never started is a no-op


def test_without_moto_the_emulator_names_the_extra_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN sqsjobs installed without the local extra (moto's server cannot be imported)
    monkeypatch.setitem(sys.modules, "moto.moto_server.werkzeug_app", None)

    # WHEN the embedded emulator starts, THEN a ConfigurationError says what to install
    with pytest.raises(ConfigurationError, match=r"pip install 'sqsjobs\[local\]'"):
        EmbeddedMoto().start()

    # AND `sqsjobs dev` prints that as one error line instead of a traceback
    result = CliRunner().invoke(cli, ["dev", "--app", "tests.apps.sleepy:app"])
    assert result.exit_code == 1, result.output
    assert "pip install 'sqsjobs[local]'" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


# --- MiniStack ----------------------------------------------------------------------------------


def test_ministack_lifecycle(ministack: MiniStack) -> None:
    # One test for the whole lifecycle: it ends by stopping the module's server.
    with urllib.request.urlopen(f"{ministack.endpoint_url}/_ministack/health", timeout=5) as answer:
        assert answer.status == 200
    assert ministack.endpoint_url.startswith("http://127.0.0.1:")
    pgid = os.getpgid(ministack.pid)
    assert pgid == ministack.pid, "MiniStack must lead its own process group"

    sqs = client("sqs", ministack.endpoint_url)
    name = unique("ms")
    queue_url = sqs.create_queue(QueueName=name)["QueueUrl"]
    sqs.send_message(QueueUrl=queue_url, MessageBody="hello")
    messages = sqs.receive_message(QueueUrl=queue_url, WaitTimeSeconds=2).get("Messages", [])
    assert [m["Body"] for m in messages] == ["hello"]

    ministack.reset()

    with pytest.raises(ClientError) as caught:
        sqs.get_queue_url(QueueName=name)
    assert "NonExistentQueue" in caught.value.response["Error"]["Code"]

    ministack.stop()

    with pytest.raises(ProcessLookupError):
        os.killpg(pgid, 0)
    ministack.stop()  # idempotent


def test_missing_ministack_binary_is_an_error_with_the_fix(tmp_path: Any) -> None:
    with pytest.raises(RuntimeError, match=r"make \.venv-ministack/bin/ministack"):
        MiniStack(binary=str(tmp_path / "no-such-ministack"))
