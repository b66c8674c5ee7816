"""An app for the DLQ reconciler tests (tests/integration/test_dlq_reconciler.py).

One attempt per job, so ``sqsjobs provision`` accepts a redrive after two receives
(``SQSJOBS_MAX_RECEIVE_COUNT=2``); each run appends a line to ``<runs_dir>/<job id>``.
"""

from __future__ import annotations

import os
from pathlib import Path

from sqsjobs import App, JobContext, PermanentError

app = App(os.environ.get("TEST_APP_NAME", "redriven"))


def _record_run(payload: dict[str, str], ctx: JobContext) -> None:
    with Path(payload["runs_dir"], ctx.job_id).open("a") as f:
        f.write(f"{ctx.attempt}\n")


@app.job("count", max_attempts=1, timeout=60)
def count(payload: dict[str, str], ctx: JobContext) -> None:
    """Records its run."""
    _record_run(payload, ctx)


@app.job("device.count", queue="device", max_attempts=1, timeout=60)
def device_count(payload: dict[str, str], ctx: JobContext) -> None:
    """Records its run; enqueued with a serialize key, it goes through the FIFO queue."""
    _record_run(payload, ctx)


@app.job("broken", max_attempts=1, timeout=60)
def broken(payload: dict[str, str], ctx: JobContext) -> None:
    """Dies at once: a dead job with a worker's DLQ copy."""
    raise PermanentError("broken on purpose")
