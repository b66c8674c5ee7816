"""The soak's App (issue 8): one job type per kind of work, every run written to a shared ledger.

Worker processes load it with ``--app tests.soak.soak_app:app``; the App's name comes from
``SOAK_APP_NAME`` and its timings from the usual ``SQSJOBS_*`` variables the driver sets.

The ledger is a SQLite file (``SOAK_LEDGER``, WAL mode) shared by every process: it plays the
downstream system a job writes to, and it is deliberately *not* behind the fault proxy, so what it
shows is what sqsjobs did, not what the network did to the ledger.

```
 runs(job_id, epoch, attempt, kind, worker)   one row per handler invocation (the run log)
 failures(job_id, epoch)                      flaky jobs: one row per deliberate failure
 plain(job_id, epoch, worker)                 plain effect: every run appends (an INSERT with no fence)
 plain_last(job_id PK, epoch)                 plain last-writer-wins value (stale runs overwrite)
 fenced(job_id PK, epoch, worker)             fenced effect: applied only if the token's epoch is newer
 fence_log(job_id, epoch, accepted)           every fenced write attempt, accepted or refused
```

A handler passes ``ctx.fencing_token`` (``<job id>:<epoch>``) to its fenced write; the ledger keeps
the highest epoch per job and refuses a write from an older one — the check a real downstream
store (a SQL row version, a DynamoDB condition) would make.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
import time
from typing import Any

from sqsjobs import App, JobContext, PermanentError, RetryPolicy

#: Every kind retries quickly. Attempts leave room for runs lost to SIGKILL (each uses one up):
#: a job of several seconds under a kill every few seconds can lose a handful in a row.
MAX_ATTEMPTS = 25
FAST_RETRY = RetryPolicy(base_s=0.5, max_delay_s=2.0)
#: SQLite waits this long for a writer lock instead of failing (many processes share the file).
BUSY_TIMEOUT_S = 60.0

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (job_id TEXT, epoch INTEGER, attempt INTEGER, kind TEXT, worker TEXT, at REAL);
CREATE TABLE IF NOT EXISTS failures (job_id TEXT, epoch INTEGER);
CREATE TABLE IF NOT EXISTS plain (job_id TEXT, epoch INTEGER, worker TEXT);
CREATE TABLE IF NOT EXISTS plain_last (job_id TEXT PRIMARY KEY, epoch INTEGER);
CREATE TABLE IF NOT EXISTS fenced (job_id TEXT PRIMARY KEY, epoch INTEGER, worker TEXT);
CREATE TABLE IF NOT EXISTS fence_log (job_id TEXT, epoch INTEGER, accepted INTEGER);
CREATE INDEX IF NOT EXISTS failures_job ON failures (job_id);
"""


def create_ledger(path: str) -> None:
    """Create the ledger file (the driver does this once, before any worker starts)."""
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA journal_mode=WAL")
        db.executescript(SCHEMA)


_local = threading.local()


def _db() -> sqlite3.Connection:
    db: sqlite3.Connection | None = getattr(_local, "db", None)
    if db is None:
        db = sqlite3.connect(os.environ["SOAK_LEDGER"], timeout=BUSY_TIMEOUT_S, isolation_level=None)
        db.execute("PRAGMA synchronous=NORMAL")
        _local.db = db
    return db


def _epoch(token: str) -> int:
    return int(token.rsplit(":", 1)[1])


def _record_run(ctx: JobContext, kind: str) -> None:
    _db().execute(
        "INSERT INTO runs VALUES (?, ?, ?, ?, ?, ?)",
        (ctx.job_id, _epoch(ctx.fencing_token), ctx.attempt, kind, ctx.worker_id, time.time()),
    )


def _effect(ctx: JobContext, fenced: bool) -> None:
    """The job's side effect: fenced (conditional on the token) or plain (unconditional)."""
    db = _db()
    epoch = _epoch(ctx.fencing_token)
    if fenced:
        with db:  # one transaction: the fence check and the effect together
            db.execute("BEGIN IMMEDIATE")
            cur = db.execute(
                "INSERT INTO fenced VALUES (?, ?, ?) ON CONFLICT (job_id) DO UPDATE "
                "SET epoch = excluded.epoch, worker = excluded.worker WHERE excluded.epoch > fenced.epoch",
                (ctx.job_id, epoch, ctx.worker_id),
            )
            db.execute("INSERT INTO fence_log VALUES (?, ?, ?)", (ctx.job_id, epoch, cur.rowcount))
    else:
        with db:
            db.execute("BEGIN IMMEDIATE")
            db.execute("INSERT INTO plain VALUES (?, ?, ?)", (ctx.job_id, epoch, ctx.worker_id))
            db.execute("INSERT OR REPLACE INTO plain_last VALUES (?, ?)", (ctx.job_id, epoch))


def _work(payload: dict[str, Any], ctx: JobContext, kind: str) -> dict[str, Any]:
    _record_run(ctx, kind)
    time.sleep(float(payload.get("sleep_s", 0.0)))
    _effect(ctx, bool(payload.get("fenced")))
    return {"epoch": _epoch(ctx.fencing_token)}


def build_app(name: str, **settings: Any) -> App:
    """The soak App under ``name`` (the driver and the workers build the same one)."""
    app = App(name, **settings)

    @app.job("quick", max_attempts=MAX_ATTEMPTS, retry=FAST_RETRY, timeout=120)
    def quick(payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
        """A short job (tens of milliseconds)."""
        return _work(payload, ctx, "quick")

    @app.job("quick_async", max_attempts=MAX_ATTEMPTS, retry=FAST_RETRY, timeout=120)
    async def quick_async(payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
        """The same on the worker's event loop (the ledger write goes to a thread)."""
        return await asyncio.to_thread(_work, payload, ctx, "quick_async")

    @app.job("slow", max_attempts=MAX_ATTEMPTS, retry=FAST_RETRY, timeout=300)
    def slow(payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
        """Runs longer than one lease period: only lease renewals keep it with one owner."""
        return _work(payload, ctx, "slow")

    @app.job("flaky", max_attempts=MAX_ATTEMPTS, retry=FAST_RETRY, timeout=120)
    def flaky(payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
        """Fails ``fail_times`` times (counted in the ledger, so a killed run does not count), then succeeds."""
        _record_run(ctx, "flaky")
        db = _db()
        (failed,) = db.execute("SELECT count(*) FROM failures WHERE job_id = ?", (ctx.job_id,)).fetchone()
        if failed < int(payload["fail_times"]):
            db.execute("INSERT INTO failures VALUES (?, ?)", (ctx.job_id, _epoch(ctx.fencing_token)))
            raise RuntimeError(f"flaky failure {failed + 1} of {payload['fail_times']}")
        _effect(ctx, bool(payload.get("fenced")))
        return {"epoch": _epoch(ctx.fencing_token)}

    @app.job("permanent", max_attempts=MAX_ATTEMPTS, retry=FAST_RETRY, timeout=120)
    def permanent(payload: dict[str, Any], ctx: JobContext) -> None:
        """Always fails permanently: dead after one run, no effect."""
        _record_run(ctx, "permanent")
        raise PermanentError("this job can never succeed")

    return app


app = build_app(os.environ.get("SOAK_APP_NAME", "soak"))
