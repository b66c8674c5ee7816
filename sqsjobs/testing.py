"""Helpers for tests, yours and ours: run a real worker against an endpoint until a condition holds.

There is no in-memory imitation of SQS or DynamoDB here: point the App at an emulator
(``sqsjobs.local.emulator.EmbeddedMoto``, MiniStack, LocalStack) and the real code path runs.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from sqsjobs.runtime.sweeper import run_sweeper
from sqsjobs.runtime.worker import Worker

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from sqsjobs.app import App


def all_finished(app: App, job_ids: Iterable[str]) -> Callable[[], bool]:
    """A condition: every job is in a terminal state."""
    ids = list(job_ids)

    def check() -> bool:
        return all(app.get(i).status.terminal for i in ids)

    return check


async def awork_until(
    app: App,
    done: Callable[[], bool],
    *,
    timeout_s: float = 30.0,
    concurrency: int | None = None,
    queues: list[str] | None = None,
    sweep: bool = False,
    poll_s: float = 0.1,
) -> Worker:
    """Run a worker (and optionally the sweeper) until ``done()`` is true; TimeoutError otherwise."""
    worker = Worker(app, queues=queues, concurrency=concurrency)
    stop = asyncio.Event()
    tasks = [asyncio.create_task(worker.run(stop))]
    if sweep:
        tasks.append(asyncio.create_task(run_sweeper(app, stop)))
    deadline = time.monotonic() + timeout_s
    try:
        while not await asyncio.to_thread(done):
            if time.monotonic() > deadline:
                raise TimeoutError(f"condition not met within {timeout_s} s")
            if tasks[0].done():
                tasks[0].result()  # surface a crashed worker
            await asyncio.sleep(poll_s)
    finally:
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=False)
    return worker


def work_until(app: App, done: Callable[[], bool], **kwargs: object) -> Worker:
    """Sync ``awork_until``."""
    return asyncio.run(awork_until(app, done, **kwargs))  # type: ignore[arg-type]
