"""An app whose ``reindex`` type runs under ``Replace()``: the newest enqueue of a document's key runs.

Each run writes ``<runs_dir>/<job id>.started`` when it starts, then works in short steps for
``work_s``. A run told it was cancelled (``ctx.cancel_requested``) writes ``.told`` and returns at
once, as a well-behaved handler does; with ``ignore_cancel`` it works on regardless and returns its
result, which must never land.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from sqsjobs import App, JobContext, Replace

app = App(os.environ.get("TEST_APP_NAME", "replacing"))


@app.job("reindex", dedupe=Replace(), max_attempts=1, timeout=120)
def reindex(payload: dict[str, object], ctx: JobContext) -> dict[str, object]:
    runs = Path(str(payload["runs_dir"]))
    (runs / f"{ctx.job_id}.started").write_text(str(payload["version"]))
    ends = time.monotonic() + float(payload["work_s"])  # type: ignore[arg-type]
    while time.monotonic() < ends:
        if ctx.cancel_requested and not payload.get("ignore_cancel"):
            (runs / f"{ctx.job_id}.told").write_text(str(ctx.interrupt_reason))
            return {"version": payload["version"], "stopped": True}
        time.sleep(0.05)
    return {"version": payload["version"]}
