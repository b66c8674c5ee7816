"""An app for worker-process tests: its handler records each attempt in a marker file, then sleeps.

With a ``gate`` path, the first attempt waits for that file to exist and then asks for a retry
``retry_after_s`` later (tests/integration/test_slow_acks.py: the test decides when it ends).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from sqsjobs import App, JobContext, Retry

app = App(os.environ.get("TEST_APP_NAME", "sleepy"))

#: How often a gated first attempt looks for its gate.
GATE_POLL_S = 0.02


@app.job("sleepy", max_attempts=3, timeout=120)
def sleepy(payload: dict[str, object], ctx: JobContext) -> int:
    Path(f"{payload['marker']}.{ctx.attempt}").write_text(ctx.worker_id)
    gate = payload.get("gate")
    if gate and ctx.attempt == 1:
        while not os.path.exists(str(gate)):
            time.sleep(GATE_POLL_S)
        raise Retry(delay_s=float(payload["retry_after_s"]))  # type: ignore[arg-type]
    time.sleep(float(payload["sleep_s"]))  # type: ignore[arg-type]
    return ctx.attempt
