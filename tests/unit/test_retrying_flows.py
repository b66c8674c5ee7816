"""Retries inside sans-I/O flows: tenacity decides attempts and waits, the driver does the waiting.

Each flow is driven by hand here: AWS answers come from a script, and a wait shows up as a
``clock`` call that the test records instead of sleeping.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
import tenacity

from sqsjobs import App, SqsJobsError, StoreError
from sqsjobs._aws import Call, Flow, retrying, run_sync
from sqsjobs.chains.namespace import read_items
from sqsjobs.config import Settings
from sqsjobs.deploy.provision import provision_flow
from sqsjobs.errors import RecordChanged
from sqsjobs.limits import records as limit_records
from sqsjobs.ops.inspect import batch_get_flow
from sqsjobs.ops.requeue import CONFLICT_RETRIES, requeue_flow
from sqsjobs.registry import Registry
from sqsjobs.store import batched, enqueue
from sqsjobs.store.batched import UNPROCESSED_RETRIES

NOW = 1_800_000_000.0


class Stop(Exception):
    """Ends a hand-driven flow early, once the part under test is over."""


def drive(flow: Flow[Any], answer: Callable[[Call], Any], calls: list[Call]) -> Any:
    """Run ``flow``, answering each AWS call with ``answer(call)`` (which may raise into the flow)."""
    try:
        call = next(flow)
        while True:
            calls.append(call)
            if call.service == "clock":
                call = flow.send(None)
                continue
            try:
                response = answer(call)
            except SqsJobsError as exc:
                call = flow.throw(exc)
            else:
                call = flow.send(response)
    except StopIteration as stop:
        return stop.value


def sleeps(calls: list[Call]) -> list[float]:
    return [c.params["seconds"] for c in calls if c.service == "clock"]


@pytest.fixture(autouse=True)
def flows_never_block(monkeypatch: pytest.MonkeyPatch) -> None:
    """A flow that slept itself would stall the asyncio worker: waits must be yielded instead."""

    def refuse(seconds: float) -> None:
        raise AssertionError(f"a flow slept {seconds} s itself")

    monkeypatch.setattr(time, "sleep", refuse)


# ── BatchGetItem's unprocessed keys ─────────────────────────────────────────────────────────────
def item(job_id: str) -> dict[str, Any]:
    return {"id": {"S": job_id}}


def unprocessed(*job_ids: str) -> dict[str, Any]:
    return {"t": {"Keys": [item(i) for i in job_ids], "ProjectionExpression": "#a0"}}


def test_unprocessed_keys_are_asked_for_again_after_a_doubling_wait():
    # GIVEN DynamoDB leaves some keys unprocessed twice (throttling), then answers the rest
    answers = iter(
        [
            {"Responses": {"t": [item("a")]}, "UnprocessedKeys": unprocessed("b", "c")},
            {"Responses": {"t": [item("b")]}, "UnprocessedKeys": unprocessed("c")},
            {"Responses": {"t": [item("c")]}, "UnprocessedKeys": {}},
        ]
    )
    calls: list[Call] = []

    # WHEN the flow reads a, b and c
    found = drive(batch_get_flow("t", ["a", "b", "c"]), lambda call: next(answers), calls)

    # THEN it gets all three, asking each time only for what was left, after 0.05 s, then 0.1 s
    assert set(found) == {"a", "b", "c"}
    asked = [c.params["RequestItems"]["t"]["Keys"] for c in calls if c.service == "dynamodb"]
    assert asked == [[item("a"), item("b"), item("c")], [item("b"), item("c")], [item("c")]]
    assert sleeps(calls) == [0.05, 0.1]


def test_keys_that_stay_unprocessed_end_in_a_store_error():
    # GIVEN DynamoDB never processes key b
    calls: list[Call] = []

    def answer(call: Call) -> dict[str, Any]:
        return {"Responses": {"t": []}, "UnprocessedKeys": unprocessed("b")}

    # WHEN the flow reads it, THEN it gives up after UNPROCESSED_RETRIES retries with a StoreError
    with pytest.raises(StoreError, match="left 1 keys or items unprocessed"):
        drive(batch_get_flow("t", ["b"]), answer, calls)
    assert len([c for c in calls if c.service == "dynamodb"]) == UNPROCESSED_RETRIES + 1
    assert sleeps(calls) == [0.05, 0.1, 0.2, 0.4, 0.8]


@pytest.mark.parametrize(
    "reader",
    [
        pytest.param(lambda: limit_records.batch_get("t", ["a", "b"]), id="a limit's slots and pauses"),
        pytest.param(lambda: read_items("t", ["a", "b"]), id="a chain's steps"),
        pytest.param(
            lambda: batched.get_items("t", [item("a"), item("b")], consistent=True), id="a batch's shards"
        ),
    ],
)
def test_every_batch_reader_asks_again_for_what_was_left_unprocessed(reader):
    # GIVEN DynamoDB answers a, and leaves b unprocessed once
    answers = iter(
        [
            {"Responses": {"t": [item("a")]}, "UnprocessedKeys": unprocessed("b")},
            {"Responses": {"t": [item("b")]}},
        ]
    )
    calls: list[Call] = []

    # WHEN the feature reads both
    found = drive(reader(), lambda call: next(answers), calls)

    # THEN b is read too: never taken as absent (a limit's slot read as free), nor asked for without pause
    ids = set(found) if isinstance(found, dict) else {i["id"]["S"] for i in found}
    assert ids == {"a", "b"}
    assert sleeps(calls) == [0.05]


def test_items_a_batch_write_left_unprocessed_are_sent_again_then_given_up_on():
    # GIVEN 30 items to put (two requests) and a DynamoDB that leaves one of the first 25 unprocessed forever
    items = [item(f"i{n}") for n in range(30)]
    calls: list[Call] = []

    def answer(call: Call) -> dict[str, Any]:
        first = call.params["RequestItems"]["t"][0]["PutRequest"]["Item"]
        return {"UnprocessedItems": {"t": [{"PutRequest": {"Item": first}}]} if first == item("i0") else {}}

    # WHEN the flow puts them, THEN it sends the rest 25 at a time, i0 again after each wait, then gives up
    with pytest.raises(StoreError, match="left 1 keys or items unprocessed"):
        drive(batched.put_items("t", items), answer, calls)
    sent = [len(c.params["RequestItems"]["t"]) for c in calls if c.service == "dynamodb"]
    assert sent == [25] + [1] * UNPROCESSED_RETRIES
    assert sleeps(calls) == [0.05, 0.1, 0.2, 0.4, 0.8]


def test_an_aws_error_during_a_batch_get_is_not_retried():
    # GIVEN BatchGetItem fails outright (not a partial answer)
    calls: list[Call] = []

    def answer(call: Call) -> dict[str, Any]:
        raise StoreError("throttled", code="ProvisionedThroughputExceededException")

    # WHEN the flow reads, THEN the error reaches the caller at once (botocore already retried it)
    with pytest.raises(StoreError, match="throttled"):
        drive(batch_get_flow("t", ["a"]), answer, calls)
    assert len(calls) == 1


# ── the table becoming ACTIVE ───────────────────────────────────────────────────────────────────
def test_provisioning_waits_a_second_at_a_time_for_the_table_to_become_active():
    # GIVEN a new table that reports CREATING twice before it is ACTIVE
    statuses = iter(["CREATING", "CREATING", "ACTIVE"])
    calls: list[Call] = []

    def answer(call: Call) -> dict[str, Any]:
        if call.operation == "describe_table":
            return {"Table": {"TableStatus": next(statuses)}}
        if call.operation == "update_time_to_live":
            raise Stop  # past the wait: the rest is not under test
        return {}

    # WHEN provisioning runs
    with pytest.raises(Stop):
        drive(provision_flow(Settings.from_env("shop", env={}), Registry()), answer, calls)

    # THEN it described the table three times, one second apart, before going on
    assert [c.operation for c in calls] == [
        "create_table",
        "describe_table",
        "sleep",
        "describe_table",
        "sleep",
        "describe_table",
        "update_time_to_live",
    ]
    assert sleeps(calls) == [1.0, 1.0]


# ── requeue conflicts ───────────────────────────────────────────────────────────────────────────
@pytest.fixture
def app() -> App:
    app = App("shop", endpoint_url="http://127.0.0.1:9")

    @app.job("t")
    def handle(payload: dict[str, Any], ctx: Any) -> None:
        return None

    return app


def dead_item(updated_at: float) -> dict[str, Any]:
    new = enqueue.NewJob(
        id="j1",
        type="t",
        queue="default",
        payload={"a": 1},
        payload_version=1,
        max_attempts=3,
        run_at=NOW,
        now=NOW,
    )
    item = enqueue.put_job("shop-jobs", new).item
    # a dead record keeps its payload (sqsjobs.store.runs.fail)
    return {
        **item,
        "status": {"S": "dead"},
        "updated_at": {"N": str(updated_at)},
        "payload": {"S": '{"a":1}'},
    }


def test_a_requeue_that_keeps_losing_to_concurrent_writes_gives_up_with_a_store_error(app):
    # GIVEN a dead job whose record changes between every read and write (and stays dead)
    calls: list[Call] = []
    writes = iter(range(100))

    def answer(call: Call) -> dict[str, Any]:
        if call.operation == "get_item":
            return {"Item": dead_item(NOW + next(writes))}
        raise StoreError(
            "refused", code="ConditionalCheckFailedException", response={"Item": dead_item(NOW + 99)}
        )

    # WHEN it is requeued, THEN it reads and writes CONFLICT_RETRIES times, without waiting, and
    # says why it gave up
    with pytest.raises(RecordChanged, match="kept changing while it was being requeued"):
        drive(
            requeue_flow(
                "j1",
                settings=app.settings,
                registry=app.registry,
                queue_urls=app.queue_urls,
                action="retry",
                now=NOW,
            ),
            answer,
            calls,
        )
    assert [c.operation for c in calls] == ["get_item", "update_item"] * CONFLICT_RETRIES


def test_a_requeue_that_loses_once_reads_again_and_succeeds(app):
    # GIVEN a dead job that a concurrent write changes once, between our first read and write
    calls: list[Call] = []
    refused = []

    def answer(call: Call) -> dict[str, Any]:
        if call.operation == "get_item":
            return {"Item": dead_item(NOW + len(refused))}
        if call.operation == "update_item" and not refused:
            refused.append(call)
            raise StoreError(
                "refused", code="ConditionalCheckFailedException", response={"Item": dead_item(NOW + 1)}
            )
        if call.operation == "update_item":
            return {"Attributes": {**dead_item(NOW + 2), "status": {"S": "queued"}}}
        if call.operation == "get_queue_url":
            return {"QueueUrl": "http://127.0.0.1:9/000000000000/shop-default"}
        return {}

    # WHEN it is requeued
    result = drive(
        requeue_flow(
            "j1",
            settings=app.settings,
            registry=app.registry,
            queue_urls=app.queue_urls,
            action="retry",
            now=NOW,
        ),
        answer,
        calls,
    )

    # THEN the second read-and-write goes through and the hint is sent
    assert result.outcome == "requeued" and result.hint_sent
    operations = [c.operation for c in calls]
    assert operations[:4] == ["get_item", "update_item", "get_item", "update_item"]
    assert operations[-1] == "send_message"


# ── the helper itself ───────────────────────────────────────────────────────────────────────────
def test_the_sync_driver_does_the_waiting_a_policy_asks_for(monkeypatch):
    # GIVEN a flow that fails twice, under a policy that waits 0.01 s between attempts
    waited: list[float] = []
    monkeypatch.setattr(time, "sleep", waited.append)
    attempts = []

    def attempt() -> Flow[str]:
        attempts.append(1)
        yield from ()
        if len(attempts) < 3:
            raise StoreError("not yet")
        return "done"

    policy = tenacity.Retrying(
        stop=tenacity.stop_after_attempt(5),
        wait=tenacity.wait_fixed(0.01),
        retry=tenacity.retry_if_exception_type(StoreError),
    )

    # WHEN run_sync drives it, THEN the third attempt's result comes back after two driver sleeps
    assert run_sync(retrying(attempt, policy), clients=None) == "done"  # type: ignore[arg-type]
    assert waited == [0.01, 0.01]
