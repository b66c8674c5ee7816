"""The sans-I/O DynamoDB requests: what each transition writes and how a refusal is read."""

from __future__ import annotations

import json

import pytest

from sqsjobs import IdempotencyConflict, JobStatus
from sqsjobs.errors import StoreError
from sqsjobs.job import FailureRecord
from sqsjobs.store import codec, enqueue, job_store, requests, runs, schema
from sqsjobs.store.apply import ClaimRefusal
from sqsjobs.transport import sqs

NOW = 1_800_000_000.0


def new_job(**changes) -> enqueue.NewJob:
    fields = {
        "id": "j1",
        "type": "t",
        "queue": "default",
        "payload": {"a": 1},
        "payload_version": 1,
        "max_attempts": 3,
        "run_at": NOW,
        "now": NOW,
    }
    return enqueue.NewJob(**{**fields, **changes})


def refusal(item) -> StoreError:
    return StoreError(
        "refused", code="ConditionalCheckFailedException", response={"Item": item} if item else {}
    )


def test_a_put_item_round_trips_through_job_from_item_without_the_payload_its_message_carries():
    item = enqueue.put_job("table", new_job(tenant="acme", trace="Root=1-abc")).item
    job = codec.job_from_item(item)
    assert (job.id, job.status, job.payload, job.attempt, job.max_attempts) == (
        "j1",
        JobStatus.QUEUED,
        None,
        0,
        3,
    )
    assert (job.tenant, job.trace, job.run_at.timestamp()) == ("acme", "Root=1-abc", NOW)
    assert (job.payload_hash, job.payload_size) == (new_job().payload_hash, len('{"a":1}'))
    # the happy path's record is not in any index
    assert not {"attn", "due", "payload"} & set(item)
    envelope = enqueue.envelope_of(new_job())
    assert (envelope.payload, envelope.payload_hash) == ({"a": 1}, job.payload_hash)


def test_a_record_no_message_carries_keeps_its_payload_in_a_sharded_attention_entry():
    held = enqueue.put_job("t", new_job(held=True)).item
    unsent = enqueue.put_job("t", new_job(), unsent=True).item
    assert held["attn"]["S"] == schema.attention_key(schema.HELD, "j1") and held["due"] == {"N": str(NOW)}
    assert unsent["attn"]["S"] == schema.attention_key(schema.PENDING, "j1")
    assert codec.job_from_item(held).payload == codec.job_from_item(unsent).payload == {"a": 1}


def test_idempotency_keys_scope_by_type_and_tenant():
    assert codec.idempotent_job_id("a", "k") == codec.idempotent_job_id("a", "k")
    assert (
        len(
            {
                codec.idempotent_job_id("a", "k"),
                codec.idempotent_job_id("b", "k"),
                codec.idempotent_job_id("a", "k", "t"),
            }
        )
        == 3
    )


def test_a_refused_put_with_the_same_payload_is_the_same_job_and_otherwise_a_conflict():
    existing = enqueue.put_job("t", new_job(idempotency_key="k")).item
    assert enqueue.interpret_put_conflict(new_job(idempotency_key="k"), dict(existing)) == "j1"
    with pytest.raises(IdempotencyConflict):
        enqueue.interpret_put_conflict(new_job(idempotency_key="k", payload={"a": 2}), dict(existing))


def test_errors_other_than_a_false_condition_are_not_mistaken_for_conflicts():
    throttled = StoreError("slow down", code="ProvisionedThroughputExceededException")
    with pytest.raises(StoreError, match="slow down"):
        job_store.interpret_claim_refusal(throttled, NOW, 3)


def _item(status: str, **extra) -> dict:
    item = enqueue.put_job("t", new_job()).item
    item["status"] = {"S": status}
    for key, value in extra.items():
        item[key] = {"N": str(value)} if isinstance(value, int | float) else {"S": value}
    return item


@pytest.mark.parametrize(
    ("item", "reason"),
    [
        (None, ClaimRefusal.MISSING),
        (_item("succeeded"), ClaimRefusal.FINISHED),
        (_item("queued", run_at=NOW + 60), ClaimRefusal.NOT_DUE),
        (_item("running", lease_expires=NOW + 30, lease_owner="w"), ClaimRefusal.HELD_ELSEWHERE),
        (_item("running", lease_expires=NOW - 1, attempt=3), ClaimRefusal.EXHAUSTED),
        (_item("retry_scheduled", attempt=3), ClaimRefusal.EXHAUSTED),
    ],
)
def test_a_refused_claim_says_what_the_message_is_worth(item, reason):
    assert job_store.interpret_claim_refusal(refusal(item), NOW, 3).reason is reason


def test_fenced_writes_are_conditional_on_the_claim_token_and_carry_a_fresh_nonce():
    job = codec.job_from_item(_item("running", lease_owner="w", lease_epoch=4, claim_token="tok"))
    for params in (
        runs.complete("t", job, owner="w", now=NOW, result=None, retention_s=1),
        runs.schedule_retry(
            "t", job, owner="w", now=NOW, run_at=NOW, error=FailureRecord("E", "m"), held=False
        ),
        runs.fail("t", job, owner="w", now=NOW, error=FailureRecord("E", "m"), reason="r", retention_s=1),
        requests.release("t", job, owner="w", now=NOW),
        requests.heartbeat("t", job, owner="w", now=NOW, lease_s=1),
    ):
        params = params.update_item()  # the UpdateItem each renders
        assert params["ConditionExpression"] == "#status = :running AND claim_token = :token"
        assert params["ExpressionAttributeValues"][":token"] == {"S": "tok"}
        assert "wid = :wid" in params["UpdateExpression"]
        assert params["ReturnValuesOnConditionCheckFailure"] == "ALL_OLD"


def test_the_history_is_capped():
    job = codec.job_from_item(_item("running", lease_owner="w", claim_token="tok"))
    for attempt in range(15):
        params = runs.schedule_retry(
            "t",
            job.evolve(attempt=attempt + 1),
            owner="w",
            now=NOW,
            run_at=NOW,
            error=FailureRecord("E", "m"),
            held=False,
        ).update_item()
        job = codec.job_from_item(
            {
                **_item("running", lease_owner="w", claim_token="tok"),
                "history": params["ExpressionAttributeValues"][":history"],
            }
        )
    assert len(job.history) == runs.HISTORY_CAP
    assert job.history[-1].attempt == 15


def test_sqs_limits_are_applied_where_they_bite():
    assert [len(c) for c in sqs.chunks(list(range(23)))] == [10, 10, 3]
    assert (sqs.clamp_delay(-3), sqs.clamp_delay(0.2), sqs.clamp_delay(10_000)) == (0, 1, 900)
    assert sqs.clamp_visibility(10**6) == 43_200
    with pytest.raises(ValueError):
        sqs.receive("url", max_messages=11, wait_s=1)


def test_a_heartbeat_refused_by_the_owners_own_outcome_is_not_a_lost_lease():
    job = codec.job_from_item(_item("running", lease_owner="w", lease_epoch=2, claim_token="ours"))
    finished_by_us = _item("succeeded", lease_epoch=2, claim_token="ours")
    rescued_by_another = _item("running", lease_owner="x", lease_epoch=3, claim_token="theirs")
    assert job_store.moved_on_by_owner(job, refusal(finished_by_us))
    assert not job_store.moved_on_by_owner(job, refusal(rescued_by_another))
    assert not job_store.moved_on_by_owner(job, StoreError("slow down", code="ThrottlingException"))


def test_a_watchs_note_rides_on_the_heartbeat_and_never_replaces_one_written_before():
    # GIVEN a running job whose watch noted a slow-run flag
    job = codec.job_from_item(_item("running", lease_owner="w", lease_epoch=2, claim_token="ours"))
    note = {"at": 1.0, "elapsed_s": 31.5, "p95_s": 10.0, "factor": 3.0}
    # WHEN its lease is renewed
    write = requests.heartbeat("tbl", job, owner="w", now=NOW, lease_s=30, notes={"running_long": note})
    params = write.update_item()
    # THEN the one renewal sets it, only where the record has none (the first flag of a run stays)
    assert "running_long = if_not_exists(running_long, :note0)" in params["UpdateExpression"]
    assert json.loads(params["ExpressionAttributeValues"][":note0"]["S"]) == note
