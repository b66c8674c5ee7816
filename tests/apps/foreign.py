"""An app for the tests of messages sent from outside sqsjobs (tests/integration/test_foreign_messages.py).

The handler takes a model, so a run shows the payload as its handler validated it (``"42"`` arrives
as ``42``, a default filled in), and appends one JSON line per run to ``<runs_dir>/<job id>``
(O_APPEND: concurrent runs never tear a line), so a test counts runs from outside the worker.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from pydantic import BaseModel

from sqsjobs import App, JobContext

app = App(os.environ.get("TEST_APP_NAME", "foreign"))


class Shipment(BaseModel):
    order_id: int
    runs_dir: str
    express: bool = False


@app.job("orders.ship", max_attempts=2, timeout=30)
def ship(payload: Shipment, ctx: JobContext) -> int:
    """Leaves one line per run: the validated payload, the attempt, the tenant and the time it started."""
    line = {
        "payload": payload.model_dump(),
        "attempt": ctx.attempt,
        "tenant": ctx.job.tenant,
        "started_at": ctx.job.started_at.timestamp() if ctx.job.started_at else None,
        "run_at": ctx.job.run_at.timestamp(),
    }
    fd = os.open(Path(payload.runs_dir) / ctx.job_id, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, (json.dumps(line) + "\n").encode())
    finally:
        os.close(fd)
    return payload.order_id
