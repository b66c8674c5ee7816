"""Worker behaviour beyond the invariants: heartbeats, leases, timeouts, cancel, per-queue limits (MiniStack)."""

from __future__ import annotations

import asyncio
import threading
import time

from sqsjobs import Backoff, JobStatus, RetryPolicy
from sqsjobs.runtime.worker import Worker
from sqsjobs.testing import all_finished, awork_until, work_until


def test_the_heartbeat_keeps_a_job_longer_than_its_visibility_timeout_and_lease_with_one_owner(
    ministack_url, make_app
):
    app = make_app(ministack_url, visibility_timeout_s=2, lease_s=2.0)
    runs = []

    @app.job("long", timeout=30)
    def long(payload, ctx):
        runs.append(ctx.worker_id)
        time.sleep(5)  # 2.5 visibility timeouts, 2.5 leases
        return "done"

    app.provision()
    job_id = app.enqueue("long", {})

    async def two_workers() -> None:
        # A second worker polls the same queue the whole time: it would get the message if a heartbeat slipped.
        rival = Worker(app, concurrency=2)
        stop = asyncio.Event()
        rival_task = asyncio.create_task(rival.run(stop))
        try:
            await awork_until(app, all_finished(app, [job_id]), timeout_s=30)
        finally:
            stop.set()
            await rival_task

    asyncio.run(two_workers())
    job = app.get(job_id)
    assert (job.status, job.attempt, job.lease_epoch, job.result) == (JobStatus.SUCCEEDED, 1, 1, "done")
    assert len(runs) == 1


def test_a_handler_past_its_timeout_is_stopped_and_retried(ministack_url, make_app):
    app = make_app(ministack_url)
    calls = []

    @app.job(
        "stuck", timeout=0.5, max_attempts=2, retry=RetryPolicy(backoff=Backoff.FIXED, base_s=0, jitter=False)
    )
    async def stuck(payload, ctx):
        calls.append(ctx.attempt)
        if ctx.attempt == 1:
            await asyncio.sleep(30)
        return "second time lucky"

    app.provision()
    job_id = app.enqueue("stuck", {})
    work_until(app, all_finished(app, [job_id]))
    job = app.get(job_id)
    assert (job.status, job.result, calls) == (JobStatus.SUCCEEDED, "second time lucky", [1, 2])
    assert job.history[0].error.startswith("JobTimeout: stuck ran past its 0.5 s timeout")


def test_a_running_job_sees_a_cancel_request_at_its_next_heartbeat(ministack_url, make_app):
    app = make_app(ministack_url, visibility_timeout_s=3, lease_s=2.0)
    started = threading.Event()

    @app.job("endless", timeout=60)
    async def endless(payload, ctx):
        started.set()
        while True:
            await asyncio.sleep(0.1)

    app.provision()
    job_id = app.enqueue("endless", {})

    def cancel_when_running() -> None:
        started.wait(20)
        assert app.cancel(job_id) == "requested"

    t = threading.Thread(target=cancel_when_running)
    t.start()
    work_until(app, all_finished(app, [job_id]), timeout_s=30)
    t.join()
    job = app.get(job_id)
    assert (job.status, job.reason) == (JobStatus.CANCELLED, "cancelled while running")


def test_a_queue_limit_caps_its_jobs_inside_the_process_limit(ministack_url, make_app):
    app = make_app(ministack_url, queue_concurrency={"serial": 1})
    running, peak = [], []
    lock = threading.Lock()

    @app.job("one.at.a.time", queue="serial")
    def serial(payload, ctx):
        with lock:
            running.append(1)
            peak.append(len(running))
        time.sleep(0.2)
        with lock:
            running.pop()

    app.provision()
    ids = app.enqueue_many([{"type": "one.at.a.time"} for _ in range(4)])
    work_until(app, all_finished(app, ids), concurrency=8)
    assert max(peak) == 1
    assert all(app.get(i).status is JobStatus.SUCCEEDED for i in ids)


def test_shutdown_ends_even_if_a_receive_swallows_its_cancellation(ministack_url, make_app):
    # On Python 3.11, asyncio.wait_for (and libraries built on it) can swallow a cancellation that
    # races a completion (cpython gh-86296); a receive loop relying on cancellation alone then lives
    # on and the drain never ends. Simulate the worst case: every receive swallows its cancellation.
    app = make_app(ministack_url, receive_wait_s=1)
    app.job("noop")(lambda payload, ctx: None)
    app.provision()
    real_arun = app.arun

    async def swallowing_arun(flow):
        try:
            return await real_arun(flow)
        except asyncio.CancelledError:
            return {}  # as if the cancellation had been lost inside the SDK

    app.arun = swallowing_arun

    async def run_then_stop() -> float:
        stop = asyncio.Event()
        task = asyncio.create_task(Worker(app).run(stop))
        await asyncio.sleep(0.5)  # the receive loop is inside its long poll
        stop.set()
        started = time.monotonic()
        await asyncio.wait_for(task, timeout=15)  # before the fix: never returned
        return time.monotonic() - started

    assert asyncio.run(run_then_stop()) < 15
