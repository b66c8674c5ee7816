"""An app for the Lambda tests: one handler per outcome the partial batch response must express.

Deployed to MiniStack by tests/e2e (``SQSJOBS_APP=tests.apps.lambda_app:app``), and run in-process by
tests/integration/test_lambda_sqs.py, which include its registry in their own uniquely named Apps.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from sqsjobs import App, JobContext, PermanentError, Retry

app = App(os.environ.get("TEST_APP_NAME", "lambda-test"))


@app.job("ok", timeout=5)
def ok(payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    return {"echo": payload.get("n"), "attempt": ctx.attempt}


@app.job("flaky", max_attempts=3, timeout=5)
def flaky(payload: dict[str, Any], ctx: JobContext) -> str:
    if ctx.attempt == 1:
        raise Retry("the first attempt always fails", delay_s=float(payload.get("delay_s", 1)))
    return f"ok on attempt {ctx.attempt}"


@app.job("boom", max_attempts=3, timeout=5)
def boom(payload: dict[str, Any], ctx: JobContext) -> None:
    raise PermanentError(f"cannot process order {payload.get('order')}")


@app.job("slow", timeout=30)
def slow(payload: dict[str, Any], ctx: JobContext) -> str:
    return "a 30 s timeout does not fit a short invocation"


@app.job("plain")
def plain(payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    """No explicit timeout: on Lambda its deadline is the invocation's remaining time."""
    return {"echo": payload.get("n"), "deadline": ctx.deadline}


@app.job("nap")
async def nap(payload: dict[str, Any], ctx: JobContext) -> str:
    """No explicit timeout; sleeps ``sleep_s`` (cancelled at its deadline: it is async)."""
    await asyncio.sleep(float(payload.get("sleep_s", 0)))
    return "woke up"
