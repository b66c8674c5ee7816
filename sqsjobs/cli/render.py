"""How the operator commands show things: the consoles, times, statuses and a job's record.

Results (tables, ``--json``) go to stdout, so ``sqsjobs jobs list | less`` works; progress and
errors go to stderr. Consoles are made per call so ``COLUMNS`` and the current streams are honoured
(tests, pipes).
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

if TYPE_CHECKING:
    from sqsjobs.job import Job, Progress


def stdout_console() -> Console:
    """Results: stdout."""
    return Console(highlight=False)


def stderr_console() -> Console:
    """Errors and progress: stderr, out of the way of results and --json."""
    return Console(stderr=True, highlight=False)


def print_json(data: Any) -> None:
    """One JSON document on stdout (datetimes and the like as strings)."""
    typer.echo(json.dumps(data, default=str))


def when(ts: float | datetime | None, now: float | None = None) -> str:
    """``2026-01-02 03:04:05Z (5m ago)``, or ``-``."""
    if ts is None:
        return "-"
    value = ts.timestamp() if isinstance(ts, datetime) else ts
    stamp = datetime.fromtimestamp(value, UTC).strftime("%Y-%m-%d %H:%M:%SZ")
    delta = (now or time.time()) - value
    return f"{stamp} ({ago(delta)})"


def ago(delta: float) -> str:
    """``90s ago``, ``5m ago``, ``in 2h``: seconds as the largest unit that reads well."""
    future = delta < 0
    d = abs(delta)
    text = (
        f"{d:.0f}s"
        if d < 90
        else f"{d / 60:.0f}m"
        if d < 5400
        else f"{d / 3600:.0f}h"
        if d < 172_800
        else f"{d / 86400:.0f}d"
    )
    return f"in {text}" if future else f"{text} ago"


_STATUS_STYLE = {
    "succeeded": "green",
    "dead": "red",
    "cancelled": "yellow",
    "expired": "bright_black",
    "running": "cyan",
    "retry_scheduled": "magenta",
    "queued": "blue",
    "waiting": "dim",
}


def status_markup(value: str) -> str:
    """A job status, coloured."""
    return f"[{_STATUS_STYLE.get(value, 'white')}]{escape(value)}[/]"


def progress_line(progress: Progress, now: float) -> str:
    """``42%  copying page 7  {"pages": 7}  (report 3, written ... (4s ago))``: a progress report on one line."""
    written = f", written {when(progress.at, now)}" if progress.at is not None else ""
    return escape(progress.summary()) + f"  (report {progress.report}{written})"


def render_job(job: Job, data: dict[str, Any]) -> None:
    """The record of ``jobs get`` and ``dlq show``: fields, last error with its traceback, attempts, audit."""
    console = stdout_console()
    now = time.time()
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column(overflow="fold")
    rows = [
        ("id", job.id),
        ("status", status_markup(job.status.value) + (f"  ({escape(job.reason)})" if job.reason else "")),
        ("type", escape(job.type)),
        ("queue", escape(job.queue)),
        ("attempt", f"{job.attempt}/{job.max_attempts}"),
        ("run at", when(job.run_at, now)),
        ("created", when(job.created_at, now)),
        ("started", when(job.started_at, now)),
        ("finished", when(job.finished_at, now)),
        ("updated", when(job.updated_at, now)),
    ]
    if job.lease_owner:
        rows.append(
            (
                "lease",
                f"{escape(job.lease_owner)} epoch {job.lease_epoch}, expires {when(job.lease_expires, now)}",
            )
        )
    if job.cancel_requested:
        rows.append(("cancel", "requested; the worker stops at its next heartbeat"))
    if job.progress is not None:
        rows.append(("progress", progress_line(job.progress, now)))
    if flag := data.get("running_long"):  # the slow-run watch's flag (sqsjobs.slow_runs)
        rows.append(
            (
                "running long",
                f"[yellow]{flag['times_p95']}x its type's p95[/] ({flag['elapsed_s']} s against "
                f"p95 {flag['p95_s']} s, factor {flag['factor']}), flagged {escape(str(flag['at']))}",
            )
        )
    if data.get("order_yielded"):  # a serialized job that lost its place in its key
        rows.append(("order yielded", escape(str(data["order_yielded"]))))
    if job.chain is not None:  # 0-based index, as app.chains.get shows it
        rows.append(("chain", f"{escape(job.chain.id)} step {job.chain.step} of {job.chain.steps}"))
    for label, key in (
        ("tenant", "tenant"),
        ("idempotency key", "idempotency_key"),
        ("parent", "parent_id"),
        ("batch", "batch_id"),
        ("root", "root_id"),
        ("trace", "trace"),
    ):
        if data.get(key):
            rows.append((label, escape(str(data[key]))))
    if job.payload_ref:
        rows.append(("payload", f"{job.payload_size} bytes in {escape(job.payload_ref)}"))
    else:
        rows.append(("payload", escape(json.dumps(data["payload"])[:500])))
    if job.result is not None:
        rows.append(("result", escape(json.dumps(data["result"])[:500])))
    if job.result_ref:
        rows.append(("result object", escape(job.result_ref)))
    for label, value in rows:
        grid.add_row(label, value)
    console.print(grid)
    if job.last_error:
        console.print(
            f"\n[bold red]last error[/] {escape(job.last_error.error_class)}: {escape(job.last_error.message)}"
        )
        if job.last_error.traceback:
            console.print(escape(job.last_error.traceback.rstrip()), style="dim", soft_wrap=True)
    if job.history:
        table = Table(title="attempts", title_justify="left")
        for col in ("#", "outcome", "started", "finished", "worker", "error"):
            table.add_column(col, overflow="fold")
        for h in job.history:
            table.add_row(
                str(h.attempt),
                escape(h.outcome),
                when(h.started_at, now),
                when(h.finished_at, now),
                escape(h.worker),
                escape(h.error),
            )
        console.print(table)
    if data.get("steps"):
        table = Table(title="steps", title_justify="left")
        for col in ("step", "attempt", "started", "duration", "result"):
            table.add_column(col, overflow="fold")
        for step in data["steps"]:
            kept = step["result_ref"] or json.dumps(step["result"])[:80]
            table.add_row(
                escape(step["name"]),
                str(step["attempt"]),
                str(step["started_at"]),
                f"{step['duration_s']:g} s",
                escape(kept),
            )
        console.print(table)
    if data["audit"]:
        table = Table(title="audit", title_justify="left")
        for col in ("at", "action", "by", "from", "reason", "dlq message", "payload replaced"):
            table.add_column(col, overflow="fold")
        for a in data["audit"]:
            replaced = (
                f"{str(a.get('old_payload_hash') or 'none')[:12]} → {str(a['new_payload_hash'])[:12]}"
                if a.get("new_payload_hash")
                else "-"
            )
            table.add_row(
                str(a.get("at")),
                str(a.get("action")),
                str(a.get("by")),
                str(a.get("from")),
                escape(str(a.get("reason") or "-")),
                str(a.get("message_id") or "-"),
                replaced,
            )
        console.print(table)
