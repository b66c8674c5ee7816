"""An app for the routing tests (tests/integration/test_routing.py): priorities and serialize keys.

Each run appends one JSON line to the payload's ``log`` file (O_APPEND: concurrent runs of several
worker processes never tear a line) with ``time.monotonic()`` stamps at its start and end: the
clock is one per host, so runs of different processes compare. The test reads start order, overlap
and attempts from outside the workers.
"""

from __future__ import annotations

import json
import os
import time

from sqsjobs import App, JobContext, RetryPolicy

app = App(os.environ.get("TEST_APP_NAME", "routing"))


def _log(payload: dict, ctx: JobContext, suffix: str = "", **fields: object) -> None:
    line = {"label": payload["label"], "attempt": ctx.attempt, "pid": os.getpid(), **fields}
    fd = os.open(payload["log"] + suffix, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, (json.dumps(line) + "\n").encode())
    finally:
        os.close(fd)


def _run(payload: dict, ctx: JobContext) -> None:
    start = time.monotonic()
    _log(payload, ctx, ".started", start=start)  # a test can wait for a start it then races against
    time.sleep(payload.get("sleep", 0.0))
    failing = payload.get("fail_once") and ctx.attempt == 1
    _log(payload, ctx, start=start, end=time.monotonic(), failed=bool(failing))
    if failing:
        raise RuntimeError("fails once, on purpose")


@app.job("work.run", queue="work", retry=RetryPolicy(base_s=1.0, jitter=False))
def work(payload: dict, ctx: JobContext) -> None:
    """A job of a queue with priority levels."""
    _run(payload, ctx)


@app.job("device.command", queue="device", retry=RetryPolicy(base_s=1.0, jitter=False))
def command(payload: dict, ctx: JobContext) -> None:
    """A job of a queue with serialize keys; ``fail_once`` fails its first attempt (the retry keeps its place)."""
    _run(payload, ctx)
