"""An app of jobs that wait for signals and of a type cancelled by one (tests/integration/test_signals.py).

``order.await_payment`` appends a line to ``<runs_dir>/<job id>.before`` in a step (once per job)
and to ``.waits`` at each run that reaches the wait, then waits for ``order.paid`` of its order.
``order.ship`` writes ``.started``, may first sleep durably (``nap_s``: queued, registered for its
``cancel_on``), then works for ``work_s``; told it was cancelled, it writes ``.told`` and returns.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from sqsjobs import App, JobContext, SignalTimeout

app = App(os.environ.get("TEST_APP_NAME", "signalled"))


def declare(on: App) -> None:
    """The signals' declarations, on this app and on a test's (declarations live on ``app.signals``)."""
    on.signals.declare("order.paid", keys=["order_id"], keep=timedelta(minutes=5))
    on.signals.declare("order.cancelled", keys=["order_id"])
    on.signals.cancel_on("order.ship", "order.cancelled", match={"order_id": "payload.order_id"})


declare(app)


def _append(runs_dir: str, job_id: str, what: str, line: str) -> None:
    fd = os.open(Path(runs_dir) / f"{job_id}.{what}", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, f"{line}\n".encode())
    finally:
        os.close(fd)


@app.job("order.await_payment", max_attempts=1, timeout=30)
def await_payment(payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    runs = str(payload["runs_dir"])
    ctx.step("before", _append, runs, ctx.job_id, "before", str(ctx.attempt))
    _append(runs, ctx.job_id, "waits", str(os.getpid()))
    try:
        paid = ctx.signals.wait(
            "order.paid",
            match={"order_id": payload["order_id"]},
            timeout=float(payload["timeout_s"]),
            lookback=float(payload.get("lookback_s", 0)),
        )
    except SignalTimeout as exc:
        return {"timed_out": str(exc)}
    return {"paid": paid}


@app.job("order.ship", max_attempts=1, timeout=120)
def ship(payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    runs = Path(str(payload["runs_dir"]))
    if payload.get("nap_s"):
        ctx.sleep(float(payload["nap_s"]))
    (runs / f"{ctx.job_id}.started").write_text(str(os.getpid()))
    ends = time.monotonic() + float(payload["work_s"])
    while time.monotonic() < ends:
        if ctx.cancel_requested:
            (runs / f"{ctx.job_id}.told").write_text(str(ctx.interrupt_reason))
            return {"shipped": False}
        time.sleep(0.05)
    return {"shipped": True}
