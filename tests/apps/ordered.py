"""An app for the serialize-key order tests (tests/integration/test_serialized_order.py): keys that wait.

Each keyed run appends one JSON line to the payload's ``log`` file (O_APPEND: runs of several worker
processes never tear a line) with ``time.monotonic()`` stamps at its start and end, one clock per
host: the test reads start order, overlap and run counts from outside the workers. The holder keeps
the limit's only slot until the test creates its ``release`` file.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from sqsjobs import App, Breaker, JobContext

app = App(os.environ.get("TEST_APP_NAME", "ordered"))
app.limit("one", concurrency=1)
app.limit("dep", breaker=Breaker(failures=1, window_s=60, cooldown_s=2))


def hold(payload: dict[str, str], ctx: JobContext) -> None:
    """Holds what its type's limit gives it until ``release`` exists."""
    Path(payload["started"]).touch()
    while not Path(payload["release"]).exists():
        time.sleep(0.1)


#: The only slot of ``one``; the half-open ``dep`` breaker's probe (the other jobs wait for its verdict).
app.job("hold", limits=["one"], max_attempts=2, timeout=300)(hold)
app.job("probe", limits=["dep"], max_attempts=2, timeout=300)(hold)


@app.job("trip", limits=["dep"], max_attempts=1, timeout=60)
def trip(payload: dict[str, str], ctx: JobContext) -> None:
    """Fails once: opens the ``dep`` breaker."""
    raise RuntimeError("the dependency is down, on purpose")


def _run(payload: dict[str, str], ctx: JobContext) -> None:
    start = time.monotonic()
    time.sleep(0.2)
    line = {"label": payload["label"], "attempt": ctx.attempt, "pid": os.getpid(), "start": start}
    line["end"] = time.monotonic()
    fd = os.open(payload["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, (json.dumps(line) + "\n").encode())
    finally:
        os.close(fd)


app.job("keyed.limit", queue="device", limits=["one"], max_attempts=2, timeout=60)(_run)
app.job("keyed.pause", queue="device", max_attempts=2, timeout=60, pausable=True)(_run)
app.job("keyed.breaker", queue="device", limits=["dep"], max_attempts=2, timeout=60)(_run)


@app.job("keyed.approval", queue="device", max_attempts=1, timeout=60)
def approval(payload: dict[str, str], ctx: JobContext) -> str:
    """A keyed job that waits on a token (its id handed out in ``<log>.token``), then logs its run."""
    token = ctx.create_token(timeout=120)
    ctx.step("publish", lambda: Path(payload["log"] + ".token").write_text(token.id))
    decision = ctx.wait_for_token(token)
    _run(payload, ctx)
    return str(decision)
