"""An app for worker-process tests: its handler records each attempt in a marker file, then sleeps."""

from __future__ import annotations

import os
import time
from pathlib import Path

from sqsjobs import App, JobContext

app = App(os.environ.get("TEST_APP_NAME", "sleepy"))


@app.job("sleepy", max_attempts=3, timeout=120)
def sleepy(payload: dict[str, object], ctx: JobContext) -> int:
    Path(f"{payload['marker']}.{ctx.attempt}").write_text(ctx.worker_id)
    time.sleep(float(payload["sleep_s"]))  # type: ignore[arg-type]
    return ctx.attempt
