"""Chains without AWS: building the steps, the ids, the envelope's chain fields, and ``run_job(previous_result=)``."""

from __future__ import annotations

import pytest

from sqsjobs import App, ChainInvalid, ChainPlace, EnvelopeError, JobContext, JobRequest
from sqsjobs.chains import records as chain_records
from sqsjobs.chains.namespace import build_steps
from sqsjobs.envelope import Envelope
from sqsjobs.store import codec, enqueue, runs
from sqsjobs.testing import run_job

NOW = 1_800_000_000.0


@pytest.fixture
def app():
    app = App("unit", payload_bucket="bucket")

    @app.job("a.add")
    def add(payload: dict, ctx: JobContext) -> int:
        return (ctx.previous_result or 0) + payload["n"]

    return app


def build(app, steps, dedupe_key=None):
    return build_steps(steps, registry=app.registry, settings=app.settings, now=NOW, dedupe_key=dedupe_key)


def test_step_ids_come_from_the_chain_id_and_a_dedupe_key_fixes_the_chain_id(app):
    chain_id, jobs = build(app, [("a.add", {"n": 1}), ("a.add", {"n": 2})], dedupe_key="k1")
    assert [j.id for j in jobs] == [f"{chain_id}-00", f"{chain_id}-01"]
    assert [j.chain for j in jobs] == [ChainPlace(chain_id, 0, 2), ChainPlace(chain_id, 1, 2)]
    assert build(app, [("a.add", {"n": 9})], dedupe_key="k1")[0] == chain_id
    assert build(app, [("a.add", {"n": 1})])[0] != build(app, [("a.add", {"n": 1})])[0]
    assert "#" not in jobs[0].id and chain_records.chain_key(chain_id)["id"]["S"].startswith("chain#")


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        ([], "1 to 99 steps"),
        ([("a.add", {"n": 1})] * 100, "1 to 99 steps"),
        (["a.add"], "give each step as"),
        ([JobRequest("a.add", {"n": 1}, idempotency_key="x")], "no idempotency key"),
        ([JobRequest("a.add", {"n": 1}, delay=5)], "no idempotency key, delay or run_at"),
    ],
)
def test_steps_that_cannot_make_a_chain_are_refused_with_what_to_do(app, steps, message):
    with pytest.raises(ChainInvalid, match=message):
        build(app, steps)


def test_a_payload_over_the_records_limit_goes_to_s3_for_every_step(app):
    big = {"n": 1, "blob": "x" * app.settings.held_inline_payload_bytes}
    _, jobs = build(app, [("a.add", big), ("a.add", {"n": 1})])
    assert jobs[0].payload_ref is not None and jobs[1].payload_ref is None
    waiting = chain_records.waiting_put("t", jobs[1], token="tok")["Put"]["Item"]
    assert waiting["status"] == {"S": "waiting"} and "payload" in waiting and "attn" not in waiting


def test_the_envelope_carries_the_chain_so_a_batched_claim_rebuilds_the_step(app):
    _, jobs = build(app, [("a.add", {"n": 1}), ("a.add", {"n": 2})])
    body = enqueue.envelope_of(jobs[1]).to_body()
    envelope = Envelope.from_body(body)
    assert envelope.chain == jobs[1].chain and (envelope.chain.step, envelope.chain.steps) == (1, 2)
    fresh = runs.fresh_claim(
        "t",
        envelope,
        owner="w",
        token="tok",
        message_id="m",
        now=NOW,
        lease_s=5,
        max_attempts=3,
        clock_skew_s=1,
    )
    claimed = runs.claimed_job(envelope, fresh)
    assert claimed.chain == jobs[1].chain
    assert codec.job_from_item(enqueue.put_job("t", jobs[1]).item).chain == jobs[1].chain


def test_an_envelope_whose_chain_step_is_not_a_number_is_refused():
    body = '{"v":2,"id":"j1","type":"a.add","queue":"default","payload":{},"hash":"h","created":1,"run_at":1,"step":"x"}'
    with pytest.raises(EnvelopeError, match="chain step"):
        Envelope.from_body(body)


def test_run_job_gives_the_handler_a_previous_result(app):
    assert run_job(app, "a.add", {"n": 2}, previous_result=40).result == 42
    assert run_job(app, "a.add", {"n": 2}).result == 2
