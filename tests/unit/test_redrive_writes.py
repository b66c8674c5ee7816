"""The DLQ reconciler's writes: a redriven job's death keeps to the state table, a re-dispatch is counted once."""

from __future__ import annotations

import json

from sqsjobs.envelope import Envelope
from sqsjobs.job import JobStatus
from sqsjobs.store import enqueue, redrive
from sqsjobs.store.state_table import STATE_TABLE
from tests.unit.test_state_table import statuses_in_condition, target_status

NOW = 1_800_000_000.0


def _item(**extra):
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
    return dict(enqueue.put_job("tbl", new).item) | extra


def test_a_redriven_death_is_the_reject_transition_and_keeps_the_payload():
    envelope = Envelope("j1", "t", payload={"a": 1}, has_payload=True)
    write = redrive.redriven("tbl", envelope, now=NOW, reason=redrive.reason(13, 3), retention_s=60)
    params = write.update_item()
    # THEN it admits exactly reject's statuses (a running job only with an expired lease) and sets dead
    assert statuses_in_condition(write) == STATE_TABLE["reject"].sources
    assert target_status(write) is JobStatus.DEAD is STATE_TABLE["reject"].target
    assert "lease_expires < :now" in params["ConditionExpression"]
    # AND it never creates a record, keeps the payload for a replay, and forgets the re-dispatch count
    assert "attribute_not_exists(id)" not in params["ConditionExpression"]
    values = params["ExpressionAttributeValues"]
    assert json.loads(values[":payload"]["S"]) == {"a": 1}
    assert values[":reason"]["S"] == (
        "SQS redrove its message to the DLQ after 13 receives without a finish; re-dispatched 3 time(s) before"
    )
    assert values[":error"]["M"]["class"]["S"] == redrive.REDRIVE_ERROR
    assert values[":attn"]["S"].startswith("dead#")
    assert redrive.REDISPATCHES in params["UpdateExpression"].split(" REMOVE ")[1]


def test_a_payload_in_s3_is_not_copied_into_the_record():
    envelope = Envelope("j1", "t", has_payload=True, payload_ref="s3://b/k")
    params = redrive.redriven("tbl", envelope, now=NOW, reason="r", retention_s=60).update_item()
    assert ":payload" not in params["ExpressionAttributeValues"]


def test_a_redispatch_is_counted_on_the_record_as_read_and_changes_no_status():
    write = redrive.count_redispatch("tbl", _item())
    first = write.update_item()
    assert target_status(write) is None
    assert f"attribute_not_exists({redrive.REDISPATCHES})" in first["ConditionExpression"]
    assert first["ExpressionAttributeValues"][":next"] == {"N": "1"}
    # a later one is conditional on the count read, so two reconcilers cannot both count the same one
    later = redrive.count_redispatch("tbl", _item(dlq_redispatches={"N": "2"})).update_item()
    assert later["ExpressionAttributeValues"][":count"] == {"N": "2"}
    assert later["ExpressionAttributeValues"][":next"] == {"N": "3"}
    assert "updated_at = :seen" in later["ConditionExpression"]
    assert redrive.redispatches(_item(dlq_redispatches={"N": "2"})) == 2
    assert redrive.redispatches(_item()) == 0


def test_the_reason_says_when_the_receive_count_is_not_known():
    assert redrive.reason(None, 0) == (
        "SQS redrove its message to the DLQ after its maxReceiveCount receives without a finish"
    )
