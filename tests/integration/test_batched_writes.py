"""Batched writes are the single writes, grouped: same record after, same refusal, fewer requests.

Each transition the worker may batch is applied twice to twin records on MiniStack — once as its
UpdateItem, once as its PartiQL twin inside a BatchExecuteStatement — and the records compared.
Refusals are read through the same functions the worker uses. The embedded moto, which ignores
PartiQL conditions, must refuse PartiQL so that the writes fall back to single requests there.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from typing import Any

import pytest

from sqsjobs import App, IdempotencyConflict, JobStatus
from sqsjobs._aws import Call, one
from sqsjobs.delivery import failure_record
from sqsjobs.envelope import parse
from sqsjobs.errors import StoreError
from sqsjobs.producer import JobRequest, build_new_job
from sqsjobs.store import codec, enqueue, job_store, requests, runs, statements
from sqsjobs.store.apply import ClaimRefusal, Landed
from sqsjobs.store.write import Put, Write
from sqsjobs.store.write_batcher import WriteBatcher

NOW = time.time()
ERROR = failure_record(ValueError("boom"))
#: Values a batch must never write into a statement's text: quotes, ``?``, a backslash, a minus.
HOSTILE = failure_record(ValueError("it's ? a '; \\ trick -1"))
TOKEN = "claim-token-of-this-test"
#: How long finished records are kept. ``NOW`` is taken when the module is imported, minutes before
#: a test may run in a full suite: MiniStack's TTL reaper (every 60 s) would delete a record whose
#: ``expires_at`` had passed between its write and the test's read of it.
RETENTION_S = 24 * 3600

FENCED = {
    "complete": lambda t, j: runs.complete(
        t, j, owner="w1", now=NOW, result={"ok": 1}, retention_s=RETENTION_S
    ),
    "retry": lambda t, j: runs.schedule_retry(
        t, j, owner="w1", now=NOW, run_at=NOW + 5, error=ERROR, held=False
    ),
    "retry held": lambda t, j: runs.schedule_retry(
        t, j, owner="w1", now=NOW, run_at=NOW + 90_000, error=ERROR, held=True, payload={"a": 1}
    ),
    "fail": lambda t, j: runs.fail(
        t, j, owner="w1", now=NOW, error=ERROR, reason="r", retention_s=RETENTION_S, payload=1
    ),
    "fail, quotes in its values": lambda t, j: runs.fail(
        t, j, owner="w'1 ?", now=NOW, error=HOSTILE, reason="'; ?", retention_s=RETENTION_S, payload="a'b"
    ),
    "abort": lambda t, j: runs.abort(
        t, j, owner="w1", now=NOW, reason="r", retention_s=RETENTION_S, payload=1
    ),
    "release": lambda t, j: requests.release(t, j, owner="w1", now=NOW),
}


@pytest.fixture
def app(ministack_url, make_app) -> App:
    made = make_app(ministack_url)
    made.job("noop")(lambda payload, ctx: None)
    made.provision()
    return made


def _new(app: App, payload: Any = None) -> enqueue.NewJob:
    return build_new_job(
        JobRequest("noop", payload or {"n": 1}), registry=app.registry, settings=app.settings, now=NOW
    )


def _call(app: App, operation: str, params: dict[str, Any]) -> dict[str, Any]:
    if isinstance(params, Write):  # a typed write goes as its UpdateItem, a put as its PutItem
        params = params.update_item()
    elif isinstance(params, Put):
        params = params.put_item()
    return dict(app.run(one(Call("dynamodb", operation, params))))


def _item(app: App, job_id: str) -> dict[str, Any]:
    return _call(app, "get_item", requests.get(app.settings.table_name, job_id)).get("Item", {})


def _batch(app: App, *params: dict[str, Any]) -> list[StoreError | None]:
    request = statements.batch([p.statement() for p in params])
    return [
        statements.statement_error(a) for a in _call(app, "batch_execute_statement", request)["Responses"]
    ]


def _claimed(app: App) -> Any:
    """A job put by a producer and claimed by a single claim with ``TOKEN``."""
    new = _new(app)
    _call(app, "put_item", enqueue.put_job(app.settings.table_name, new))
    claim = runs.claim(
        app.settings.table_name,
        enqueue.envelope_of(new),
        owner="w1",
        token=TOKEN,
        message_id="m1",
        now=NOW,
        lease_s=60,
        max_attempts=3,
    )
    return codec.job_from_item(_call(app, "update_item", claim)["Attributes"])


def _twin(params: Write, job_id: str) -> Write:
    return dataclasses.replace(params, key={"id": {"S": job_id}})


def _comparable(item: dict[str, Any]) -> dict[str, Any]:
    """The record without what differs between twins by construction (the id, and its attention shard)."""
    return {k: v for k, v in item.items() if k not in ("id", "attn")}


@pytest.mark.parametrize("transition", sorted(FENCED))
def test_a_batched_fenced_transition_leaves_the_record_its_update_item_leaves(app, transition):
    single, batched = _claimed(app), _claimed(app)
    params = FENCED[transition](app.settings.table_name, single)
    # WHEN one record takes the UpdateItem and its twin the same write as a batched statement
    _call(app, "update_item", params)
    assert _batch(app, _twin(params, batched.id)) == [None]
    # THEN both records are the same
    assert _comparable(_item(app, batched.id)) == _comparable(_item(app, single.id))


@pytest.mark.parametrize("transition", sorted(FENCED))
def test_a_refused_statement_is_read_exactly_as_the_refused_update_item(app, transition):
    job = _claimed(app)
    table = app.settings.table_name
    _call(
        app,
        "update_item",
        runs.complete(table, job, owner="w1", now=NOW, result=None, retention_s=RETENTION_S),
    )
    late = FENCED[transition](table, job)  # the lease is gone: the job succeeded meanwhile
    with pytest.raises(StoreError) as single:
        _call(app, "update_item", late)
    (batched,) = _batch(app, late)
    assert batched is not None
    assert (batched.code, codec.old_item(batched)) == (single.value.code, codec.old_item(single.value))
    assert str(job_store.lease_lost(job, batched)) == str(job_store.lease_lost(job, single.value))
    assert not job_store.already_written(late, batched)


def test_a_batched_write_repeated_after_a_lost_answer_is_recognised_as_its_own(app):
    job = _claimed(app)
    params = runs.complete(
        app.settings.table_name, job, owner="w1", now=NOW, result=None, retention_s=RETENTION_S
    )
    assert _batch(app, params) == [None]
    # botocore sends the same request again when the answer was lost
    (again,) = _batch(app, params)
    assert again is not None and job_store.already_written(params, again)


def _fresh(app: App, envelope: Any, token: str = TOKEN) -> dict[str, Any]:
    return runs.fresh_claim(
        app.settings.table_name,
        envelope,
        owner="w1",
        token=token,
        message_id="m1",
        now=NOW,
        lease_s=60,
        max_attempts=3,
        clock_skew_s=runs.CLOCK_SKEW_S,
    )


def test_a_batched_fresh_claim_makes_the_record_the_worker_rebuilds_from_the_message(app):
    new = _new(app, {"order": 7})
    _call(app, "put_item", enqueue.put_job(app.settings.table_name, new))
    envelope = parse(enqueue.envelope_of(new).to_body())  # what the worker receives
    fresh = _fresh(app, envelope)
    assert _batch(app, fresh) == [None]
    # THEN the job the worker builds without a read is the record DynamoDB holds
    assert runs.claimed_job(envelope, fresh) == codec.job_from_item(_item(app, new.id))
    assert codec.job_from_item(_item(app, new.id)).attempt == 1


def test_a_fresh_claim_the_message_cannot_settle_asks_for_the_single_claim(app):
    table = app.settings.table_name
    # no record yet: the producer's write is still in flight
    missing = parse(enqueue.envelope_of(_new(app)).to_body())
    (refused,) = _batch(app, _fresh(app, missing))
    assert refused is not None and job_store.claim_needs_single(refused, TOKEN)
    # a job claimed before and released: its attempt and history are the record's, not the message's
    job = _claimed(app)
    _call(app, "update_item", requests.release(table, job, owner="w1", now=NOW))
    envelope = parse(enqueue.envelope_of(job.evolve(payload={"n": 1})).to_body())
    (refused,) = _batch(app, _fresh(app, envelope, token="another"))
    assert refused is not None and job_store.claim_needs_single(refused, "another")
    # this very claim, landed on a try whose answer was lost
    new = _new(app)
    _call(app, "put_item", enqueue.put_job(table, new))
    envelope = parse(enqueue.envelope_of(new).to_body())
    assert _batch(app, _fresh(app, envelope)) == [None]
    (again,) = _batch(app, _fresh(app, envelope))
    assert again is not None and job_store.claim_needs_single(again, TOKEN)


@pytest.mark.parametrize(
    ("situation", "reason"),
    [
        ("held", ClaimRefusal.HELD_ELSEWHERE),
        ("finished", ClaimRefusal.FINISHED),
        ("conflict", ClaimRefusal.CONFLICT),
    ],
)
def test_a_refused_fresh_claim_is_read_as_the_single_claim_would_be(app, situation, reason):
    table = app.settings.table_name
    new = _new(app)
    _call(app, "put_item", enqueue.put_job(table, new))
    envelope = parse(enqueue.envelope_of(new).to_body())
    assert _batch(app, _fresh(app, envelope, token="first")) == [None]
    if situation == "finished":
        job = codec.job_from_item(_item(app, new.id))
        _call(
            app,
            "update_item",
            runs.complete(table, job, owner="w1", now=NOW, result=None, retention_s=RETENTION_S),
        )
    if situation == "conflict":  # a conflicting enqueue with the same idempotency key sent this one
        envelope = parse(
            enqueue.envelope_of(dataclasses.replace(_new(app, {"other": 1}), id=new.id)).to_body()
        )
    (refused,) = _batch(app, _fresh(app, envelope, token="second"))
    assert refused is not None and not job_store.claim_needs_single(refused, "second")
    single = runs.claim(
        table, envelope, owner="w2", token="second", message_id="m2", now=NOW, lease_s=60, max_attempts=3
    )
    with pytest.raises(StoreError) as by_single:
        _call(app, "update_item", single)
    read = job_store.interpret_claim_refusal(refused, NOW, 3, envelope.payload_hash)
    assert read == job_store.interpret_claim_refusal(by_single.value, NOW, 3, envelope.payload_hash)
    assert read.reason is reason


def _transitions_round(app: App, params: list[dict[str, Any]]) -> list[Any]:
    async def go() -> list[Any]:
        writes = WriteBatcher(app.arun, batch=app.settings.batch_writes, logger=app.telemetry.logger)
        try:
            return await asyncio.gather(*(writes.write(p) for p in params), return_exceptions=True)
        finally:
            await app.aclose()

    return asyncio.run(go())


def test_writes_ready_at_one_instant_leave_in_one_request_and_a_lone_write_alone(app):
    jobs = [_claimed(app) for _ in range(12)]
    table = app.settings.table_name
    app.requests.reset()
    done = [runs.complete(table, j, owner="w1", now=NOW, result=None, retention_s=RETENTION_S) for j in jobs]
    landed = _transitions_round(app, done)
    assert all(not isinstance(x, BaseException) for x in landed), landed
    assert dict(app.requests.counts) == {("dynamodb", "BatchExecuteStatement"): 1}
    assert {codec.job_from_item(_item(app, j.id)).status for j in jobs} == {JobStatus.SUCCEEDED}
    # a write alone is its single UpdateItem
    app.requests.reset()
    lone = _claimed(app)
    app.requests.reset()
    _transitions_round(
        app, [runs.complete(table, lone, owner="w1", now=NOW, result=None, retention_s=RETENTION_S)]
    )
    assert dict(app.requests.counts) == {("dynamodb", "UpdateItem"): 1}


def test_two_writes_of_one_record_at_one_instant_never_share_a_batch(app):
    job = _claimed(app)
    table = app.settings.table_name
    first = runs.complete(table, job, owner="w1", now=NOW, result=None, retention_s=RETENTION_S)
    second = runs.fail(table, job, owner="w1", now=NOW, error=ERROR, reason="r", retention_s=RETENTION_S)
    app.requests.reset()
    landed = _transitions_round(
        app,
        [
            first,
            second,
            *(
                runs.complete(table, _claimed(app), owner="w1", now=NOW, result=None, retention_s=RETENTION_S)
                for _ in range(3)
            ),
        ],
    )
    # exactly one of the two writes of the job takes effect; the other is refused as LeaseLost reads it
    outcomes = landed[:2]
    assert sum(isinstance(x, StoreError) and codec.is_conflict(x) for x in outcomes) == 1, outcomes
    assert codec.job_from_item(_item(app, job.id)).status in (JobStatus.SUCCEEDED, JobStatus.DEAD)


def test_the_embedded_moto_refuses_partiql_and_the_writes_fall_back_to_single_requests(moto_url, make_app):
    app = make_app(moto_url)
    app.job("noop")(lambda payload, ctx: None)
    app.provision()
    jobs = [_claimed(app) for _ in range(4)]
    table = app.settings.table_name
    app.requests.reset()
    landed = _transitions_round(
        app,
        [runs.complete(table, j, owner="w1", now=NOW, result=None, retention_s=RETENTION_S) for j in jobs],
    )
    assert all(not isinstance(x, BaseException) for x in landed), landed
    assert app.requests.counts[("dynamodb", "BatchExecuteStatement")] == 1  # refused: UnknownOperation
    assert app.requests.counts[("dynamodb", "UpdateItem")] == 4
    assert {codec.job_from_item(_item(app, j.id)).status for j in jobs} == {JobStatus.SUCCEEDED}


@pytest.mark.parametrize("backend", ["ministack", "moto"])
def test_enqueue_many_writes_records_25_to_a_request_and_keeps_idempotency(request, make_app, backend):
    app = make_app(request.getfixturevalue(f"{backend}_url"))
    app.job("noop")(lambda payload, ctx: None)
    app.provision()
    key = f"k-{uuid.uuid4().hex}"
    app.requests.reset()
    jobs = [{"type": "noop", "payload": {"i": i}} for i in range(29)]
    jobs += [{"type": "noop", "payload": {"i": 0}, "idempotency_key": key}] * 2
    ids = app.enqueue_many(jobs)
    assert len(set(ids)) == 30 and ids[-1] == ids[-2]
    batches = app.requests.counts[("dynamodb", "BatchExecuteStatement")]
    puts = app.requests.counts[("dynamodb", "PutItem")]
    if backend == "ministack":
        assert (batches, puts) == (2, 1), app.requests.snapshot()  # 25 + 5; the repeated key alone
    else:  # the embedded moto refuses PartiQL: each record is its own conditional put
        assert puts == 31, app.requests.snapshot()
    assert {app.get(i).status for i in ids} == {JobStatus.QUEUED}
    # the same key with another payload is refused, as with a single enqueue
    with pytest.raises(IdempotencyConflict):
        app.enqueue_many(
            [
                {"type": "noop", "payload": {"i": 1}},
                {"type": "noop", "payload": {"x": 2}, "idempotency_key": key},
            ]
        )


def test_finishes_ending_one_by_one_share_one_request_and_a_lone_finish_leaves_after_its_linger(app):
    """Handlers end one by one: their finishes wait ``finish_linger_s`` for company, then leave together."""
    jobs = [_claimed(app) for _ in range(5)]
    app.requests.reset()

    async def go() -> list[Any]:
        store = job_store.JobStore(
            WriteBatcher(
                app.arun,
                batch=app.settings.batch_writes,
                logger=app.telemetry.logger,
                finish_linger_s=app.settings.finish_linger_s,
            ),
            app.settings.table_name,
            "w1",
        )
        finishes = []
        try:
            for job in jobs[:4]:  # one loop turn apart, as handlers end
                finishes.append(
                    asyncio.ensure_future(store.complete(job, now=NOW, result=None, retention_s=RETENTION_S))
                )
                await asyncio.sleep(0)
            together = await asyncio.gather(*finishes)
            assert dict(app.requests.counts) == {("dynamodb", "BatchExecuteStatement"): 1}
            app.requests.reset()
            alone = await store.complete(jobs[4], now=NOW, result=None, retention_s=RETENTION_S)
            assert dict(app.requests.counts) == {("dynamodb", "UpdateItem"): 1}
            return [*together, alone]
        finally:
            await app.aclose()

    assert app.settings.finish_linger_s > 0
    landed = asyncio.run(go())
    assert all(isinstance(x, Landed) for x in landed), landed
    assert {codec.job_from_item(_item(app, j.id)).status for j in jobs} == {JobStatus.SUCCEEDED}
