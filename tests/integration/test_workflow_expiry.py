"""A job that ends without a run still ends its part of a workflow, over HTTP on MiniStack.

An expired batch item counts as failed (or its batch would wait for it forever), an expired chain
step stops its chain, and a chain step's ``expires_after`` counts from when it may start — not from
the chain's creation, which would expire a later step of any chain slower than its bound.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

import pytest

from sqsjobs import JobStatus
from sqsjobs.chains.plugin import ChainHook
from sqsjobs.runtime.execution import Execution
from sqsjobs.runtime.sweeper import sweep
from sqsjobs.testing import work_until
from sqsjobs.transport import sqs
from tests.apps import chains as chain_app
from tests.integration.helpers import queue_url, sqs_call, worker_env

pytestmark = pytest.mark.slow


@pytest.fixture
def app(ministack_url, make_app):
    app = make_app(ministack_url, lease_s=3.0, visibility_timeout_s=2)

    @app.job("wf.item")
    def item(payload: dict, ctx) -> int:
        return int(payload.get("n", 0))

    @app.job("wf.done")
    def done(payload: dict, ctx) -> dict:
        return payload["counts"]

    @app.job("wf.slow")
    def slow(payload: dict, ctx) -> str:
        time.sleep(payload["sleep_s"])
        return "slept"

    # 5 s from its unblock to its claim: room for a loaded machine; step 1 below takes longer.
    @app.job("wf.quick", expires_after=5)
    def quick(payload: dict, ctx) -> str:
        return f"after {ctx.previous_result}"

    @app.job("wf.elsewhere", queue="elsewhere", expires_after=1)
    def elsewhere(payload: dict, ctx) -> str:
        return "ran"

    app.provision(["default", "elsewhere"])
    return app


def wait_past(deadline: float) -> None:
    while time.time() <= deadline + 0.1:
        time.sleep(0.1)


def test_an_expired_batch_item_counts_as_failed_and_its_batch_completes_once(app):
    batch = app.batches.create("wf.done")
    ran = batch.add("wf.item", {"n": 1})
    late = batch.add("wf.item", {"n": 2}, expires_after=1)
    batch.seal()
    wait_past(app.get(late).start_by.timestamp())  # no worker ran before its deadline

    def completed() -> bool:
        st = app.batches.get(batch.id)
        return (
            st.status == "complete" and st.callback_id is not None and app.get(st.callback_id).status.terminal
        )

    work_until(app, completed, timeout_s=60)
    st = app.batches.get(batch.id)
    assert app.get(late).status is JobStatus.EXPIRED
    assert app.get(ran).status is JobStatus.SUCCEEDED
    assert st.counts == {"pending": 0, "succeeded": 1, "failed": 1}
    callback = app.get(st.callback_id)
    assert callback.status is JobStatus.SUCCEEDED and callback.attempt == 1
    assert callback.result == st.counts


def test_a_chain_steps_deadline_counts_from_when_it_may_start(app):
    # GIVEN step 2's type expires 5 s after it may start, and step 1 takes longer than that
    chain_id = app.chains.start([("wf.slow", {"sleep_s": 6}), ("wf.quick", {})])
    # THEN step 2 still runs once step 1 succeeded: its deadline counts from its unblock
    work_until(app, lambda: app.chains.get(chain_id).status != "running", timeout_s=60)
    chain = app.chains.get(chain_id)
    assert chain.status == "succeeded", chain
    assert app.get(chain.steps[1].job_id).result == "after slept"


def test_an_expired_chain_step_stops_its_chain(app):
    # GIVEN a chain whose second step runs on a queue no worker serves until after its deadline
    chain_id = app.chains.start([("wf.item", {"n": 1}), ("wf.elsewhere", {}), ("wf.item", {"n": 3})])
    first, second, third = (s.job_id for s in app.chains.get(chain_id).steps)
    work_until(app, lambda: app.get(second).status is JobStatus.QUEUED, queues=["default"], timeout_s=60)
    wait_past(app.get(second).start_by.timestamp())
    # WHEN a worker of both queues meets its message
    work_until(app, lambda: app.chains.get(chain_id).status != "running", queues=["default", "elsewhere"])
    # THEN it expired without a run, the chain stopped there, and the step after it never runs
    chain = app.chains.get(chain_id)
    assert app.get(first).status is JobStatus.SUCCEEDED
    assert app.get(second).status is JobStatus.EXPIRED and app.get(second).result is None
    assert chain.status == "stopped" and chain.stopped_at == 1, chain
    assert "expired" in (chain.reason or "")
    work_until(app, lambda: app.get(third).status is not JobStatus.WAITING, timeout_s=20)
    assert app.get(third).status is JobStatus.CANCELLED


def test_a_held_batch_item_the_sweeper_expires_counts_as_failed(app):
    # GIVEN a sealed batch whose one item is held (due in 1,000 s) and expires 1 s after it is due
    batch = app.batches.create("wf.done")
    held = batch.add("wf.item", {"n": 1}, delay=1000, expires_after=1001)
    batch.seal()
    # WHEN the sweeper first reaches it after its deadline (its clock 1,002 s ahead)
    report = sweep(app, now=time.time() + 1002)
    # THEN it expired instead of being sent, counted failed with it, and the batch completed
    assert report.expired == [held] and report.dispatched_held == []
    assert app.get(held).status is JobStatus.EXPIRED
    st = app.batches.get(batch.id)
    assert st.counts == {"pending": 0, "succeeded": 0, "failed": 1}
    assert st.status == "complete" and st.callback_id is not None


def test_a_chain_step_the_sweeper_expires_stops_its_chain(ministack_url, make_app, tmp_path):
    # GIVEN a 3-step chain whose step 1 must start within 2 s of when it may
    app = make_app(ministack_url, lease_s=3.0, visibility_timeout_s=2, stale_after_s=1.0)
    app.registry.include(chain_app.app.registry)  # the handlers the sweeper process loads
    app.provision()
    runs = str(tmp_path)
    steps = [
        ("chain.add", {"name": "a", "add": 1, "runs_dir": runs}),
        ("chain.quick", {"runs_dir": runs}),
        ("chain.add", {"name": "c", "add": 3, "runs_dir": runs}),
    ]
    chain_id = app.chains.start(steps)
    first, second, third = (s.job_id for s in app.chains.get(chain_id).steps)

    class LosesTheHint(ChainHook):
        async def landed(self, finish):  # the worker dies right after step 0's commit: step 1's hint is lost
            return None

    # AND step 0 run by a worker that dies between its commit and step 1's hint
    url = queue_url(app)
    response = sqs_call(app, "receive_message", **sqs.receive(url, max_messages=1, wait_s=20))
    (delivery,) = sqs.deliveries("default", url, response)

    async def run_once():
        try:
            return await Execution(app, "w-lost", hooks=[LosesTheHint(app)]).handle(delivery)
        finally:
            await app.aclose()

    assert asyncio.run(run_once()).kind == "delete"
    sqs_call(app, "delete_message", QueueUrl=url, ReceiptHandle=delivery.receipt_handle)
    assert app.get(first).status is JobStatus.SUCCEEDED and app.get(second).status is JobStatus.QUEUED
    wait_past(app.get(second).start_by.timestamp() + 1.0)  # past its deadline and its pending entry's due
    # WHEN the sweeper runs once
    sweep = [sys.executable, "-m", "sqsjobs", "sweep", "--once", "--app", "tests.apps.chains:app"]
    env = worker_env(app, SQSJOBS_STALE_AFTER_S="1")
    subprocess.run(sweep, env=env, check=True, capture_output=True, timeout=120)
    # THEN step 1 expired, the chain stopped there, and the step after it will never run
    assert app.get(second).status is JobStatus.EXPIRED
    chain = app.chains.get(chain_id)
    assert chain.status == "stopped" and chain.stopped_at == 1, chain
    assert "expired" in (chain.reason or "")
    assert app.get(third).status is JobStatus.CANCELLED
    assert app.chains.cancel(chain_id) == "stopped"
