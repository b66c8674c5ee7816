"""``store.apply.apply``: one write sent alone, answered ``Landed`` or ``Refused``; anything else raised.

Driven as its drivers drive it (the flow yields its call; the answer or the error is sent back), with
DynamoDB's answers as botocore returns them.
"""

from __future__ import annotations

import pytest

from sqsjobs.errors import StoreError
from sqsjobs.observability.metrics import consumed_units
from sqsjobs.store.apply import Landed, Refusal, Refused, apply
from sqsjobs.store.codec import WRITE_ID, av_s
from sqsjobs.store.write import Delete, Put, Write


def answered(flow, *, response=None, error=None):
    call = next(flow)
    with pytest.raises(StopIteration) as ended:
        flow.throw(error) if error is not None else flow.send(response)
    return call, ended.value.value


def refusal(item=None):
    return StoreError(
        "refused", code="ConditionalCheckFailedException", response={"Item": item} if item else {}
    )


WRITE = Write(
    "t", {"id": av_s("j1")}, (("n", ":n"), (WRITE_ID, ":wid")), values={":n": av_s("1"), ":wid": av_s("w1")}
)


def test_each_typed_write_is_sent_as_its_own_operation():
    assert next(apply(WRITE)).operation == "update_item"
    assert next(apply(Put("t", {"id": av_s("j1")}))).operation == "put_item"
    assert next(apply(Delete("t", {"id": av_s("j1")}))).operation == "delete_item"


def test_a_landed_write_carries_what_it_returned_and_the_capacity_it_consumed():
    response = {
        "Attributes": {"id": av_s("j1")},
        "ConsumedCapacity": {"TableName": "t", "CapacityUnits": 1.0},
    }
    _, landed = answered(apply(WRITE), response=response)
    assert landed == Landed(attributes={"id": av_s("j1")})
    assert consumed_units(landed.consumed) == [("table", 1.0)]
    _, quiet = answered(apply(WRITE), response={})
    assert consumed_units(quiet.consumed) == []


def test_a_refusal_carries_the_item_as_it_was_and_its_own_earlier_landing_reads_as_landed():
    _, refused = answered(apply(WRITE), error=refusal({"id": av_s("j1"), WRITE_ID: av_s("another")}))
    assert isinstance(refused, Refused) and refused.reason is Refusal.CHANGED
    assert refused.item == {"id": av_s("j1"), WRITE_ID: av_s("another")}
    _, mine = answered(apply(WRITE), error=refusal({"id": av_s("j1"), WRITE_ID: av_s("w1")}))
    assert mine == Landed(attributes={"id": av_s("j1"), WRITE_ID: av_s("w1")}, confirmed=True)
    put = Put("t", {"id": av_s("s1"), "token": av_s("t1")})
    _, taken = answered(apply(put, own=lambda old: old.get("token") == av_s("t1")), error=refusal(put.item))
    assert isinstance(taken, Landed) and taken.confirmed


def test_throttling_is_raised_never_read_as_a_refusal():
    throttled = StoreError("slow down", code="ProvisionedThroughputExceededException")
    flow = apply(WRITE)
    next(flow)
    with pytest.raises(StoreError, match="slow down"):
        flow.throw(throttled)
