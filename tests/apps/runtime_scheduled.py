"""An app with one declared schedule and a job type runtime schedules fire, for ``sqsjobs dev`` tests.

Each run of ``ticks.record`` writes a file named after its scheduled time into the directory its
payload names, so a test reads which occurrences became jobs without reading the table.
"""

from __future__ import annotations

import os
from pathlib import Path

from sqsjobs import App, JobContext

app = App(os.environ.get("TEST_APP_NAME", "runtime-scheduled"))


@app.job("ticks.record")
def record(payload: dict[str, str], ctx: JobContext) -> None:
    key = (ctx.job.idempotency_key or "none").replace(":", "_").replace("/", "_")
    (Path(payload["dir"]) / key).write_text(ctx.job_id)


app.schedule(
    "declared.nightly", cron="cron(0 3 1 1 ? 2199)", job="ticks.record", payload={"dir": "/nonexistent"}
)
