"""An app whose external types run in HTTP workers (Node, or raw HTTP from a test) beside a Python type.

``render.thumbnail`` (a pydantic payload), ``render.count`` (a JSON Schema payload) and
``render.gpu`` (under a limit of one) live on queue ``render``, which no Python worker receives; ``py.caption`` runs in a Python worker and records each
run in ``<runs_dir>/<job id>`` (one JSON line per run, O_APPEND) with the result of the step before.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from sqsjobs import App, JobContext, RetryPolicy

app = App(os.environ.get("TEST_APP_NAME", "polyglot"))


class Thumbnail(BaseModel):
    """What a thumbnail job renders."""

    url: str
    width: int
    #: How the Node test worker behaves: ``ok``, ``fail:N`` (fails its first N attempts), ``permanent``,
    #: ``hang`` (never ends: a kill or a cancel ends it), ``slow:S`` (heartbeats through S seconds).
    mode: str = "ok"
    runs_dir: str = ""


app.external(
    "render.thumbnail",
    queue="render",
    payload=Thumbnail,
    max_attempts=4,
    retry=RetryPolicy(base_s=1.0, max_delay_s=2.0, jitter=False),
    timeout=120,
)
app.external(
    "render.count",
    queue="render",
    payload={
        "type": "object",
        "properties": {"n": {"type": "integer", "minimum": 0}, "runs_dir": {"type": "string"}},
        "required": ["n"],
    },
)

#: One render at a time on the GPU, fleet-wide: HTTP workers' claims start under it as a Python worker's do.
app.limit("gpu", concurrency=1)
app.external("render.gpu", queue="render", limits=["gpu"], max_attempts=2)


@app.job("py.caption", max_attempts=2, timeout=60)
def caption(payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    """A Python step after a Node one: records the result it saw, and captions it."""
    line = {"attempt": ctx.attempt, "pid": os.getpid(), "previous": ctx.previous_result}
    fd = os.open(Path(payload["runs_dir"]) / ctx.job_id, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, (json.dumps(line) + "\n").encode())
    finally:
        os.close(fd)
    return {"caption": f"{payload['title']}: {(ctx.previous_result or {}).get('thumbnail')}"}


@app.job("py.collect", timeout=60)
def collect(payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    """A batch's completion callback (its items may be external types)."""
    return payload
