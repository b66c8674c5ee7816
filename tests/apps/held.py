"""An app for worker-process tests: its job says it started (a marker file), then runs until released.

The test decides when the job ends by creating the release file, so it can look at the worker from
outside while the job is certainly running.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from sqsjobs import App, JobContext

app = App(os.environ.get("TEST_APP_NAME", "held"))

#: The longest a job waits for its release file: a test that forgot it still ends.
MAX_HELD_S = 60.0


@app.job("held", max_attempts=1, timeout=120)
def held(payload: dict[str, str], ctx: JobContext) -> str:
    Path(payload["started"]).write_text(ctx.worker_id)
    deadline = time.monotonic() + MAX_HELD_S
    while not Path(payload["release"]).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return "released"


@app.job("stall", max_attempts=1, timeout=120)
async def stall(payload: dict[str, str], ctx: JobContext) -> str:
    """A broken async handler: it blocks the event loop (time.sleep, not asyncio.sleep) for a while."""
    Path(payload["started"]).write_text(ctx.worker_id)
    time.sleep(float(payload["stall_s"]))  # the stall is the point
    return "stalled"
