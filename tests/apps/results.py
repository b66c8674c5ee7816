"""An app for the waiting tests: a job that returns a result, one that dies, one that naps first."""

from __future__ import annotations

import os
import time

from sqsjobs import App, JobContext, PermanentError

app = App(os.environ.get("TEST_APP_NAME", "results"))


@app.job("add", max_attempts=2, timeout=30)
def add(payload: dict[str, int], ctx: JobContext) -> int:
    """A result the waiter must get back."""
    return payload["a"] + payload["b"]


@app.job("boom", max_attempts=2, timeout=30)
def boom(payload: dict[str, str], ctx: JobContext) -> None:
    """Dies at once: the waiter gets the dead record."""
    raise PermanentError(f"cannot process {payload['what']}")


@app.job("nap", max_attempts=2, timeout=60)
def nap(payload: dict[str, float], ctx: JobContext) -> str:
    """Ends after ``sleep_s``: a wait must still be held when it ends."""
    time.sleep(payload["sleep_s"])
    return "rested"


@app.job("done", max_attempts=2, timeout=30)
def done(payload: dict[str, object], ctx: JobContext) -> None:
    """A batch's completion callback."""
