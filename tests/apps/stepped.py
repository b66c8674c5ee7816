"""An app of stepped jobs whose steps leave evidence outside the process (tests/integration/test_steps.py).

Each step's function appends one line to ``<runs_dir>/<job id>.<step>`` (O_APPEND): a test counts
lines to count the calls of each step's function, whatever the worker believes it did.
"""

from __future__ import annotations

import asyncio
import os
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from sqsjobs import App, JobContext

app = App(os.environ.get("TEST_APP_NAME", "stepped"))
app.limit("solo", concurrency=1)


def mark(runs_dir: str, job_id: str, step: str, attempt: int) -> dict[str, Any]:
    """Record one call of a step's function; its result says which process and attempt made it."""
    fd = os.open(Path(runs_dir) / f"{job_id}.{step}", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, f"{attempt} {os.getpid()}\n".encode())
    finally:
        os.close(fd)
    return {"step": step, "pid": os.getpid(), "attempt": attempt}


@app.job("five_steps", max_attempts=3, timeout=60)
def five_steps(payload: dict[str, Any], ctx: JobContext) -> list[Any]:
    """Five steps; step 4 of the first attempt sleeps ``hang_s`` (long enough to be killed inside it)."""
    runs_dir = str(payload["runs_dir"])
    results = []
    for n in range(1, 6):

        def work(n: int = n) -> dict[str, Any]:
            result = mark(runs_dir, ctx.job_id, f"s{n}", ctx.attempt)
            if n == 4 and ctx.attempt == 1:
                time.sleep(float(payload.get("hang_s", 0)))
            time.sleep(float(payload.get("step_s", 0)))
            return result

        results.append(ctx.step(f"s{n}", work))
    return results


@app.job("async_steps", max_attempts=3, timeout=20)
async def async_steps(payload: dict[str, Any], ctx: JobContext) -> list[Any]:
    """Three steps of an async handler, awaited: a coroutine function, a sync one, and ``astep``."""
    runs_dir = str(payload["runs_dir"])

    async def first() -> dict[str, Any]:
        await asyncio.sleep(float(payload.get("step_s", 0)))
        return mark(runs_dir, ctx.job_id, "a1", ctx.attempt)

    one = await ctx.step("a1", first)
    two = await ctx.step("a2", mark, runs_dir, ctx.job_id, "a2", ctx.attempt)
    three = await ctx.astep("a3", mark, runs_dir, ctx.job_id, "a3", ctx.attempt)
    if payload.get("fail_first") and ctx.attempt == 1:
        raise RuntimeError("the first attempt fails after its steps")
    return [one, two, three]


@app.job("big_step", max_attempts=2, timeout=60)
def big_step(payload: dict[str, Any], ctx: JobContext) -> int:
    """A step whose result is over the inline limit (kept in S3), replayed by a second attempt."""
    blob = ctx.step(
        "blob", lambda: mark(str(payload["runs_dir"]), ctx.job_id, "blob", ctx.attempt) | {"x": "y" * 5000}
    )
    if ctx.attempt == 1:
        raise RuntimeError("fail once after the step")
    return len(blob["x"])


@app.job("same_name_twice", max_attempts=3, timeout=10)
def same_name_twice(payload: dict[str, Any], ctx: JobContext) -> None:
    """Takes one step name twice: a StepError, the job dead at once."""
    ctx.step("charge", lambda: 1)
    ctx.step("charge", lambda: 2)


@app.job("sleeper", max_attempts=1, timeout=20)
def sleeper(payload: dict[str, Any], ctx: JobContext) -> list[Any]:
    """A step, a durable sleep, a step: one attempt is all it may use."""
    runs_dir = str(payload["runs_dir"])
    before = ctx.step("before", mark, runs_dir, ctx.job_id, "before", ctx.attempt)
    ctx.sleep(timedelta(seconds=float(payload["sleep_s"])))
    after = ctx.step("after", mark, runs_dir, ctx.job_id, "after", ctx.attempt)
    return [before, after]


@app.job("async_sleeper", max_attempts=1, timeout=20)
async def async_sleeper(payload: dict[str, Any], ctx: JobContext) -> list[Any]:
    """``sleeper`` for an async handler."""
    runs_dir = str(payload["runs_dir"])
    before = await ctx.step("before", mark, runs_dir, ctx.job_id, "before", ctx.attempt)
    await ctx.sleep(float(payload["sleep_s"]))
    after = await ctx.step("after", mark, runs_dir, ctx.job_id, "after", ctx.attempt)
    return [before, after]


@app.job("solo_sleeper", max_attempts=1, timeout=20, limits=["solo"])
def solo_sleeper(payload: dict[str, Any], ctx: JobContext) -> list[Any]:
    """``sleeper`` under a limit of one slot; awake again, its last step holds the slot ``hold_s``."""
    runs_dir = str(payload["runs_dir"])
    before = ctx.step("before", mark, runs_dir, ctx.job_id, "before", ctx.attempt)
    ctx.sleep(timedelta(seconds=float(payload["sleep_s"])))
    after = ctx.step("after", mark, runs_dir, ctx.job_id, "after", ctx.attempt)
    time.sleep(float(payload["hold_s"]))
    return [before, after]


@app.job("solo", timeout=20, limits=["solo"])
def solo(payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    """A job of the same one-slot limit."""
    return mark(str(payload["runs_dir"]), ctx.job_id, "solo", ctx.attempt)


@app.job("barrier", timeout=30)
def barrier(payload: dict[str, Any], ctx: JobContext) -> int:
    """Marks its start, then waits until ``of`` barrier jobs started: it succeeds only if they run at once."""
    runs_dir = Path(str(payload["runs_dir"]))
    mark(str(runs_dir), ctx.job_id, "barrier", ctx.attempt)
    while len(list(runs_dir.glob("*.barrier"))) < int(payload["of"]):
        time.sleep(0.05)
    return int(payload["of"])


def publish(runs_dir: str, job_id: str, token_id: str, path: str) -> str:
    """Hand the token's id and its URL's path out (files the test reads, as an email would carry them)."""
    (Path(runs_dir) / f"{job_id}.path").write_text(path)
    (Path(runs_dir) / f"{job_id}.token").write_text(token_id)
    return token_id


@app.job("approval", max_attempts=1, timeout=20)
def approval(payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    """Charge, wait for a person's decision (a token), then ship: an order that needs an approval."""
    runs_dir = str(payload["runs_dir"])
    ctx.step("charge", mark, runs_dir, ctx.job_id, "charge", ctx.attempt)
    token = ctx.create_token(timeout=float(payload["timeout_s"]))
    ctx.step("publish", publish, runs_dir, ctx.job_id, token.id, token.path)
    decision = ctx.wait_for_token(token)
    ctx.step("ship", mark, runs_dir, ctx.job_id, "ship", ctx.attempt)
    return {"decision": decision}
