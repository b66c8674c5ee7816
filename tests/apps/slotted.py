"""An app for the slot tests (tests/integration/test_slots.py): handlers that say when they run.

Each run appends one JSON line at its start and one at its end to the payload's ``log`` file
(O_APPEND: lines never tear), stamped with ``time.monotonic()`` (one clock per host, so the test
compares them with its own). With a ``gate`` path, the handler waits for that file to exist: the
test decides when running handlers end.
"""

from __future__ import annotations

import json
import os
import time

from sqsjobs import App, JobContext

app = App(os.environ.get("TEST_APP_NAME", "slotted"))

#: How often a gated handler looks for its gate.
GATE_POLL_S = 0.02


def _log(path: str, **fields: object) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, (json.dumps(fields) + "\n").encode())
    finally:
        os.close(fd)


@app.job("slots.run", timeout=120)
def run(payload: dict, ctx: JobContext) -> None:
    """Logs its start, waits for its gate (if any) or ``sleep`` seconds, logs its end."""
    _log(payload["log"], job=ctx.job_id, at=time.monotonic(), event="start")
    gate = payload.get("gate")
    while gate and not os.path.exists(gate):
        time.sleep(GATE_POLL_S)
    time.sleep(payload.get("sleep", 0.0))
    _log(payload["log"], job=ctx.job_id, at=time.monotonic(), event="end")
