"""Every request builder's output is a valid request for its AWS operation (botocore's service model).

The clients run with botocore's client-side parameter validation off (it costs CPU on every call),
so a misspelt key or a wrong type in a builder would only show up as an emulator's or AWS's
refusal, or not at all (emulators accept unknown keys). This test is what keeps that safe: each
builder's output is validated against the same model botocore would use, and a new builder that
is not listed here fails the coverage check below.
"""

from __future__ import annotations

import inspect
import typing

import botocore.session
import pytest
from botocore.validate import ParamValidator

from sqsjobs.config import Settings
from sqsjobs.delivery import Delivery, failure_record
from sqsjobs.store import (
    bulk,
    codec,
    deadlines,
    enqueue,
    operator,
    outlived,
    presence_items,
    requests,
    runs,
    schema,
    statements,
    transact,
)
from sqsjobs.store.write import Delete, Put, Write
from sqsjobs.transport import objects, sqs

NOW = 1_800_000_000.0
TABLE = "shop-jobs"
URL = "http://127.0.0.1:4566/000000000000/shop-default"
BUILDER_MODULES = (
    requests,
    runs,
    enqueue,
    operator,
    schema,
    statements,
    sqs,
    objects,
    transact,
    presence_items,
    deadlines,
    bulk,
    outlived,
)


def _new_job() -> enqueue.NewJob:
    return enqueue.NewJob(
        id="j1",
        type="shop.send_receipt",
        queue="default",
        payload={"order": 1},
        payload_version=1,
        max_attempts=3,
        run_at=NOW,
        now=NOW,
        idempotency_key="k1",
        tenant="acme",
        trace="Root=1-abc",
    )


def _job():
    item = enqueue.put_job(TABLE, _new_job()).item
    return codec.job_from_item(item).evolve(claim_token=codec.nonce())


def _due() -> schema.DueRecord:
    item = enqueue.put_job(TABLE, _new_job(), unsent=True).item
    return schema.due_records({"Items": [item]})[0]


ERROR = failure_record(ValueError("boom"))
WORKER = presence_items.WorkerEntry(
    worker_id="h-1-abc",
    host="h",
    pid=1,
    version="0.1",
    queues=("default",),
    job_types=("a",),
    concurrency=10,
    started_at=NOW,
    interval_s=30.0,
)


def statement_of(write: Write | Put) -> dict[str, typing.Any]:
    """The PartiQL statement of a write (what a batch carries)."""
    return write.statement()


def _request(built: typing.Any) -> dict[str, typing.Any]:
    """A builder's request: a typed write rendered as the UpdateItem, PutItem or DeleteItem it sends alone."""
    if isinstance(built, Write):
        return built.update_item()
    if isinstance(built, Put):
        return built.put_item()
    if isinstance(built, Delete):
        return built.delete_item()
    return built


#: builder -> (service, operation, a call of it)
CASES: dict[str, tuple[str, str, typing.Callable[[], dict[str, typing.Any]]]] = {
    "put_job": ("dynamodb", "PutItem", lambda: enqueue.put_job(TABLE, _new_job())),
    "mark_unsent": ("dynamodb", "UpdateItem", lambda: enqueue.mark_unsent(TABLE, _new_job())),
    "scan_page": (
        "dynamodb",
        "Scan",
        lambda: bulk.scan_page(
            TABLE,
            job_type="a",
            status="queued",
            tenant="acme",
            op_id="o1",
            limit=10,
            start={"id": {"S": "j1"}},
        ),
    ),
    "cancel_matching": (
        "dynamodb",
        "UpdateItem",
        lambda: bulk.cancel_matching(
            TABLE,
            "j1",
            job_type="a",
            status="queued",
            tenant="acme",
            op_id="o1",
            audit={"action": "bulk_cancel", "at": NOW},
            now=NOW,
            retention_s=60,
        ),
    ),
    "put_op": (
        "dynamodb",
        "PutItem",
        lambda: bulk.put_op(TABLE, "o1", filters={"type": "a"}, by="me", now=NOW),
    ),
    "get_op": ("dynamodb", "GetItem", lambda: bulk.get_op(TABLE, "o1")),
    "checkpoint": (
        "dynamodb",
        "UpdateItem",
        lambda: bulk.checkpoint(
            TABLE, "o1", seq=1, position={"id": {"S": "j1"}}, counts={"matched": 1}, state="running", now=NOW
        ),
    ),
    "expire": (
        "dynamodb",
        "UpdateItem",
        lambda: deadlines.expire(
            TABLE, enqueue.envelope_of(_new_job()), now=NOW, reason="r", retention_s=60, type_bound_s=600
        ),
    ),
    "guard_claim": (
        "dynamodb",
        "UpdateItem",
        lambda: runs.guard_claim(
            runs.claim(
                TABLE,
                enqueue.envelope_of(_new_job()),
                owner="w1",
                token="t",
                message_id="m1",
                now=NOW,
                lease_s=60,
                max_attempts=3,
            ),
            now=NOW,
            type_bound_s=600,
        ),
    ),
    "guard_fresh_claim": (
        "dynamodb",
        "ExecuteStatement",
        lambda: statement_of(
            runs.guard_fresh_claim(
                runs.fresh_claim(
                    TABLE,
                    enqueue.envelope_of(_new_job()),
                    owner="w1",
                    token="t",
                    message_id="m1",
                    now=NOW,
                    lease_s=60,
                    max_attempts=3,
                    clock_skew_s=1,
                ),
                enqueue.envelope_of(_new_job()),
                now=NOW,
                type_bound_s=600,
            )
        ),
    ),
    "claim": (
        "dynamodb",
        "UpdateItem",
        lambda: runs.claim(
            TABLE,
            enqueue.envelope_of(_new_job()),
            owner="w1",
            token=codec.nonce(),
            message_id="m1",
            now=NOW,
            lease_s=60,
            max_attempts=3,
        ),
    ),
    "complete": (
        "dynamodb",
        "UpdateItem",
        lambda: runs.complete(
            TABLE, _job(), owner="w1", now=NOW, result=None, retention_s=60, result_ref="s3://b/results/j1/t"
        ),
    ),
    "schedule_retry": (
        "dynamodb",
        "UpdateItem",
        lambda: runs.schedule_retry(
            TABLE, _job(), owner="w1", now=NOW, run_at=NOW + 5, error=ERROR, held=False
        ),
    ),
    "fail": (
        "dynamodb",
        "UpdateItem",
        lambda: runs.fail(TABLE, _job(), owner="w1", now=NOW, error=ERROR, reason="r", retention_s=60),
    ),
    "abort": (
        "dynamodb",
        "UpdateItem",
        lambda: runs.abort(TABLE, _job(), owner="w1", now=NOW, reason="r", retention_s=60),
    ),
    "fenced": (
        "dynamodb",
        "UpdateItem",
        lambda: runs.fenced(TABLE, _job(), sets=(("updated_at", ":now"),), values={":now": codec.av_n(NOW)}),
    ),
    "release": ("dynamodb", "UpdateItem", lambda: requests.release(TABLE, _job(), owner="w1", now=NOW)),
    "expire_claimed": (
        "dynamodb",
        "UpdateItem",
        lambda: requests.expire_claimed(TABLE, _job(), owner="w1", now=NOW, reason="r", retention_s=60),
    ),
    "heartbeat": (
        "dynamodb",
        "UpdateItem",
        lambda: requests.heartbeat(TABLE, _job(), owner="w1", now=NOW, lease_s=60),
    ),
    "reject": (
        "dynamodb",
        "UpdateItem",
        lambda: requests.reject(
            TABLE, enqueue.envelope_of(_new_job()), now=NOW, error=ERROR, reason="r", retention_s=60
        ),
    ),
    "fresh_claim": (
        "dynamodb",
        "UpdateItem",
        lambda: runs.fresh_claim(
            TABLE,
            enqueue.envelope_of(_new_job()),
            owner="w1",
            token=codec.nonce(),
            message_id="m1",
            now=NOW,
            lease_s=60,
            max_attempts=3,
            clock_skew_s=1,
        ),
    ),
    "batch": (
        "dynamodb",
        "BatchExecuteStatement",
        lambda: statements.batch(
            [
                statement_of(enqueue.put_job(TABLE, _new_job())),
                statement_of(
                    runs.fresh_claim(
                        TABLE,
                        enqueue.envelope_of(_new_job()),
                        owner="w1",
                        token="t",
                        message_id="m1",
                        now=NOW,
                        lease_s=60,
                        max_attempts=3,
                        clock_skew_s=1,
                    )
                ),
                *(statement_of(CASES[name][2]()) for name in ("complete", "schedule_retry", "fail", "abort")),
            ]
        ),
    ),
    "with_write_id": (
        "dynamodb",
        "UpdateItem",
        lambda: requests.with_write_id(
            requests.reject(
                TABLE, enqueue.envelope_of(_new_job()), now=NOW, error=ERROR, reason="r", retention_s=60
            )
        ),
    ),
    "get": ("dynamodb", "GetItem", lambda: requests.get(TABLE, "j1")),
    "cancel": ("dynamodb", "UpdateItem", lambda: operator.cancel(TABLE, "j1", now=NOW, retention_s=60)),
    "request_cancel": ("dynamodb", "UpdateItem", lambda: operator.request_cancel(TABLE, "j1", now=NOW)),
    "keep_payload": (
        "dynamodb",
        "UpdateItem",
        lambda: operator.keep_payload(TABLE, "j1", payload={"a": 1}, now=NOW),
    ),
    "replay": (
        "dynamodb",
        "UpdateItem",
        lambda: operator.replay(
            TABLE,
            _job(),
            seen_updated="1",
            now=NOW,
            max_attempts=3,
            audit={"action": "retry", "at": NOW, "by": "me"},
        ),
    ),
    "reprioritize": (
        "dynamodb",
        "UpdateItem",
        lambda: operator.reprioritize(
            TABLE,
            _job(),
            seen_updated="1",
            priority="high",
            now=NOW,
            audit={"action": "priority", "at": NOW, "by": "me", "from": "normal", "to": "high"},
        ),
    ),
    "query_due": (
        "dynamodb",
        "Query",
        lambda: schema.query_due(TABLE, "held", due_before=NOW, start_key={"id": {"S": "j0"}}),
    ),
    "mark_dispatched": (
        "dynamodb",
        "UpdateItem",
        lambda: schema.mark_dispatched(TABLE, _due(), now=NOW, recheck_at=NOW),
    ),
    "table_definition": ("dynamodb", "CreateTable", lambda: schema.table_definition(TABLE)),
    "mark": (
        "dynamodb",
        "UpdateItem",
        lambda: outlived.mark(TABLE, _job(), payload={"order": 1}, due=NOW + 60, now=NOW),
    ),
    "postpone": ("dynamodb", "UpdateItem", lambda: outlived.postpone(TABLE, _due(), due=NOW + 60)),
    "clear": ("dynamodb", "UpdateItem", lambda: outlived.clear(TABLE, _due())),
    "transact_write": (
        "dynamodb",
        "TransactWriteItems",
        lambda: transact.transact_write(
            [
                {
                    "Put": {
                        "TableName": "orders",
                        "Item": {"pk": {"S": "o1"}},
                        "ConditionExpression": "attribute_not_exists(pk)",
                    }
                },
                {
                    "ConditionCheck": {
                        "TableName": "stock",
                        "Key": {"sku": {"S": "s1"}},
                        "ConditionExpression": "qty > :z",
                        "ExpressionAttributeValues": {":z": {"N": "0"}},
                    }
                },
                transact.job_entry(TABLE, _new_job(), token=codec.nonce(), pending_until=NOW + 300),
            ],
            token=codec.nonce(),
        ),
    ),
    "clear_sent": (
        "dynamodb",
        "UpdateItem",
        lambda: transact.clear_sent(
            TABLE, transact.job_entry(TABLE, _new_job(), token="t", pending_until=NOW)["Put"]["Item"]
        ),
    ),
    "send_one": (
        "sqs",
        "SendMessage",
        lambda: sqs.send_one(URL, "{}", delay_s=5, attributes={"reason": "r"}),
    ),
    "fresh_copy": (
        "sqs",
        "SendMessage",
        lambda: sqs.fresh_copy(
            Delivery(
                queue="q",
                queue_url=URL + ".fifo",
                message_id="m",
                receipt_handle="r",
                body="{}",
                receive_count=4,
                sent_at=0.0,
                attributes={"MessageGroupId": "k1"},
                message_attributes={"traceparent": {"DataType": "String", "StringValue": "00-a-b-01"}},
            )
        ),
    ),
    "send_batch": ("sqs", "SendMessageBatch", lambda: sqs.send_batch(URL, [("0", "{}", 0), ("1", "{}", 30)])),
    "receive": ("sqs", "ReceiveMessage", lambda: sqs.receive(URL, max_messages=10, wait_s=20)),
    "delete_batch": ("sqs", "DeleteMessageBatch", lambda: sqs.delete_batch(URL, [("0", "rh")])),
    "change_visibility_batch": (
        "sqs",
        "ChangeMessageVisibilityBatch",
        lambda: sqs.change_visibility_batch(URL, [("0", "rh", 30)]),
    ),
    "lifecycle": ("s3", "PutBucketLifecycleConfiguration", lambda: objects.lifecycle(Settings("shop"))),
    "register": (
        "dynamodb",
        "PutItem",
        lambda: presence_items.register(TABLE, WORKER, now=NOW, running=["j1"]),
    ),
    "refresh": (
        "dynamodb",
        "UpdateItem",
        lambda: presence_items.refresh(
            TABLE, WORKER, now=NOW, state=presence_items.DRAINING, running=["j1", "j2"]
        ),
    ),
    "request_drain": (
        "dynamodb",
        "UpdateItem",
        lambda: presence_items.request_drain(TABLE, "h-1-abc", now=NOW, by="api@127.0.0.1").update_item(),
    ),
    "deregister": ("dynamodb", "DeleteItem", lambda: presence_items.deregister(TABLE, "h-1-abc")),
    "query_workers": (
        "dynamodb",
        "Query",
        lambda: presence_items.query_workers(TABLE, {"id": {"S": "worker#x"}}),
    ),
}

_SESSION = botocore.session.get_session()


def _input_shape(service: str, operation: str):
    return _SESSION.get_service_model(service).operation_model(operation).input_shape


def _builders() -> set[str]:
    """Public functions of the builder modules that return request parameters."""
    found = set()
    for module in BUILDER_MODULES:
        for name, fn in inspect.getmembers(module, inspect.isfunction):
            if name.startswith("_") or fn.__module__ != module.__name__:
                continue
            returns = inspect.signature(fn).return_annotation
            if returns in ("dict[str, Any]", "Write", "Put", "Delete") and name not in NOT_REQUESTS:
                found.add(name)
    return found


#: Functions with that return type that build something other than a request.
NOT_REQUESTS = {
    "audit_av",
    "queue_attributes",
    "deadline_values",  # the placeholders of a condition, not a request
    "history",  # an attribute's value (the attempt history), not a request
    "update_statement",
    "insert_statement",
    "kept_payload",
    "op_key",  # a key, not a request
    "job_entry",  # one item of a transaction, checked inside transact_write's case
    "job_put",  # the same item typed (job_entry renders it), checked there too
    "entry_of",  # a typed write as a transaction entry, each kind checked in its own case
    "inlined",  # one statement of a batch, checked inside batch's case
}


def test_every_request_builder_is_checked_here():
    assert _builders() == set(CASES), "add new request builders to CASES"


@pytest.mark.parametrize("builder", sorted(CASES))
def test_the_builder_output_is_valid_for_its_operation(builder):
    service, operation, build = CASES[builder]
    report = ParamValidator().validate(_request(build()), _input_shape(service, operation))
    assert not report.has_errors(), report.generate_report()


def test_a_misspelt_key_is_caught():
    # GIVEN a request with a typo, as a hand edit could make it
    params = {**requests.get(TABLE, "j1"), "ConsistantRead": True}
    # THEN the same validation reports it by name
    report = ParamValidator().validate(params, _input_shape("dynamodb", "GetItem"))
    assert "ConsistantRead" in report.generate_report()


def test_codec_keys_are_attribute_values():
    # The item codec's values are the AttributeValue shapes PutItem takes.
    item = enqueue.put_job(TABLE, _new_job()).item
    assert all(len(v) == 1 and next(iter(v)) in {"S", "N", "M", "L", "BOOL", "NULL"} for v in item.values())
    assert codec.job_from_item(item).id == "j1"
