"""An app for the flow-control tests: limited handlers that leave a run log outside the process.

Each run appends one line to ``<log>``: ``type job_id tenant started_at end pid attempt`` where
``started_at`` is the record's start (the instant the gate admitted it) and ``end`` when the handler
returned; the tests compute overlaps and start rates from it, whatever the workers believe.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from sqsjobs import App, Breaker, JobContext, RetryPolicy
from sqsjobs.retry import Backoff

app = App(os.environ.get("TEST_APP_NAME", "limited"))
app.limit("pair", concurrency=2)
app.limit("per-tenant", concurrency=2, key="tenant")
app.limit("five", rate="5/s")
app.limit("per-shop", rate="5/s", key="tenant")
app.limit("crm", breaker=Breaker(failures=3, window_s=30, cooldown_s=4))
app.limit("weighted", concurrency=1, key="tenant", weights={"vip": 3})


def _run(payload: dict[str, object], ctx: JobContext) -> None:
    begun = time.time()
    time.sleep(float(payload.get("sleep_s", 0.0)))  # type: ignore[arg-type]
    # A job the test ends itself: it runs until this file exists (within its 60 s timeout).
    release = payload.get("until")
    while release and not os.path.exists(str(release)) and time.time() - begun < 55:
        time.sleep(0.05)
    started = ctx.job.started_at.timestamp() if ctx.job.started_at else begun
    line = f"{ctx.job.type} {ctx.job_id} {ctx.job.tenant or '-'} {started:.6f} {begun:.6f} {time.time():.6f} {os.getpid()} {ctx.attempt}\n"
    fd = os.open(str(payload["log"]), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


@app.job("paired", limits=["pair"], timeout=120)
def paired(payload: dict[str, object], ctx: JobContext) -> None:
    """Two at a time, fleet-wide."""
    _run(payload, ctx)


@app.job("tenanted", limits=["per-tenant"], timeout=60)
def tenanted(payload: dict[str, object], ctx: JobContext) -> None:
    """Two at a time per tenant."""
    _run(payload, ctx)


@app.job("rated", limits=["five"], timeout=60)
def rated(payload: dict[str, object], ctx: JobContext) -> None:
    """Five starts per second, fleet-wide."""
    _run(payload, ctx)


@app.job("shop.call", limits=["per-shop"], timeout=60)
def shop_call(payload: dict[str, object], ctx: JobContext) -> None:
    """Five starts per second per tenant (a shop's API quota)."""
    _run(payload, ctx)


@app.job("crm.call", limits=["crm"], max_attempts=20, timeout=60)
def crm_call(payload: dict[str, object], ctx: JobContext) -> None:
    """Fails while the file ``<mode>`` says ``fail`` (the dependency is down)."""
    _run(payload, ctx)
    if Path(str(payload["mode"])).read_text().strip() == "fail":
        raise RuntimeError("crm is down")


@app.job("report", pausable=True, timeout=60)
def report(payload: dict[str, object], ctx: JobContext) -> None:
    """Under no limit, but pausable."""
    _run(payload, ctx)


@app.job("plain", timeout=60)
def plain(payload: dict[str, object], ctx: JobContext) -> None:
    """Neither limited nor pausable: pays nothing for flow control."""
    _run(payload, ctx)


@app.job("weighted", limits=["weighted"], timeout=60)
def weighted(payload: dict[str, object], ctx: JobContext) -> None:
    """One at a time per tenant, three at a time for tenant ``vip``."""
    _run(payload, ctx)


@app.job(
    "aging", max_attempts=100, retry=RetryPolicy(backoff=Backoff.FIXED, base_s=1, jitter=False, max_age_s=6)
)
def aging(payload: dict[str, object], ctx: JobContext) -> None:
    """Fails every attempt: only the retry policy's max age (6 s) ends it, long before 100 attempts."""
    _run(payload, ctx)
    raise RuntimeError("still failing")
