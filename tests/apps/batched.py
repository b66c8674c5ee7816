"""An app for the batch handler tests: a handler that runs many jobs per call and logs each call outside the process.

Each call appends its lines to ``<log>`` in one write (O_APPEND: calls never interleave): one line
per job, ``<call id> <size> <job id> <attempt> <pid>``. The tests count calls, their sizes and
each job's appearances from it, whatever the worker believes it did.
"""

from __future__ import annotations

import os
import secrets
import time
from typing import Any

from sqsjobs import App, BatchDead, BatchItem, BatchOptions, BatchRetry, BatchSuccess, RetryPolicy

app = App(os.environ.get("TEST_APP_NAME", "batched"))
NO_BACKOFF = RetryPolicy(base_s=0, max_delay_s=0, jitter=False)
app.limit("pair", concurrency=2)


def log_call(items: list[BatchItem[dict[str, Any]]]) -> None:
    """One write for the whole call: every job's line, under the call's own id."""
    call = secrets.token_hex(4)
    lines = "".join(f"{call} {len(items)} {i.job_id} {i.ctx.attempt} {os.getpid()}\n" for i in items)
    fd = os.open(str(items[0].payload["log"]), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, lines.encode())
    finally:
        os.close(fd)


def outcome(item: BatchItem[dict[str, Any]]) -> BatchSuccess | BatchRetry | BatchDead:
    if item.payload.get("fail"):  # fails every attempt: retried at once, dead after max_attempts
        return BatchRetry("always fails", delay_s=0)
    if item.payload.get("poison"):
        return BatchDead("poison document")
    return BatchSuccess({"n": item.payload.get("n")})


@app.job(
    "embed.doc", batch=BatchOptions(max_size=50, max_wait_s=1), max_attempts=3, retry=NO_BACKOFF, timeout=30
)
def embed(items: list[BatchItem[dict[str, Any]]]) -> list[BatchSuccess | BatchRetry | BatchDead]:
    """Many documents per call (an embedding API's batch): an outcome per job, in the items' order."""
    log_call(items)
    time.sleep(
        max((float(i.payload.get("first_sleep_s", 0)) for i in items if i.ctx.attempt == 1), default=0)
    )
    return [outcome(i) for i in items]


@app.job(
    "embed.async", batch=BatchOptions(max_size=5, max_wait_s=1), max_attempts=2, retry=NO_BACKOFF, timeout=30
)
async def embed_async(items: list[BatchItem[dict[str, Any]]]) -> dict[str, Any]:
    """The async form, answering by job id; a job named ``skip`` gets no outcome (retried, never lost)."""
    log_call(items)
    return {i.job_id: outcome(i) for i in items if not i.payload.get("skip")}


@app.job("embed.limited", batch=BatchOptions(max_size=10, max_wait_s=1), limits=["pair"], timeout=30)
def embed_limited(items: list[BatchItem[dict[str, Any]]]) -> list[BatchSuccess | BatchRetry | BatchDead]:
    """Under a limit of two running jobs: a job the limit defers never enters a call."""
    log_call(items)
    return [outcome(i) for i in items]


@app.job("embed.patient", batch=BatchOptions(max_size=50, max_wait_s=6), timeout=30)
def embed_patient(items: list[BatchItem[dict[str, Any]]]) -> list[BatchSuccess | BatchRetry | BatchDead]:
    """Gathers for longer than a lease: its waiting jobs must keep their leases meanwhile."""
    log_call(items)
    return [outcome(i) for i in items]


@app.job("embed.single", max_attempts=3, retry=NO_BACKOFF, timeout=30)
def embed_single(payload: dict[str, Any], ctx: Any) -> Any:
    """The same work, one job per call: what the cost comparison sets the batch handler against."""
    return {"n": payload.get("n")}
