"""An app for the chain tests (tests/integration/test_chains.py): handlers that leave evidence outside the process.

Each run appends one JSON line to ``<runs_dir>/<job id>`` (O_APPEND: concurrent runs never tear a
line) saying which step ran, on which attempt, in which process, and what ``ctx.previous_result``
it saw, so a test counts runs and checks their order from outside the worker.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from sqsjobs import App, JobContext, PermanentError

app = App(os.environ.get("TEST_APP_NAME", "chains"))


def record_run(payload: dict[str, Any], ctx: JobContext) -> None:
    line = {
        "step": ctx.job.chain.step if ctx.job.chain else None,
        "attempt": ctx.attempt,
        "pid": os.getpid(),
        "previous": ctx.previous_result,
        "at": time.time(),
    }
    fd = os.open(Path(payload["runs_dir"]) / ctx.job_id, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, (json.dumps(line) + "\n").encode())
    finally:
        os.close(fd)


@app.job("chain.add", max_attempts=3, timeout=60)
def add(payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    """Adds ``add`` to the previous step's total and appends its name to the path: the result shows the order."""
    record_run(payload, ctx)
    time.sleep(float(payload.get("sleep_s", 0)))
    previous = ctx.previous_result or {"total": 0, "path": []}
    return {"total": previous["total"] + int(payload["add"]), "path": [*previous["path"], payload["name"]]}


@app.job("chain.quick", queue="later", expires_after=2, timeout=60)
def quick(payload: dict[str, Any], ctx: JobContext) -> str:
    """A step that must start within 2 s of when it may, on a queue of its own (a worker may leave it unread)."""
    record_run(payload, ctx)
    return "quick"


@app.job("chain.boom", max_attempts=1, timeout=60)
def boom(payload: dict[str, Any], ctx: JobContext) -> None:
    """Dies at once (no retry)."""
    record_run(payload, ctx)
    raise PermanentError(f"boom at {payload['name']}")


@app.job("chain.big", max_attempts=3, timeout=60)
def big(payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    """Returns a result too large for the record (an S3 object), and echoes the size of its own payload."""
    record_run(payload, ctx)
    return {"blob": "r" * int(payload["result_bytes"]), "payload_bytes": len(payload.get("blob", ""))}


@app.job("chain.measure", max_attempts=3, timeout=60)
def measure(payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    """Reports the previous result's and its own payload's sizes."""
    record_run(payload, ctx)
    previous = ctx.previous_result or {}
    return {"previous_blob": len(previous.get("blob", "")), "payload_blob": len(payload.get("blob", ""))}
