"""What a transaction refuses at the add, before anything is sent, and how a refusal is read (no I/O)."""

from __future__ import annotations

import pytest

from sqsjobs import App, IdempotencyConflict, PayloadInvalid, TransactionInvalid
from sqsjobs.errors import StoreError
from sqsjobs.store import transact
from sqsjobs.store.apply import CONFLICT_TRIES, Landed, Refusal, Refused, apply_all
from sqsjobs.store.codec import WRITE_ID, av_s


@pytest.fixture
def app():
    app = App("shop", endpoint_url="http://127.0.0.1:1")  # never reached: nothing here commits

    @app.job("ship")
    def ship(payload: dict[str, int], ctx) -> None: ...

    return app


def _tx(app):
    return app.transaction()


def _put(pk: str, table: str = "orders", **extra) -> dict:
    return {"TableName": table, "Item": {"pk": {"S": pk}, **extra}}


def test_plain_python_values_are_refused_with_the_shape_to_use(app):
    tx = _tx(app)
    with pytest.raises(TransactionInvalid, match=r"Item\['pk'\] is 'o1', not an AttributeValue"):
        tx.put(TableName="orders", Item={"pk": "o1"})
    with pytest.raises(TransactionInvalid, match=r"ExpressionAttributeValues\[':n'\]"):
        tx.update(
            TableName="orders",
            Key={"pk": {"S": "o1"}},
            UpdateExpression="SET n = :n",
            ExpressionAttributeValues={":n": 1},
        )


def test_two_operations_on_one_known_key_are_refused_at_the_add(app):
    tx = _tx(app)
    tx.update(
        TableName="orders",
        Key={"pk": {"S": "o1"}},
        UpdateExpression="SET n = :n",
        ExpressionAttributeValues={":n": {"N": "1"}},
    )
    with pytest.raises(TransactionInvalid, match="same item as item 0"):
        tx.condition_check(
            TableName="orders", Key={"pk": {"S": "o1"}}, ConditionExpression="attribute_exists(pk)"
        )
    # a put is matched by the key it contains
    with pytest.raises(TransactionInvalid, match="same item as item 0"):
        tx.put(**_put("o1", n={"N": "2"}))
    # the same key on another table, or another key, is another item
    tx.delete(TableName="invoices", Key={"pk": {"S": "o1"}})
    tx.put(**_put("o2"))


def test_the_same_job_twice_is_one_job_and_another_payload_under_its_key_conflicts(app):
    tx = _tx(app)
    first = tx.enqueue("ship", {"order": 1}, idempotency_key="o1")
    assert tx.enqueue("ship", {"order": 1}, idempotency_key="o1") == first
    assert tx.job_ids == [first]
    with pytest.raises(IdempotencyConflict, match="twice in this transaction"):
        tx.enqueue("ship", {"order": 2}, idempotency_key="o1")


def test_a_job_is_validated_at_the_add_like_enqueue(app):
    with pytest.raises(PayloadInvalid):
        _tx(app).enqueue("ship", {"order": "not a number"})


def test_the_101st_item_and_the_4_mb_limit_are_refused_at_the_add(app):
    tx = _tx(app)
    for n in range(transact.MAX_ITEMS - 1):
        tx.put(**_put(f"o{n}"))
    tx.enqueue("ship", {"order": 1})
    with pytest.raises(TransactionInvalid, match="at most 100 items"):
        tx.put(**_put("o-last"))

    tx = _tx(app)
    blob = {"S": "x" * 390_000}  # under the 400 KB item limit
    for n in range(10):
        tx.put(**_put(f"o{n}", blob=blob))
    with pytest.raises(TransactionInvalid, match="over DynamoDB's 4194304-byte limit"):
        tx.put(**_put("o10", blob=blob))


def test_item_size_follows_dynamodbs_rules():
    # name bytes + value bytes; numbers: (significant digits + 1) // 2 + 1; lists/maps: 3 + 1 per element
    assert transact.item_size({"pk": {"S": "é"}}) == 2 + 2
    assert transact.item_size({"n": {"N": "12345"}}) == 1 + 4
    assert transact.item_size({"n": {"N": "100"}}) == 1 + 2
    assert transact.item_size({"f": {"BOOL": True}, "z": {"NULL": True}}) == 2 + 2
    assert transact.item_size({"m": {"M": {"a": {"S": "bc"}}}}) == 1 + 3 + 1 + 1 + 2
    assert transact.item_size({"l": {"L": [{"S": "d"}]}}) == 1 + 3 + 1 + 1


def test_a_cancellation_that_shows_the_transactions_own_record_is_its_earlier_commit():
    # moto answers a retried request (same ClientRequestToken) with a cancellation instead of the
    # first answer: the job record it shows carries this transaction's token, so it committed.
    def cancelled(item):
        reasons = [{"Code": "ConditionalCheckFailed"}, {"Code": "ConditionalCheckFailed", "Item": item}]
        return StoreError("x", code="TransactionCanceledException", response={"CancellationReasons": reasons})

    def answer(error, own):
        flow = apply_all([{"Put": {}}, {"Put": {}}], wid="tok", own=own)
        call = next(flow)
        assert call.operation == "transact_write_items" and call.params["ClientRequestToken"] == "tok"
        with pytest.raises(StopIteration) as ended:
            flow.throw(error)
        return ended.value.value

    assert answer(cancelled({"id": av_s("j1"), WRITE_ID: av_s("tok")}), [1]) == Landed(confirmed=True)
    assert isinstance(answer(cancelled({"id": av_s("j1"), WRITE_ID: av_s("other")}), [1]), Refused)
    assert isinstance(answer(cancelled({"id": av_s("j1")}), [1]), Refused)
    assert isinstance(answer(cancelled({"id": av_s("j1"), WRITE_ID: av_s("tok")}), [0]), Refused)


def test_a_transaction_held_by_another_is_tried_again_with_a_fresh_token_then_answered_contended():
    held = StoreError(
        "x",
        code="TransactionCanceledException",
        response={"CancellationReasons": [{"Code": "None"}, {"Code": "TransactionConflict"}]},
    )
    flow = apply_all([{"Put": {}}, {"Put": {}}], wid="tok")
    tokens, step = [], next(flow)
    with pytest.raises(StopIteration) as ended:
        while True:
            if step.operation == "transact_write_items":
                tokens.append(step.params["ClientRequestToken"])
                step = flow.throw(held)
            else:  # the wait between tries, performed by the driver
                step = flow.send(None)
    refused = ended.value.value
    assert isinstance(refused, Refused) and refused.reason is Refusal.CONTENDED
    assert refused.code(1) == "TransactionConflict"
    assert len(tokens) == CONFLICT_TRIES and tokens[0] == "tok" and len(set(tokens)) == CONFLICT_TRIES


def test_a_discarded_transaction_takes_nothing_more(app):
    tx = _tx(app)
    tx.put(**_put("o1"))
    tx.discard()
    with pytest.raises(TransactionInvalid, match="already committed or discarded"):
        tx.enqueue("ship", {"order": 1})
