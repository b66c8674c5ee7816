"""An idle worker starts a job after one long-poll wake-up plus its claim (the cost budget: README, "What it costs"), nothing else (MiniStack).

Two delays the worker used to add: a receive that waited for running jobs to finish, to fill a
batch, even when the queue had nothing more to give; and the next long poll built, signed and sent
before the claim of the message it had just received.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from sqsjobs.runtime.worker import Worker
from sqsjobs.testing import all_finished, awork_until


def test_a_job_enqueued_while_another_runs_starts_at_once_when_the_queue_has_no_backlog(
    ministack_url, make_app
):
    # A batch-filling wait far longer than the test: only a worker that skips it passes.
    app = make_app(ministack_url, receive_gather_s=30.0)
    started: dict[str, float] = {}
    release = threading.Event()

    @app.job("slow", timeout=60)
    def slow(payload: Any, ctx: Any) -> None:
        started["slow"] = time.monotonic()
        release.wait(30)

    @app.job("quick")
    def quick(payload: Any, ctx: Any) -> None:
        started["quick"] = time.monotonic()

    app.provision()
    slow_id = app.enqueue("slow", {})
    enqueued: dict[str, float] = {}
    quick_ids: list[str] = []

    def quick_started() -> bool:
        if "slow" in started and not enqueued:
            enqueued["quick"] = time.monotonic()
            quick_ids.append(app.enqueue("quick", {}))
        if "quick" in started:
            release.set()
            return True
        return False

    # Concurrency 4 with one job running: 3 free slots, fewer than a full batch of 4.
    asyncio.run(awork_until(app, quick_started, concurrency=4, timeout_s=45))
    release.set()
    assert started["quick"] - enqueued["quick"] < 5.0, "the receive waited for the running job"
    assert all_finished(app, [slow_id, *quick_ids])()


def test_an_idle_worker_sends_the_claim_before_its_next_long_poll(ministack_url, make_app):
    app = make_app(ministack_url)
    done = threading.Event()

    @app.job("noop")
    def noop(payload: Any, ctx: Any) -> None:
        done.set()

    app.provision()
    job_id = app.enqueue("noop", {})
    sent: list[str] = []

    async def scenario() -> None:
        # The worker's own clients, made on this loop before it starts: every request it sends is seen.
        for service in ("sqs", "dynamodb"):
            client = await app.clients.aiobotocore.get(service)
            client.meta.events.register(
                "before-send.*.*", lambda event_name, **kwargs: sent.append(event_name.rsplit(".", 1)[1])
            )
        # Concurrency 32: free slots for a full batch at once, so nothing else delays the next poll.
        await awork_until(app, all_finished(app, [job_id]), concurrency=32)

    asyncio.run(scenario())
    order = [op for op in sent if op in ("ReceiveMessage", "UpdateItem")]
    # The receive that brought the job, its claim, then the next poll (and the completion).
    assert order[:3] == ["ReceiveMessage", "UpdateItem", "ReceiveMessage"], order
    assert done.is_set()


def test_a_worker_with_a_backlog_still_fills_its_receives(ministack_url, make_app):
    # Under load the batch-filling wait stays: receives take full batches, not one message each.
    app = make_app(ministack_url, receive_gather_s=0.5)

    @app.job("short")
    def short(payload: Any, ctx: Any) -> None:
        time.sleep(0.05)

    app.provision()
    ids = app.enqueue_many([{"type": "short", "payload": {"i": i}} for i in range(60)])
    app.requests.reset()

    async def drain() -> Worker:
        return await awork_until(app, all_finished(app, ids), concurrency=5, timeout_s=60)

    asyncio.run(drain())
    receives = app.requests.counts[("sqs", "ReceiveMessage")]
    # 60 jobs in batches of up to 5: 12 full receives, a few short ones at the tail, and the polls
    # that came back empty after the drain (one per second, FAST's wait) — far below one per job.
    assert receives <= 30, receives
