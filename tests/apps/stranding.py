"""An app for the stranding tests: jobs where two features meet, leaving evidence outside the process.

Each run appends ``<job id> <attempt>`` to the payload's ``runs`` file (O_APPEND: runs of several
worker processes never tear a line), so a test counts runs whatever the workers believe.
"""

from __future__ import annotations

import os
import time

from sqsjobs import App, JobContext

app = App(os.environ.get("TEST_APP_NAME", "stranding"))
app.limit("one", concurrency=1)


def _record(payload: dict[str, object], ctx: JobContext) -> None:
    fd = os.open(str(payload["runs"]), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, f"{ctx.job_id} {ctx.attempt}\n".encode())
    finally:
        os.close(fd)


@app.job("hold", limits=["one"], timeout=120)
def hold(payload: dict[str, object], ctx: JobContext) -> None:
    """Holds the limit's only slot for ``sleep_s``."""
    _record(payload, ctx)
    time.sleep(float(payload["sleep_s"]))  # type: ignore[arg-type]


@app.job("device.step", queue="device", limits=["one"], timeout=60)
def step(payload: dict[str, object], ctx: JobContext) -> None:
    """A serialized job under the same limit."""
    _record(payload, ctx)
