"""An app for the black-box guarantee tests: handlers that leave evidence outside the process.

Each run appends one line to ``<runs_dir>/<job id>`` (O_APPEND, so concurrent runs never tear a
line); a test counts lines to count handler runs, whatever the worker believes it did.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from sqsjobs import App, JobContext

app = App(os.environ.get("TEST_APP_NAME", "guarantees"))


def _record_run(payload: dict[str, object], ctx: JobContext) -> None:
    path = Path(str(payload["runs_dir"])) / ctx.job_id
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, f"{ctx.attempt} {ctx.worker_id} {os.getpid()}\n".encode())
    finally:
        os.close(fd)


@app.job("count", max_attempts=3, timeout=60)
def count(payload: dict[str, object], ctx: JobContext) -> int:
    """Records its run, then stays busy long enough for a second concurrent run to overlap it."""
    _record_run(payload, ctx)
    time.sleep(float(payload.get("sleep_s", 0.3)))  # type: ignore[arg-type]
    return ctx.attempt


@app.job("sleepy", max_attempts=3, timeout=120)
def sleepy(payload: dict[str, object], ctx: JobContext) -> int:
    """Records its run and sleeps: long enough to be killed mid-job."""
    _record_run(payload, ctx)
    time.sleep(float(payload["sleep_s"]))  # type: ignore[arg-type]
    return ctx.attempt


@app.job("suicidal", max_attempts=3, timeout=60)
def suicidal(payload: dict[str, object], ctx: JobContext) -> None:
    """Kills its own process mid-run, as the OOM killer would: no exception, no cleanup."""
    _record_run(payload, ctx)
    os._exit(137)


@app.job("flaky", max_attempts=4, timeout=60)
def flaky(payload: dict[str, object], ctx: JobContext) -> int:
    """Fails its first attempt, succeeds after."""
    _record_run(payload, ctx)
    if ctx.attempt == 1:
        raise RuntimeError("first attempt fails")
    return ctx.attempt


@app.job("nothing", max_attempts=3, timeout=60)
def nothing(payload: object, ctx: JobContext) -> None:
    """Takes any payload, ``null`` included, and leaves no evidence: for tests about messages only."""
