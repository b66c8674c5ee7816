"""sqsjobs.testing.run_job: one handler, in-process, judged by the worker's own rules."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import UTC, datetime

import pytest
from pydantic import BaseModel

from sqsjobs import (
    App,
    Backoff,
    Cancel,
    FakeClock,
    HandlerNotFound,
    JobContext,
    JobStatus,
    PayloadInvalid,
    PermanentError,
    Retry,
    RetryPolicy,
)
from sqsjobs.errors import JobTimeout
from sqsjobs.testing import TEST_WORKER_ID, arun_job, make_job, run_job


class Receipt(BaseModel):
    order_id: str
    email: str


RECEIPT = Receipt(order_id="o-1", email="a@b.c")


@pytest.fixture
def app() -> App:
    return App("unit", clock=FakeClock())


def test_a_sync_handler_succeeds_with_its_result_as_the_record_stores_it(app):
    # GIVEN a sync handler returning values JSON cannot hold as they are
    seen: list[tuple[Receipt, str, int, str, str | None]] = []

    @app.job("receipts.send", max_attempts=3)
    def send_receipt(payload: Receipt, ctx: JobContext) -> dict[str, object]:
        seen.append((payload, ctx.job_id, ctx.attempt, ctx.fencing_token, ctx.job.tenant))
        return {"to": payload.email, "at": datetime(2030, 1, 2, tzinfo=UTC), "parts": (1, 2)}

    # WHEN it runs
    run = run_job(app, send_receipt, RECEIPT, tenant="acme", job_id="job-1")

    # THEN it succeeded, got a validated model and a running job's context, and the result is JSON
    assert run.outcome == "succeeded"
    assert run.result == {"to": "a@b.c", "at": "2030-01-02T00:00:00Z", "parts": [1, 2]}
    assert (run.error, run.reason, run.delay_s) == (None, None, None)
    assert seen == [(RECEIPT, "job-1", 1, "job-1:1", "acme")]
    assert (run.job.status, run.job.lease_owner, run.job.max_attempts) == (
        JobStatus.RUNNING,
        TEST_WORKER_ID,
        3,
    )


def test_an_async_handler_runs_on_a_loop_and_can_be_named_by_type(app):
    @app.job("math.double")
    async def double(payload: int, ctx: JobContext) -> int:
        await asyncio.sleep(0)
        return payload * 2

    assert run_job(app, "math.double", 21).result == 42
    assert run_job(app, double, 21).result == 42


def test_arun_job_serves_tests_that_already_run_a_loop(app):
    @app.job("math.double")
    async def double(payload: int, ctx: JobContext) -> int:
        return payload * 2

    async def an_async_test() -> int:
        return (await arun_job(app, double, 4)).result

    assert asyncio.run(an_async_test()) == 8


def test_the_payload_is_dumped_and_read_back_through_json_as_in_production(app):
    # GIVEN a handler taking a model, given a dict (as a producer naming the type by string may)
    received: list[Receipt] = []

    @app.job("receipts.send")
    def send_receipt(payload: Receipt, ctx: JobContext) -> None:
        received.append(payload)

    # WHEN it runs, THEN the handler gets the model the worker would build, and the job the JSON
    assert run_job(app, "receipts.send", {"order_id": "o-1", "email": "a@b.c"}).job.payload == {
        "order_id": "o-1",
        "email": "a@b.c",
    }
    assert received == [RECEIPT]


def test_an_invalid_payload_raises_as_enqueue_would_and_never_runs_the_handler(app):
    calls: list[object] = []

    @app.job("receipts.send")
    def send_receipt(payload: Receipt, ctx: JobContext) -> None:
        calls.append(payload)

    with pytest.raises(PayloadInvalid, match="email: Field required"):
        run_job(app, "receipts.send", {"order_id": "o-1"})
    assert calls == []


def test_an_unregistered_type_or_function_is_refused(app):
    def stray(payload: Receipt, ctx: JobContext) -> None: ...

    with pytest.raises(HandlerNotFound, match=r"no handler registered for job type 'receipts\.send'"):
        run_job(app, "receipts.send", {})
    with pytest.raises(HandlerNotFound, match=r"decorate it with @app\.job"):
        run_job(app, stray, RECEIPT)


def test_an_exception_is_retried_by_the_policy_until_the_last_attempt(app):
    # GIVEN a handler that always fails, with 3 attempts and a fixed 5 s backoff
    @app.job("flaky", max_attempts=3, retry=RetryPolicy(backoff=Backoff.FIXED, base_s=5.0, jitter=False))
    def flaky(payload: None, ctx: JobContext) -> None:
        raise ConnectionError("warehouse API timed out")

    # WHEN attempts 1 and 3 run, THEN the first is retried after the policy's delay, the last is dead
    first, last = run_job(app, flaky, None), run_job(app, flaky, None, attempt=3)
    assert (first.outcome, first.delay_s, first.reason) == ("retry", 5.0, None)
    assert isinstance(first.error, ConnectionError)
    assert (last.outcome, last.reason, last.delay_s) == ("dead", "attempts exhausted (3/3)", None)


def test_retry_sets_its_own_delay(app):
    @app.job("later", max_attempts=3)
    def later(payload: None, ctx: JobContext) -> None:
        raise Retry("not yet", delay_s=42)

    run = run_job(app, later, None)
    assert (run.outcome, run.delay_s) == ("retry", 42)


def test_a_permanent_error_is_dead_at_once(app):
    @app.job("payments.charge", max_attempts=5)
    def charge(payload: None, ctx: JobContext) -> None:
        raise PermanentError("card declined")

    run = run_job(app, charge, None)
    assert (run.outcome, run.reason, str(run.error)) == ("dead", "permanent error", "card declined")


def test_cancel_cancels(app):
    @app.job("mail.launch")
    async def launch(payload: None, ctx: JobContext) -> None:
        raise Cancel("campaign withdrawn")

    run = run_job(app, launch, None)
    assert (run.outcome, run.reason) == ("cancelled", "campaign withdrawn")


def test_an_async_handler_past_its_timeout_is_stopped_and_judged_as_a_failure(app):
    stopped = threading.Event()

    @app.job("slow", timeout=0.05, max_attempts=2)
    async def slow(payload: None, ctx: JobContext) -> None:
        try:
            await asyncio.sleep(10)
        finally:
            stopped.set()

    run = run_job(app, slow, None)
    assert run.outcome == "retry"
    assert isinstance(run.error, JobTimeout)
    assert str(run.error) == "slow ran past its 0.05 s timeout"
    assert stopped.is_set()


def test_a_sync_handler_past_its_timeout_is_abandoned_not_awaited(app):
    # GIVEN a sync handler that outlives its timeout (a thread cannot be killed, as in the worker)
    release = threading.Event()

    @app.job("slow", timeout=0.05, max_attempts=1)
    def slow(payload: None, ctx: JobContext) -> None:
        release.wait(5)

    # WHEN it runs, THEN run_job returns at the timeout with the worker's verdict
    started = time.monotonic()
    try:
        run = run_job(app, slow, None)
        assert time.monotonic() - started < 2
    finally:
        release.set()
    assert (run.outcome, run.reason, type(run.error)) == ("dead", "attempts exhausted (1/1)", JobTimeout)


def test_a_result_that_cannot_be_stored_still_succeeds_with_a_note(app):
    @app.job("odd")
    def odd(payload: None, ctx: JobContext) -> object:
        return object()

    run = run_job(app, odd, None)
    assert run.outcome == "succeeded"
    assert run.result["sqsjobs_note"].startswith("result not JSON-serialisable")


def test_make_job_builds_the_running_job_of_an_attempt(app):
    # GIVEN a registered handler
    @app.job("receipts.send", queue="mail", max_attempts=4)
    def send_receipt(payload: Receipt, ctx: JobContext) -> None: ...

    # WHEN the job of attempt 2 is made
    job = make_job(app, send_receipt, RECEIPT, attempt=2)

    # THEN it looks as the claim leaves it, with the stored (JSON) payload
    now = datetime.fromtimestamp(app.clock.now(), UTC)
    assert (job.type, job.queue, job.status, job.attempt, job.max_attempts) == (
        "receipts.send",
        "mail",
        JobStatus.RUNNING,
        2,
        4,
    )
    assert (job.fencing_token, job.started_at, job.created_at) == (f"{job.id}:2", now, now)
    assert job.payload == {"order_id": "o-1", "email": "a@b.c"}
    with pytest.raises(ValueError, match=r"attempt must be 1\.\.4"):
        make_job(app, send_receipt, RECEIPT, attempt=5)
