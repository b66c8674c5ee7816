"""An app for the batch tests (tests/integration/test_batches.py): handlers that leave evidence outside the worker.

Every run appends one JSON line to ``$TEST_RUNS_DIR/runs`` and every completion callback one to
``$TEST_RUNS_DIR/callbacks`` (O_APPEND: concurrent runs in several processes never tear a line), so
a test counts item runs and callback runs from outside the worker processes.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from sqsjobs import App, JobContext, PermanentError

app = App(os.environ.get("TEST_APP_NAME", "batches"))


def log(name: str, line: dict[str, Any]) -> None:
    path = Path(os.environ["TEST_RUNS_DIR"]) / name
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, (json.dumps(line) + "\n").encode())
    finally:
        os.close(fd)


def read(runs_dir: Path, name: str) -> list[dict[str, Any]]:
    path = runs_dir / name
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@app.job("calc", max_attempts=3, timeout=60)
def calc(payload: dict[str, Any], ctx: JobContext) -> int:
    """Doubles ``n``; streams ``stream`` items into batch ``into``; fails for good when ``fail``."""
    log("runs", {"job": ctx.job_id, "type": "calc", "pid": os.getpid(), "at": time.time()})
    time.sleep(float(payload.get("sleep_s", 0)))
    if payload.get("fail"):
        raise PermanentError("told to fail")
    for k in range(int(payload.get("stream", 0))):
        ctx.add_to_batch(
            payload["into"], "calc", {"n": k, **payload.get("child", {})}, dedupe_key=f"{ctx.job_id}-{k}"
        )
    return int(payload.get("n", 0)) * 2


@app.job("report", max_attempts=3, timeout=60)
def report(payload: dict[str, Any], ctx: JobContext) -> None:
    """The completion callback: one line per run, with the payload it got."""
    log("callbacks", {"job": ctx.job_id, "batch": payload["batch_id"], "payload": payload, "at": time.time()})


#: The App the in-process CLI tests load (``--app tests.apps.batches:current``): set by each test.
current: App = app

if os.environ.get("TEST_DIE_AFTER_FINISH"):
    # A crash between an item's finish (landed, with its count) and the batch's completion check:
    # the worker process dies the instant the check would start, as the OOM killer would kill it.
    import signal

    from sqsjobs.batches import plugin as batch_plugin

    def _die(*args: object, **kwargs: object) -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    batch_plugin.after_finish_flow = _die  # type: ignore[assignment]
