"""An app for the per-type hook tests: each hook run appends one line to ``<runs_dir>/<ended job id>``."""

from __future__ import annotations

import os
from pathlib import Path

from sqsjobs import App, Hooks, JobContext, PermanentError

app = App(os.environ.get("TEST_APP_NAME", "hooked"))
RUNS = os.environ.get("TEST_RUNS_DIR", "")


def _record(summary: dict[str, object], hook: str) -> None:
    path = Path(RUNS) / str(summary["job_id"])
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, f"{hook} {summary['status']} {summary['error_class']}\n".encode())
    finally:
        os.close(fd)


@app.job("work", hooks=Hooks(on_succeeded="after_ok", on_dead="after_dead"))
def work(payload: dict[str, int], ctx: JobContext) -> int:
    """Succeeds: its on_succeeded hook runs once."""
    return payload["n"]


@app.job("fail", max_attempts=2, hooks=Hooks(on_dead="after_dead", on_succeeded="after_ok"))
def fail(payload: dict[str, str], ctx: JobContext) -> None:
    """Dies at once: its on_dead hook runs once."""
    raise PermanentError(f"cannot do {payload['what']}")


@app.job("after_ok")
def after_ok(summary: dict[str, object], ctx: JobContext) -> None:
    """The succeeded hook."""
    _record(summary, "after_ok")


@app.job("after_dead")
def after_dead(summary: dict[str, object], ctx: JobContext) -> None:
    """The dead hook."""
    _record(summary, "after_dead")
