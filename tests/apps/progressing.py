"""An app whose handler reports progress: ``reports`` times, each written before the next is made.

After each ``ctx.progress`` the handler reads its own record until the report is there (the lease
renewal wrote it), so a test can ask that every report be seen: how long that takes is the
renewal's business (about every half lease), not the test's guess.
"""

from __future__ import annotations

import os
import time

from sqsjobs import App, JobContext

app = App(os.environ.get("TEST_APP_NAME", "progressing"))


@app.job("report.build", max_attempts=1, timeout=120)
def build(payload: dict[str, int], ctx: JobContext) -> dict[str, int]:
    total = int(payload["reports"])
    for done in range(1, total + 1):
        ctx.progress(fraction=done / total, message=f"page {done} of {total}", data={"pages": done})
        while written(ctx.job_id) < done:
            time.sleep(0.1)
    return {"pages": total}


def written(job_id: str) -> int:
    """The number of the last report the record shows (0: none yet)."""
    progress = app.get(job_id, load_result=False).progress
    return progress.report if progress is not None else 0
