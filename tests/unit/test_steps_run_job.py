"""``ctx.step`` through ``sqsjobs.testing.run_job``: steps simulated in memory, the worker's rules kept."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from sqsjobs import App, JobContext
from sqsjobs.errors import StepError
from sqsjobs.retry import Backoff, RetryPolicy
from sqsjobs.steps.records import MAX_STEPS, StepRecord, record_step, steps_of
from sqsjobs.testing import make_job, run_job

app = App("steps-unit")
calls: list[str] = []


@app.job("order", max_attempts=3)
def order(payload: dict, ctx: JobContext) -> dict:
    charge = ctx.step("charge", lambda: calls.append("charge") or {"charged": payload["amount"]})
    if payload.get("fail_after_charge"):
        raise RuntimeError("shipping is down")
    ship = ctx.step("ship", lambda: calls.append("ship") or "shipped")
    return {"charge": charge, "ship": ship}


@app.job("async_order", max_attempts=3)
async def async_order(payload: dict, ctx: JobContext) -> list:
    async def charge() -> int:
        await asyncio.sleep(0)
        calls.append("charge")
        return 7

    return [await ctx.step("charge", charge), await ctx.astep("ship", calls.append, "ship")]


@app.job("flaky_step", max_attempts=1)
def flaky_step(payload: dict, ctx: JobContext) -> int:
    def call() -> int:
        calls.append("try")
        if len(calls) < payload["succeed_on"]:
            raise ConnectionError("gateway timeout")
        return len(calls)

    return int(ctx.step("call", call, attempts=3, backoff=RetryPolicy(backoff=Backoff.FIXED, base_s=0.0)))


@app.job("twice")
def twice(payload: dict, ctx: JobContext) -> None:
    ctx.step("a", int)
    ctx.step("a", int)


@app.job("not_json")
def not_json(payload: dict, ctx: JobContext) -> None:
    ctx.step("when", object)


@app.job("many")
def many(payload: dict, ctx: JobContext) -> None:
    for i in range(MAX_STEPS + 1):
        ctx.step(f"s{i}", int)


@pytest.fixture(autouse=True)
def _clear():
    calls.clear()


def test_a_failed_attempt_keeps_its_steps_and_the_next_replays_them_without_calling_them():
    first = run_job(app, "order", {"amount": 5, "fail_after_charge": True})
    assert (first.outcome, first.ran_steps, first.steps) == ("retry", ("charge",), {"charge": {"charged": 5}})
    calls.clear()
    second = run_job(app, "order", {"amount": 5}, attempt=2, steps=first.steps)
    assert second.outcome == "succeeded"
    assert second.result == {"charge": {"charged": 5}, "ship": "shipped"}
    assert calls == ["ship"]
    assert second.ran_steps == ("ship",)


def test_async_handlers_await_ctx_step_and_astep():
    result = run_job(app, "async_order", {})
    assert (result.outcome, result.result, calls) == ("succeeded", [7, None], ["charge", "ship"])
    calls.clear()
    again = run_job(app, "async_order", {}, attempt=2, steps=result.steps)
    assert (again.result, calls) == ([7, None], [])


def test_a_step_retries_its_function_by_its_own_attempts_before_the_job_policy():
    assert run_job(app, "flaky_step", {"succeed_on": 3}).result == 3
    calls.clear()
    failed = run_job(app, "flaky_step", {"succeed_on": 9})
    assert (failed.outcome, type(failed.error), calls) == ("dead", ConnectionError, ["try"] * 3)


def test_a_name_taken_twice_is_a_step_error_that_kills_the_job():
    result = run_job(app, "twice", {})
    assert result.outcome == "dead" and isinstance(result.error, StepError)
    assert "'a' was already taken in this run" in str(result.error)


def test_a_result_that_is_not_json_is_a_step_error_not_a_silent_note():
    result = run_job(app, "not_json", {})
    assert result.outcome == "dead" and isinstance(result.error, StepError)
    assert "not JSON" in str(result.error)


def test_a_job_may_not_take_more_than_max_steps():
    result = run_job(app, "many", {})
    assert isinstance(result.error, StepError) and len(result.steps) == MAX_STEPS


def test_the_step_write_is_fenced_by_the_claim_token_and_reads_back():
    job = make_job(app, "order", {"amount": 1})
    params = record_step("tbl", job, StepRecord("charge", 1.5, 0.25, 1, None), '{"ok":1}').update_item()
    assert params["ConditionExpression"].count("claim_token") == 1
    assert params["ExpressionAttributeValues"][":token"] == {"S": job.claim_token}
    assert "ReturnValuesOnConditionCheckFailure" not in params
    alias = next(k for k, v in params["ExpressionAttributeNames"].items() if v == "step:charge")
    item = {"id": {"S": job.id}, "step:charge": params["ExpressionAttributeValues"][":step"]}
    assert alias in params["UpdateExpression"]
    assert steps_of(item) == {"charge": StepRecord("charge", 1.5, 0.25, 1, {"ok": 1})}


def test_an_unclaimed_job_cannot_record_a_step():
    job = make_job(app, "order", {"amount": 1}).evolve(claim_token=None)
    with pytest.raises(ValueError, match="not claimed"):
        record_step("tbl", job, StepRecord("charge", 0, 0, 1), "1")


@app.job("reminder", max_attempts=1)
def reminder(payload: dict, ctx: JobContext) -> str:
    ctx.step("order", calls.append, "order")
    ctx.sleep(timedelta(days=2))
    ctx.step("remind", calls.append, "remind")
    return "reminded"


def test_a_sleep_ends_the_run_without_an_attempt_and_the_next_run_goes_on_after_it():
    # GIVEN a one-attempt job that takes a step, sleeps two days, then takes another
    first = run_job(app, "reminder", {})
    # THEN the first run ends asleep for two days, its step and the sleep recorded
    assert (first.outcome, first.delay_s, first.ran_steps) == ("asleep", 2 * 86_400, ("order",))
    assert list(first.steps) == ["order", "sleep-1"]
    # WHEN the next run (the same attempt: the sleep used none) gets the recorded steps
    calls.clear()
    second = run_job(app, "reminder", {}, steps=first.steps)
    # THEN it replays the first step and the sleep, and goes on after it
    assert (second.outcome, second.result, calls) == ("succeeded", "reminded", ["remind"])


@app.job("approve", max_attempts=1)
def approve(payload: dict, ctx: JobContext) -> object:
    token = ctx.create_token(timeout=timedelta(hours=1))
    calls.append(token.id)
    return ctx.wait_for_token(token)


def test_a_wait_without_an_answer_leaves_the_run_asleep_and_an_answer_or_a_failure_resumes_it():
    first = run_job(app, "approve", {}, job_id="j-approve")
    assert (first.outcome, calls) == ("asleep", ["j-approve.t1"])
    assert 3_590 < (first.delay_s or 0) <= 3_600
    answered = run_job(
        app, "approve", {}, job_id="j-approve", steps=first.steps, tokens={"j-approve.t1": "yes"}
    )
    assert (answered.outcome, answered.result) == ("succeeded", "yes")
    failed = run_job(
        app, "approve", {}, job_id="j-approve", steps=first.steps, tokens={"j-approve.t1": RuntimeError("no")}
    )
    assert (failed.outcome, type(failed.error).__name__, str(failed.error)) == ("dead", "TokenFailed", "no")
