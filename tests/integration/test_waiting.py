"""Waiting for a job's end from outside the worker: ``App.wait``/``await_result``, over MiniStack.

The worker is a real ``sqsjobs worker`` process; the waiter is this test process, which never runs a
handler. A wait must hand back a succeeded job's result, a dead job's record, and time out cleanly;
and its reads stay within ``reads_within(timeout)`` however many waiters there are.
"""

from __future__ import annotations

import asyncio
import concurrent.futures

import pytest

from sqsjobs import JobStatus, WaitTimeout
from sqsjobs.store.waiting import reads_within
from tests.integration.helpers import kill_group, wait_until, worker_process

pytestmark = pytest.mark.slow

APP = "tests.apps.results:app"


@pytest.fixture
def app(results_app):
    return results_app


async def closing(app, awaitable):
    """``awaitable``'s result, the App's async clients closed on the loop that opened them."""
    try:
        return await awaitable
    finally:
        await app.aclose()


def get_items(app) -> int:
    return app.requests.counts[("dynamodb", "GetItem")]


def test_a_waiter_gets_the_result_of_a_job_that_succeeds_and_the_record_of_one_that_dies(app):
    # GIVEN two jobs and waiters on them, started before any worker exists
    ok = app.enqueue("add", {"a": 2, "b": 40})
    dead = app.enqueue("boom", {"what": "the invoice"})
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        waits = [pool.submit(app.wait, job_id, timeout=60) for job_id in (ok, dead)]
        wait_until(lambda: get_items(app) >= 4, 10, "both waiters read twice")  # still waiting
        assert not any(w.done() for w in waits)
        # WHEN a worker process runs them
        worker = worker_process(app, APP, concurrency=2)
        try:
            succeeded, died = (w.result(60) for w in waits)
        finally:
            kill_group(worker)
    # THEN the waiters have the final records: the result, and why the other died
    assert succeeded.status is JobStatus.SUCCEEDED
    assert succeeded.result == 42
    assert died.status is JobStatus.DEAD
    assert died.last_error is not None and died.last_error.error_class == "PermanentError"
    assert "the invoice" in died.last_error.message


def test_a_wait_that_runs_out_raises_a_typed_timeout_with_the_record_as_last_read(app):
    # GIVEN a job no worker runs
    job_id = app.enqueue("add", {"a": 1, "b": 1})
    before = get_items(app)
    # WHEN a wait of 1.5 s runs out
    with pytest.raises(WaitTimeout) as raised:
        app.wait(job_id, timeout=1.5)
    # THEN it says where the job is, is a TimeoutError too, and read no more than its bound
    assert raised.value.last.status is JobStatus.QUEUED
    assert isinstance(raised.value, TimeoutError)
    assert raised.value.reads == get_items(app) - before <= reads_within(1.5)
    assert raised.value.waited_s >= 1.5


def test_an_async_waiter_sees_a_job_end_that_another_process_ran(app):
    job_id = app.enqueue("nap", {"sleep_s": 1.0})
    worker = worker_process(app, APP, concurrency=1)
    try:
        job = asyncio.run(closing(app, app.await_result(job_id, timeout=60)))
    finally:
        kill_group(worker)
    assert (job.status, job.result) == (JobStatus.SUCCEEDED, "rested")


def test_a_thousand_concurrent_waiters_read_within_their_bound_and_cost_less_than_their_jobs(
    ministack_url, make_app
):
    # GIVEN 1,000 queued jobs (no worker) and an app that meters DynamoDB's consumed capacity
    from tests.apps import results

    app = make_app(ministack_url, measure_capacity=True)
    app.registry = results.app.registry
    app.provision()
    ids = app.enqueue_many([{"type": "add", "payload": {"a": n, "b": 0}} for n in range(1000)])
    counter = app.requests
    counter.reset()
    # WHEN 1,000 waiters wait 3 s each, at once
    timeout = 3.0

    async def wait_all() -> list[object]:
        waits = (app.await_result(job_id, timeout=timeout) for job_id in ids)
        return await asyncio.gather(*waits, return_exceptions=True)

    outcomes = asyncio.run(closing(app, wait_all()))
    # THEN each timed out, and together they read no more than the bound says
    assert all(isinstance(o, WaitTimeout) for o in outcomes)
    reads = counter.counts[("dynamodb", "GetItem")]
    units = counter.units("read")
    bound = reads_within(timeout)
    print(
        f"\n1000 waiters x {timeout:g} s: {reads} GetItem ({reads / 1000:.2f} per waiter, bound {bound}), "
        f"{units:g} read units ({units / 1000:.2f} per waiter)"
    )
    assert 1000 <= reads <= 1000 * bound
    assert sum(o.reads for o in outcomes) == reads  # type: ignore[union-attr]
    # one strong read (1 unit), the rest eventually consistent (0.5 unit)
    assert units == pytest.approx(1000 * 1.0 + (reads - 1000) * 0.5)
    # a read unit costs a fifth of a write unit: the waits cost less than the jobs' own 3 writes each
    assert units / 5 < 3 * 1000


def test_a_batch_and_a_chain_are_waited_for_until_they_complete(app):
    # GIVEN a sealed batch of three items and a chain of two steps, waited for before any worker runs
    batch = app.batches.create("done")
    for n in range(3):
        batch.add("add", {"a": n, "b": 1})
    batch.seal()
    chain_id = app.chains.start([("add", {"a": 1, "b": 1}), ("nap", {"sleep_s": 0.2})])
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        batch_wait = pool.submit(app.batches.wait, batch.id, timeout=60)
        chain_wait = pool.submit(app.chains.wait, chain_id, timeout=60)
        with pytest.raises(WaitTimeout):
            app.chains.wait(chain_id, timeout=0.5)  # nothing runs them yet
        assert not batch_wait.done() and not chain_wait.done()
        # WHEN a worker process runs them
        worker = worker_process(app, APP, concurrency=2)
        try:
            finished_batch, finished_chain = batch_wait.result(60), chain_wait.result(60)
        finally:
            kill_group(worker)
    # THEN the batch is complete with its counts, and the chain succeeded
    assert finished_batch.status == "complete"
    assert finished_batch.counts["succeeded"] == 3
    assert finished_chain.status == "succeeded"
