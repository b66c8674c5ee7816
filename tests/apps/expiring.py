"""An app for the expiry and bulk cancel tests (tests/integration/test_expiry.py, test_bulk_cancel.py): handlers that leave a run log.

Each run appends one JSON line to ``<runs_dir>/<job id>`` (O_APPEND: concurrent runs never tear a
line), so a test sees from outside the worker whether a handler ran, and how often.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from sqsjobs import App, JobContext, Retry

app = App(os.environ.get("TEST_APP_NAME", "expiring"))

#: The type's bound: a job of ``reports.build`` not started this long after its enqueue expires.
#: 15 s: a job enqueued to a polling worker must start within it, and a loaded run of the suite
#: once took 7.3 s from an enqueue to its start (5 s expired a job the test needed to run).
TYPE_BOUND_S = 15.0


def log_run(payload: dict[str, Any], ctx: JobContext) -> None:
    line = {"attempt": ctx.attempt, "at": time.time(), "pid": os.getpid()}
    fd = os.open(Path(payload["runs_dir"]) / ctx.job_id, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, (json.dumps(line) + "\n").encode())
    finally:
        os.close(fd)


@app.job("reports.build", expires_after=TYPE_BOUND_S, timeout=30)
def build(payload: dict[str, Any], ctx: JobContext) -> None:
    """A type with its own bound."""
    log_run(payload, ctx)


@app.job("reports.free", timeout=300)
def free(payload: dict[str, Any], ctx: JobContext) -> None:
    """A type without a bound: only an enqueue's own ``expires_after`` makes it expire (and bulk cancel's)."""
    log_run(payload, ctx)
    time.sleep(float(payload.get("sleep_s", 0)))


@app.job("reports.flaky", expires_after=5.0, max_attempts=3, timeout=30)
def flaky(payload: dict[str, Any], ctx: JobContext) -> None:
    """Fails its first attempt and asks to be retried after its deadline has passed."""
    log_run(payload, ctx)
    if ctx.attempt == 1:
        raise Retry(delay_s=float(payload["retry_after_s"]))
