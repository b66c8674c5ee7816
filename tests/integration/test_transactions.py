"""Transactional enqueue (``app.transaction()``): the caller's writes and its jobs, all or nothing.

Evidence comes from outside the code under test: the user's table and the job table read over HTTP,
the queue's depth, a real worker process and the run log its handler appends to
(tests/apps/guarantees.py), a producer process killed with SIGKILL between its commit and its send.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import time

import pytest

from sqsjobs import (
    IdempotencyConflict,
    JobNotFound,
    JobStatus,
    TransactionCancelled,
    TransactionInvalid,
)
from sqsjobs._aws import Call, one
from sqsjobs.runtime.sweeper import sweep_flow
from sqsjobs.testing import all_finished, work_until
from tests.apps import guarantees, large
from tests.integration.helpers import depth, job_write_units, worker_env
from tests.integration.test_guarantees import APP, kill, runs, start_worker, wait_until

pytestmark = pytest.mark.slow


def _ddb(app, operation: str, **params):
    return app.run(one(Call("dynamodb", operation, params)))


def _orders_table(app) -> str:
    """The application's own table, beside the job table."""
    table = f"{app.name}-orders"
    _ddb(
        app,
        "create_table",
        TableName=table,
        BillingMode="PAY_PER_REQUEST",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
    )
    return table


def _order(app, table: str, pk: str) -> dict | None:
    return _ddb(app, "get_item", TableName=table, Key={"pk": {"S": pk}}, ConsistentRead=True).get("Item")


def _record(app, job_id: str) -> dict | None:
    """The job's raw item: what the sweeper's index sees (``attn``/``due``) and whether it keeps the payload."""
    return _ddb(
        app, "get_item", TableName=app.settings.table_name, Key={"id": {"S": job_id}}, ConsistentRead=True
    ).get("Item")


def _new_order(table: str, pk: str, total: int = 10) -> dict:
    return {
        "TableName": table,
        "Item": {"pk": {"S": pk}, "total": {"N": str(total)}},
        "ConditionExpression": "attribute_not_exists(pk)",
    }


def _app(make_app, url, **settings):
    app = make_app(url, lease_s=3.0, visibility_timeout_s=2, **settings)
    app.registry.include(guarantees.app.registry)  # the handlers the worker processes load
    app.provision()
    return app


@pytest.fixture
def app(ministack_url, make_app):
    return _app(make_app, ministack_url)


@pytest.fixture
def any_backend_app(backend_url, make_app):
    """MiniStack and the serialised embedded moto of ``sqsjobs dev``."""
    return _app(make_app, backend_url)


def test_a_committed_transaction_writes_both_and_a_worker_process_runs_the_job_once(app, tmp_path):
    orders = _orders_table(app)

    # WHEN an order and its job are written in one transaction
    with app.transaction() as tx:
        tx.put(**_new_order(orders, "o1"))
        job_id = tx.enqueue("count", {"runs_dir": str(tmp_path), "sleep_s": 0})

    # THEN both are there, the hint is in the queue, and the record is a plain enqueue's again: the
    # message carries the payload, and no attention entry is left for the sweeper to act on
    assert tx.committed and tx.job_ids == [job_id]
    assert _order(app, orders, "o1")["total"] == {"N": "10"}
    record = _record(app, job_id)
    assert record["status"] == {"S": "queued"}
    assert {"payload", "attn", "due"}.isdisjoint(record)
    assert depth(app)["visible"] == 1

    # AND a real worker process runs it, once
    proc = start_worker(app)
    try:
        wait_until(lambda: app.get(job_id).status is JobStatus.SUCCEEDED, 60, "job succeeded")
    finally:
        kill(proc)
    assert len(runs(tmp_path, job_id)) == 1
    # AND no sweep, however late, sends it again
    much_later = time.time() + 10 * app.settings.stale_after_s
    assert app.run(sweep_flow(app.settings, app.queue_urls, much_later)).total == 0


def test_the_async_transaction_commits_through_the_same_flow(app):
    orders = _orders_table(app)

    async def main() -> str:
        async with app.atransaction() as tx:
            tx.put(**_new_order(orders, "o1"))
            job_id = tx.enqueue("count", {"runs_dir": "/nowhere"})
        await app.aclose()
        return job_id

    job_id = asyncio.run(main())
    assert _order(app, orders, "o1") is not None
    assert app.get(job_id).status is JobStatus.QUEUED
    assert depth(app)["visible"] == 1


def test_a_false_condition_in_the_users_writes_leaves_no_job_and_no_message(any_backend_app):
    app = any_backend_app
    orders = _orders_table(app)
    _ddb(app, "put_item", TableName=orders, Item=_new_order(orders, "o1", total=5)["Item"])

    # WHEN a transaction's put of an existing order fails its condition
    with pytest.raises(TransactionCancelled) as cancelled, app.transaction() as tx:
        tx.update(
            TableName=orders,
            Key={"pk": {"S": "o0"}},
            UpdateExpression="SET seen = :t",
            ExpressionAttributeValues={":t": {"BOOL": True}},
        )
        tx.put(**_new_order(orders, "o1"), ReturnValuesOnConditionCheckFailure="ALL_OLD")
        job_id = tx.enqueue("count", {"runs_dir": "/nowhere"})

    # THEN the error names the failing item (the second one, a put on the orders table) and shows it
    failed = cancelled.value.failed
    assert [(r.index, r.operation, r.table, r.code) for r in failed] == [
        (1, "Put", orders, "ConditionalCheckFailed")
    ]
    assert failed[0].item["total"] == {"N": "5"}
    assert [r.code for r in cancelled.value.reasons] == ["None", "ConditionalCheckFailed", "None"]
    assert cancelled.value.reasons[2].job_id == job_id
    # AND nothing of it was written: no job, no message, the order untouched, the other update not applied
    with pytest.raises(JobNotFound):
        app.get(job_id)
    assert sum(depth(app).values()) == 0
    assert _order(app, orders, "o1")["total"] == {"N": "5"}
    assert _order(app, orders, "o0") is None


def test_a_producer_killed_between_commit_and_send_loses_nothing(app, tmp_path):
    orders = _orders_table(app)
    # GIVEN a producer process that commits, then dies (SIGKILL) as it is about to send the hint
    producer = textwrap.dedent(
        """
        import os, signal, sys
        from tests.apps.guarantees import app

        def die(**kwargs):
            os.kill(os.getpid(), signal.SIGKILL)

        sqs = app.clients.boto3.get("sqs")
        for operation in ("SendMessageBatch", "SendMessage"):
            sqs.meta.events.register(f"before-call.sqs.{operation}", die)
        with app.transaction() as tx:
            tx.put(TableName=sys.argv[1], Item={"pk": {"S": "o1"}}, ConditionExpression="attribute_not_exists(pk)")
            print(tx.enqueue("count", {"runs_dir": sys.argv[2], "sleep_s": 0}), flush=True)
        print("survived", flush=True)
        """
    )
    env = worker_env(app, SQSJOBS_STALE_AFTER_S="1")
    done = subprocess.run(
        [sys.executable, "-c", producer, orders, str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == -9, done.stderr
    job_id = done.stdout.split()[0]
    assert "survived" not in done.stdout

    # THEN the commit stands and no hint was sent: the record keeps the payload for the sweeper
    assert _order(app, orders, "o1") is not None
    record = _record(app, job_id)
    assert record["status"] == {"S": "queued"} and "payload" in record
    assert record["attn"]["S"].startswith("pending#")
    assert sum(depth(app).values()) == 0

    # WHEN the entry is due (stale_after_s after run_at) and a sweeper process runs once, then a worker
    wait_until(lambda: time.time() > float(record["due"]["N"]), 10, "the pending entry is due")
    swept = subprocess.run(
        [sys.executable, "-m", "sqsjobs", "sweep", "--once", "--app", APP],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert swept.returncode == 0, swept.stderr
    assert "re-dispatched 1 pending" in swept.stdout
    proc = start_worker(app)
    try:
        wait_until(lambda: app.get(job_id).status is JobStatus.SUCCEEDED, 60, "job succeeded")
    finally:
        kill(proc)

    # THEN the job ran exactly once, and the user's write is there
    assert len(runs(tmp_path, job_id)) == 1
    assert _order(app, orders, "o1") is not None


def test_an_exception_inside_the_block_writes_and_sends_nothing(app):
    orders = _orders_table(app)
    app.requests.reset()

    with pytest.raises(RuntimeError, match="changed my mind"), app.transaction() as tx:
        tx.put(**_new_order(orders, "o1"))
        job_id = tx.enqueue("count", {"runs_dir": "/nowhere"})
        raise RuntimeError("changed my mind")

    assert app.requests.counts[("dynamodb", "TransactWriteItems")] == 0
    assert _order(app, orders, "o1") is None
    with pytest.raises(JobNotFound):
        app.get(job_id)
    assert sum(depth(app).values()) == 0
    with pytest.raises(TransactionInvalid, match="already committed or discarded"):
        tx.put(**_new_order(orders, "o2"))


def test_the_101st_item_is_refused_at_the_add_and_nothing_is_written(app):
    orders = _orders_table(app)

    with pytest.raises(TransactionInvalid, match="at most 100 items"), app.transaction() as tx:
        for n in range(99):
            tx.put(**_new_order(orders, f"o{n}"))
        tx.enqueue("count", {"runs_dir": "/nowhere"})  # the 100th item: jobs count too
        tx.put(**_new_order(orders, "o-too-many"))

    assert _ddb(app, "scan", TableName=orders, Select="COUNT")["Count"] == 0
    assert _ddb(app, "scan", TableName=app.settings.table_name, Select="COUNT")["Count"] == 0
    assert sum(depth(app).values()) == 0


def test_two_puts_of_one_key_are_refused_by_dynamodb_as_an_invalid_transaction(app):
    # Two puts name no key (only the table's schema says which attributes are), so DynamoDB decides.
    orders = _orders_table(app)
    with (
        pytest.raises(TransactionInvalid, match="two of its operations target one item"),
        app.transaction() as tx,
    ):
        tx.put(**_new_order(orders, "o1"))
        tx.put(**_new_order(orders, "o1", total=20))
    assert _order(app, orders, "o1") is None


def test_a_repeated_idempotency_key_cancels_the_transaction_and_says_why(app):
    orders = _orders_table(app)
    with app.transaction() as tx:
        tx.put(**_new_order(orders, "o1"))
        first = tx.enqueue("count", {"runs_dir": "/a"}, idempotency_key="ship-o1")

    # WHEN a second transaction enqueues the same job (same key, same payload) beside a new write
    with pytest.raises(TransactionCancelled) as cancelled, app.transaction() as tx:
        tx.put(**_new_order(orders, "o2"))
        assert tx.enqueue("count", {"runs_dir": "/a"}, idempotency_key="ship-o1") == first
    # THEN the reason says the job exists, and the new write was not applied
    (reason,) = cancelled.value.failed
    assert (reason.job_id, reason.code) == (first, "ConditionalCheckFailed")
    assert "already exists with this payload (idempotency key 'ship-o1')" in reason.message
    assert _order(app, orders, "o2") is None

    # WHEN the same key comes with another payload
    with pytest.raises(IdempotencyConflict, match="different payload") as conflict, app.transaction() as tx:
        tx.put(**_new_order(orders, "o3"))
        tx.enqueue("count", {"runs_dir": "/b"}, idempotency_key="ship-o1")
    # THEN it is the enqueue's conflict, chained to the cancellation; still nothing written
    assert isinstance(conflict.value.__cause__, TransactionCancelled)
    assert _order(app, orders, "o3") is None
    assert depth(app)["visible"] == 1  # the first transaction's hint only


def test_a_transaction_whose_answer_was_lost_is_committed_once(backend_url, make_app, tmp_path):
    from tests.soak.faults import FaultPlan, FaultProxy

    # GIVEN the answer to the TransactWriteItems is lost after DynamoDB applied it; botocore retries
    # the identical request (same ClientRequestToken). MiniStack, like AWS, answers the replay
    # without applying it again; moto cancels it, and the transaction recognises its own record.
    direct = _app(make_app, backend_url)
    orders = _orders_table(direct)
    with FaultProxy(backend_url) as proxy:
        via_proxy = make_app(proxy.url, name=direct.name)
        via_proxy.registry.include(guarantees.app.registry)
        proxy.faults = FaultPlan(
            reset_after=1.0, only_actions=frozenset({"TransactWriteItems"}), max_faults=1
        )
        with via_proxy.transaction() as tx:
            tx.put(**_new_order(orders, "o1"))
            job_id = tx.enqueue("count", {"runs_dir": str(tmp_path), "sleep_s": 0})
        assert proxy.faults_injected == {"reset_after": 1}

    # THEN the transaction reports success, its hint went, and the job runs once
    assert tx.committed and _order(direct, orders, "o1") is not None
    work_until(direct, all_finished(direct, [job_id]))
    assert direct.get(job_id).status is JobStatus.SUCCEEDED


@pytest.mark.parametrize(("blob", "table_units"), [(100, 5.0), (1024, 8.0)], ids=["100B", "1KB"])
def test_one_transactional_enqueue_costs_its_measured_write_units(
    ministack_url, make_app, tmp_path, blob, table_units
):
    # DynamoDB's own ConsumedCapacity (Settings.measure_capacity): a transaction bills each item
    # twice (prepare and commit), and the record's attention entry is written, then removed
    app = _app(make_app, ministack_url, measure_capacity=True)
    orders = _orders_table(app)
    app.requests.reset()

    with app.transaction() as tx:
        tx.put(**_new_order(orders, "o1"))
        job_id = tx.enqueue("count", {"runs_dir": str(tmp_path), "sleep_s": 0, "blob": "x" * blob})

    capacity = {f"{kind} {part}": units for (kind, part), units in sorted(app.requests.capacity.items())}
    calls = app.requests.snapshot()
    print(f"\ntransactional enqueue, {blob} B payload: {capacity} {calls}")
    assert calls["dynamodb.TransactWriteItems"] == 1 and calls["dynamodb.UpdateItem"] == 1
    # 100 B: 2 (order, x2) + 2 (record, x2) in the transaction, 1 to clear the record once its hint is
    # sent. 1 KB: the record keeps the payload until then, so it is 2 units, x2, and the clear 2.
    assert app.requests.units("write", "table") == table_units
    # the attention entry: 1 when the transaction creates it, 1 when the clear removes it
    assert app.requests.units("write", "index:attention") == 2.0
    assert app.requests.units("read") == 0

    # AND the cleared record costs a worker what a plain enqueue's does: claim 1 + finish 1, no index
    app.requests.reset()
    worker = work_until(app, all_finished(app, [job_id]))
    assert app.get(job_id).status is JobStatus.SUCCEEDED
    assert job_write_units(app, worker, "table") == 2.0
    assert job_write_units(app, worker) == 2.0


def test_a_payload_over_the_records_limit_goes_to_s3_before_the_transaction(ministack_url, make_app):
    app = make_app(ministack_url)
    app.registry.include(large.app.registry)
    app.provision()
    table = _orders_table(app)
    # WHEN a transaction enqueues a 300 KB payload (the record would keep it until the send)
    with app.transaction() as tx:
        tx.put(**_new_order(table, "o-large"))
        job_id = tx.enqueue("large.echo", {"blob": "t" * 300_000})
    # THEN the record names the S3 object instead of holding the payload, and the job runs from it
    record = _record(app, job_id)
    assert "payload" not in record and record["payload_ref"]["S"].startswith("s3://")
    work_until(app, all_finished(app, [job_id]))
    assert app.get(job_id).result["blob_bytes"] == 300_000
    assert _order(app, table, "o-large") is not None
