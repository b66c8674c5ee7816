"""Operator commands: ``sqsjobs jobs ...``, ``sqsjobs dlq ...``, ``sqsjobs stats``, ``sqsjobs doctor``.

The work is done by the flows in ``sqsjobs.ops``; this module parses options, renders rich
tables (stdout) or ``--json`` (stdout), and reports errors through ``sqsjobs.cli.common.guarded``:
one line on stderr and an exit code from the table there, never a traceback.
"""

from __future__ import annotations

import contextlib
import json
import signal
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from sqsjobs.cli.common import (
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_NOT_FOUND,
    EXIT_PARTIAL,
    EXIT_REFUSED,
    EXIT_USAGE,
    AppOpt,
    EndpointOpt,
    abort,
    guarded,
    load_app,
)
from sqsjobs.errors import JobNotFound, PayloadError
from sqsjobs.job import JobStatus  # noqa: TC001 (typer reads the annotation at runtime)
from sqsjobs.ops import dlq as dlq_ops
from sqsjobs.ops import doctor as doctor_ops
from sqsjobs.ops import inspect as inspect_ops
from sqsjobs.ops import replay as replay_ops
from sqsjobs.ops import stats as stats_ops
from sqsjobs.ops._common import app_queues, parse_duration

if TYPE_CHECKING:
    from sqsjobs.app import App
    from sqsjobs.job import Job

jobs_cli = typer.Typer(no_args_is_help=True, help="Find a job, see why it failed, cancel or retry it.")
dlq_cli = typer.Typer(
    no_args_is_help=True, help="What is in the dead-letter queues, and replaying it safely."
)

JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output on stdout")]
QueueOpt = Annotated[
    list[str] | None, typer.Option("--queue", help="Logical queue (repeatable; default: all of the app's)")
]
SinceOpt = Annotated[str | None, typer.Option(help="Only this recent, e.g. 30m, 2h, 7d")]


def _console() -> Console:
    # Results go to stdout (so `sqsjobs jobs list | less` works); made per call so COLUMNS and the
    # current stdout are honoured (tests, pipes).
    return Console(highlight=False)


def _stderr() -> Console:
    """Errors and progress: stderr, out of the way of results and --json."""
    return Console(stderr=True, highlight=False)


def _json(data: Any) -> None:
    typer.echo(json.dumps(data, default=str))


def _since(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise abort(f"--since: {exc}", EXIT_USAGE) from None


def _when(ts: float | datetime | None, now: float | None = None) -> str:
    if ts is None:
        return "-"
    value = ts.timestamp() if isinstance(ts, datetime) else ts
    stamp = datetime.fromtimestamp(value, UTC).strftime("%Y-%m-%d %H:%M:%SZ")
    delta = (now or time.time()) - value
    return f"{stamp} ({_ago(delta)})"


def _ago(delta: float) -> str:
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
    "running": "cyan",
    "retry_scheduled": "magenta",
    "queued": "blue",
}


def _status(value: str) -> str:
    return f"[{_STATUS_STYLE.get(value, 'white')}]{escape(value)}[/]"


# ── jobs ────────────────────────────────────────────────────────────────────────────────────
@jobs_cli.command("get")
def jobs_get(
    job_id: Annotated[str, typer.Argument(help="Job id")],
    app: AppOpt,
    endpoint_url: EndpointOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """The job's record: status, attempts, lease, times, result, last error, history and audit."""
    loaded = load_app(app, endpoint_url)
    with guarded(loaded):
        job = loaded.get(job_id)
    data = inspect_ops.job_to_dict(job)
    if json_out:
        _json(data)
        return
    _render_job(job, data)


def _render_job(job: Job, data: dict[str, Any]) -> None:
    console = _console()
    now = time.time()
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column(overflow="fold")
    rows = [
        ("id", job.id),
        ("status", _status(job.status.value) + (f"  ({escape(job.reason)})" if job.reason else "")),
        ("type", escape(job.type)),
        ("queue", escape(job.queue)),
        ("attempt", f"{job.attempt}/{job.max_attempts}"),
        ("run at", _when(job.run_at, now)),
        ("created", _when(job.created_at, now)),
        ("started", _when(job.started_at, now)),
        ("finished", _when(job.finished_at, now)),
        ("updated", _when(job.updated_at, now)),
    ]
    if job.lease_owner:
        rows.append(
            (
                "lease",
                f"{escape(job.lease_owner)} epoch {job.lease_epoch}, expires {_when(job.lease_expires, now)}",
            )
        )
    if job.cancel_requested:
        rows.append(("cancel", "requested; the worker stops at its next heartbeat"))
    for label, key in (
        ("tenant", "tenant"),
        ("idempotency key", "idempotency_key"),
        ("parent", "parent_id"),
        ("trace", "trace"),
    ):
        if data[key]:
            rows.append((label, escape(str(data[key]))))
    rows.append(("payload", escape(json.dumps(job.payload)[:500])))
    if job.result is not None:
        rows.append(("result", escape(json.dumps(job.result)[:500])))
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
            table.add_row(str(h.attempt), escape(h.outcome), _when(h.started_at, now), _when(h.finished_at, now),
                          escape(h.worker), escape(h.error))  # fmt: skip
        console.print(table)
    if data["audit"]:
        table = Table(title="audit", title_justify="left")
        for col in ("at", "action", "by", "from", "reason", "dlq message"):
            table.add_column(col, overflow="fold")
        for a in data["audit"]:
            table.add_row(str(a.get("at")), str(a.get("action")), str(a.get("by")), str(a.get("from")),
                          escape(str(a.get("reason") or "-")), str(a.get("message_id") or "-"))  # fmt: skip
        console.print(table)


@jobs_cli.command("list")
def jobs_list(
    app: AppOpt,
    endpoint_url: EndpointOpt = None,
    status: Annotated[JobStatus | None, typer.Option(help="Only jobs in this state")] = None,
    job_type: Annotated[str | None, typer.Option("--type", help="Only this job type")] = None,
    queue: Annotated[str | None, typer.Option(help="Only this logical queue")] = None,
    tenant: Annotated[str | None, typer.Option(help="Only this tenant")] = None,
    since: SinceOpt = None,
    limit: Annotated[
        int, typer.Option(help=f"Rows per page (1..{inspect_ops.MAX_LIMIT})")
    ] = inspect_ops.DEFAULT_LIMIT,
    cursor: Annotated[
        str | None, typer.Option(help="Next page: the cursor the previous page printed")
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Jobs, newest first, served by an index (never a table scan); paginated with --cursor."""
    loaded = load_app(app, endpoint_url)
    query = inspect_ops.ListQuery(status, job_type, queue, tenant, _since(since), limit, cursor)
    now = loaded.clock.now()
    with guarded(loaded):
        page: inspect_ops.JobPage = loaded.run(
            inspect_ops.list_flow(loaded.settings, loaded.registry, query, now)
        )
    if json_out:
        _json(
            {"jobs": [r.to_dict() for r in page.rows], "next_cursor": page.next_cursor, "index": page.index}
        )
        return
    console = _console()
    at_label = "due / finished" if page.index == "by_status" else "updated"
    table = Table(show_edge=False)
    table.add_column("id", no_wrap=True)
    for col in ("status", "type", "queue", "tenant", "attempt", "created", at_label, "reason"):
        table.add_column(col, overflow="fold")
    for r in page.rows:
        attempt = f"{r.attempt}/{r.max_attempts}" if r.attempt is not None else "-"
        table.add_row(r.id, _status(r.status), escape(r.type), escape(r.queue), escape(r.tenant or "-"), attempt,
                      _when(r.created_at, now), _when(r.at, now), escape(r.reason or ""))  # fmt: skip
    console.print(table)
    console.print(
        f"{len(page.rows)} job(s) via index {page.index} ({', '.join(page.partitions)})", style="dim"
    )
    if page.next_cursor:
        console.print(f"more: --cursor {page.next_cursor}")


@jobs_cli.command("cancel")
def jobs_cancel(
    job_id: Annotated[str, typer.Argument(help="Job id")],
    app: AppOpt,
    endpoint_url: EndpointOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Cancel a waiting job, or ask a running one to stop at its next heartbeat."""
    loaded = load_app(app, endpoint_url)
    with guarded(loaded):
        outcome = loaded.cancel(job_id)
    if json_out:
        _json({"id": job_id, "result": outcome})
    elif outcome == "cancelled":
        _console().print(f"job {job_id} cancelled")
    else:
        _console().print(f"job {job_id} is running: cancel requested, it stops at its next heartbeat")


@jobs_cli.command("retry")
def jobs_retry(
    job_id: Annotated[str, typer.Argument(help="Job id")],
    app: AppOpt,
    endpoint_url: EndpointOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Put a dead or cancelled job back in its queue: attempts reset, same id and key, audit entry kept."""
    loaded = load_app(app, endpoint_url)
    with guarded(loaded):
        try:
            job = loaded.retry(job_id)
        except PayloadError as exc:  # the job is fine; the current code refuses it
            raise abort(str(exc), EXIT_REFUSED) from None
    if json_out:
        _json(
            {"id": job.id, "status": job.status.value, "queue": job.queue, "max_attempts": job.max_attempts}
        )
    else:
        _console().print(f"job {job.id} queued again on {job.queue} (attempts 0/{job.max_attempts})")


# ── dlq ─────────────────────────────────────────────────────────────────────────────────────
TypeFilter = Annotated[list[str] | None, typer.Option("--type", help="Only this job type (repeatable)")]
ErrorFilter = Annotated[
    list[str] | None, typer.Option("--error-class", help="Only this error class (repeatable)")
]


def _filter(
    app: App,
    types: list[str] | None,
    errors: list[str] | None,
    since: str | None,
    ids: list[str] | None = None,
) -> dlq_ops.DlqFilter:
    age = _since(since)
    return dlq_ops.DlqFilter(
        types=frozenset(types or ()),
        error_classes=frozenset(errors or ()),
        job_ids=frozenset(ids or ()),
        since=app.clock.now() - age if age is not None else None,
    )


def _record_statuses(app: App, messages: list[dlq_ops.DlqMessage]) -> dict[str, str]:
    ids = [m.job_id for m in messages if m.job_id]
    items = app.run(inspect_ops.batch_get_flow(app.settings.table_name, ids, ("id", "status")))
    return {i: it["status"]["S"] for i, it in items.items()}


@dlq_cli.command("list")
def dlq_list(
    app: AppOpt,
    endpoint_url: EndpointOpt = None,
    job_type: TypeFilter = None,
    error_class: ErrorFilter = None,
    since: SinceOpt = None,
    queue: QueueOpt = None,
    limit: Annotated[int, typer.Option(help="Show at most this many")] = 100,
    json_out: JsonOpt = False,
) -> None:
    """What is in the DLQs and why; the record's current status says whether it is still dead."""
    loaded = load_app(app, endpoint_url)
    flt = _filter(loaded, job_type, error_class, since)
    with guarded(loaded):
        messages = loaded.run(
            dlq_ops.browse_flow(loaded.queue_urls, app_queues(loaded.registry, queue), flt, limit=limit)
        )
        statuses = _record_statuses(loaded, messages)
    if json_out:
        _json({"messages": [m.to_dict() | {"record_status": statuses.get(m.job_id or "")} for m in messages]})
        return
    now = time.time()
    table = Table(show_edge=False)
    for col in ("message", "job", "type", "reason", "error", "sent", "record"):
        table.add_column(col, overflow="fold")
    for m in messages:
        error = f"{m.error_class}: {m.error_message}" if m.error_class else ""
        record = statuses.get(m.job_id or "")
        table.add_row(m.message_id, escape(m.job_id or "-"), escape(m.job_type or "-"),
                      escape(m.malformed or m.reason), escape(error[:120]), _when(m.sent_at, now),
                      _status(record) if record else "[red]no record[/]")  # fmt: skip
    console = _console()
    console.print(table)
    console.print(f"{len(messages)} message(s)", style="dim")


@dlq_cli.command("show")
def dlq_show(
    message_or_job_id: Annotated[str, typer.Argument(metavar="ID", help="DLQ message id or job id")],
    app: AppOpt,
    endpoint_url: EndpointOpt = None,
    queue: QueueOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """One DLQ message: reason, error, body, and the job's record with its traceback and history."""
    loaded = load_app(app, endpoint_url)
    flt = dlq_ops.DlqFilter(job_ids=frozenset({message_or_job_id}))
    with guarded(loaded):
        found = loaded.run(
            dlq_ops.browse_flow(
                loaded.queue_urls, app_queues(loaded.registry, queue), flt, stop_at_first=True
            )
        )
        if not found:
            raise abort(
                f"no DLQ message or job {message_or_job_id!r} in the DLQs of {', '.join(app_queues(loaded.registry, queue))}",
                EXIT_NOT_FOUND,
            )
        message = found[0]
        job = None
        if message.job_id:
            with contextlib.suppress(JobNotFound):
                job = loaded.get(message.job_id)
    if json_out:
        _json({"message": message.to_dict(), "job": inspect_ops.job_to_dict(job) if job else None})
        return
    console = _console()
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column(overflow="fold")
    for label, value in (
        ("message", message.message_id),
        ("queue", f"{message.queue} (from {message.source_queue or '?'})"),
        ("sent", _when(message.sent_at)),
        ("receives", str(message.receive_count)),
        ("reason", message.malformed or message.reason),
        ("error", f"{message.error_class}: {message.error_message}" if message.error_class else "-"),
        ("body", message.body[:500]),
    ):
        grid.add_row(label, escape(value))
    console.print(grid)
    if job is None:
        console.print("\n[red]no record for this message[/]" if message.job_id else "")
        return
    console.print(f"\n[bold]job {job.id}[/]")
    _render_job(job, inspect_ops.job_to_dict(job))


@dlq_cli.command("replay")
def dlq_replay(
    app: AppOpt,
    endpoint_url: EndpointOpt = None,
    job_type: TypeFilter = None,
    error_class: ErrorFilter = None,
    since: SinceOpt = None,
    queue: QueueOpt = None,
    job_id: Annotated[list[str] | None, typer.Option("--job-id", help="Only this job (repeatable)")] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Show what would happen; change nothing")
    ] = False,
    limit: Annotated[int | None, typer.Option(help="Requeue at most this many jobs")] = None,
    rate: Annotated[float | None, typer.Option(help="Requeue at most this many jobs per second")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Requeue dead jobs from the DLQs: re-validated, same id and key, attempts reset, audited.

    The DLQ copy is deleted only after the job is queued again. Ctrl-C stops after the current
    message; a re-run carries on and never requeues a job twice.
    """
    loaded = load_app(app, endpoint_url)
    flt = _filter(loaded, job_type, error_class, since, job_id)
    queues = app_queues(loaded.registry, queue)
    stop = {"requested": False}

    def on_sigint(signum: int, frame: Any) -> None:
        if stop["requested"]:
            raise KeyboardInterrupt
        stop["requested"] = True
        _stderr().print("stopping after the current message (Ctrl-C again to quit at once)")

    try:
        previous: Any = signal.signal(signal.SIGINT, on_sigint)
    except ValueError:  # not the main thread (embedded use): Ctrl-C then stops at once, losing nothing
        previous = None
    console = _console()
    try:
        with guarded(loaded):
            depths = loaded.run(dlq_ops.depth_flow(loaded.queue_urls, queues))
            total = sum(d.visible for d in depths)
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

            with Progress(TextColumn("replay"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"),
                          console=_stderr(), transient=True, disable=json_out) as progress:  # fmt: skip
                task = progress.add_task("", total=total or None)

                def on_item(item: replay_ops.ReplayItem) -> None:
                    progress.update(task, advance=1, description=item.outcome)

                summary: replay_ops.ReplaySummary = loaded.run(
                    replay_ops.replay_flow(
                        settings=loaded.settings, registry=loaded.registry, queue_urls=loaded.queue_urls,
                        queues=queues, flt=flt, clock=loaded.clock, dry_run=dry_run, limit=limit,
                        rate=rate, on_item=on_item, should_stop=lambda: stop["requested"],
                    )
                )  # fmt: skip
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    if json_out:
        _json(summary.to_dict())
    else:
        _render_summary(console, summary)
    if summary.count("failed"):
        raise typer.Exit(EXIT_ERROR)
    if summary.count("skipped"):
        raise typer.Exit(EXIT_PARTIAL)
    if summary.interrupted:
        raise typer.Exit(EXIT_INTERRUPTED)


def _render_summary(console: Console, summary: replay_ops.ReplaySummary) -> None:
    shown = [i for i in summary.items if i.outcome in ("skipped", "failed", "stale", "would_replay")]
    if shown:
        table = Table(show_edge=False)
        for col in ("message", "job", "type", "outcome", "reason"):
            table.add_column(col, overflow="fold")
        for i in shown:
            table.add_row(
                i.message_id, escape(i.job_id or "-"), escape(i.job_type or "-"), i.outcome, escape(i.reason)
            )
        console.print(table)
    counts = summary.to_dict()["counts"]
    verb = "would replay" if summary.dry_run else "replayed"
    n = counts["would_replay"] if summary.dry_run else counts["replayed"]
    console.print(
        f"{escape('[dry run] ') if summary.dry_run else ''}{verb} {n}, stale copies {counts['stale']}, "
        f"skipped {counts['skipped']}, failed {counts['failed']}, not matching {summary.unmatched}"
        + (" — interrupted: re-run to continue" if summary.interrupted else "")
    )


# ── stats, doctor ───────────────────────────────────────────────────────────────────────────
def stats(
    app: AppOpt,
    endpoint_url: EndpointOpt = None,
    watch: Annotated[bool, typer.Option("--watch", help="Refresh until Ctrl-C")] = False,
    interval: Annotated[float, typer.Option(help="Seconds between refreshes with --watch")] = 2.0,
    count: Annotated[int, typer.Option(help="With --watch, stop after this many refreshes (0 = never)")] = 0,
    window: Annotated[str, typer.Option(help="Count finished jobs over this window")] = "1h",
    json_out: JsonOpt = False,
) -> None:
    """Per queue: visible, in flight, delayed, DLQ depth; per job type: counts by status, oldest due, stuck."""
    loaded = load_app(app, endpoint_url)
    try:
        window_s = parse_duration(window)
    except ValueError as exc:
        raise abort(f"--window: {exc}", EXIT_USAGE) from None

    def snapshot() -> stats_ops.Stats:
        with guarded(loaded):
            result: stats_ops.Stats = loaded.run(
                stats_ops.stats_flow(loaded.settings, loaded.registry, loaded.clock.now(), window_s=window_s)
            )
        return result

    if not watch:
        snap = snapshot()
        if json_out:
            _json(snap.to_dict())
        else:
            _console().print(_stats_view(snap))
        return
    from rich.live import Live

    refreshes = 0
    with contextlib.suppress(KeyboardInterrupt), contextlib.ExitStack() as stack:
        live = None if json_out else stack.enter_context(Live(console=_console(), auto_refresh=False))
        while True:
            snap = snapshot()
            refreshes += 1
            if live is None:
                _json(snap.to_dict())  # one JSON document per line
            else:
                live.update(_stats_view(snap), refresh=True)
            if count and refreshes >= count:
                break
            time.sleep(interval)


def _stats_view(snap: stats_ops.Stats) -> Table:
    outer = Table.grid()
    queues = Table(title="queues", title_justify="left", show_edge=False)
    for col in ("queue", "visible", "in flight", "delayed", "dlq"):
        queues.add_column(col, justify="right" if col != "queue" else "left")
    for q in snap.queues:
        if q.error:
            queues.add_row(escape(q.queue), f"[red]{escape(q.error)}[/]", "", "", "")
        else:
            dlq = f"[red]{q.dlq}[/]" if q.dlq else str(q.dlq)
            queues.add_row(escape(q.queue), str(q.visible), str(q.in_flight), str(q.delayed), dlq)
    window = _ago(snap.window_s).removesuffix(" ago")
    types = Table(title=f"job types (finished: last {window})", title_justify="left", show_edge=False)
    cols = (
        "type",
        "queued",
        "retry",
        "running",
        "stuck",
        "succeeded",
        "dead",
        "cancelled",
        "held",
        "oldest due",
    )
    for col in cols:
        types.add_column(col, justify="left" if col == "type" else "right")
    for t in snap.types:
        c = t.counts
        stuck = f"[red]{t.expired_leases}[/]" if t.expired_leases else "0"
        dead = f"[red]{c.get('dead', 0)}[/]" if c.get("dead") else "0"
        oldest = _ago(t.oldest_due_s).removesuffix(" ago") if t.oldest_due_s is not None else "-"
        types.add_row(escape(t.type), str(c.get("queued", 0)), str(c.get("retry_scheduled", 0)), str(c.get("running", 0)),
                      stuck, str(c.get("succeeded", 0)), dead, str(c.get("cancelled", 0)), str(t.held), oldest)  # fmt: skip
    outer.add_row(queues)
    outer.add_row("")
    outer.add_row(types)
    if snap.truncated:
        outer.add_row(f"[yellow]counts truncated at {stats_ops.DEFAULT_MAX_ENTRIES} entries per status[/]")
    return outer


def doctor(app: AppOpt, endpoint_url: EndpointOpt = None, json_out: JsonOpt = False) -> None:
    """Check the table, indexes, TTL, queues, DLQs, redrive and visibility against the app; exit 1 on any fail."""
    loaded = load_app(app, endpoint_url)
    with guarded(loaded):
        checks: list[doctor_ops.Check] = loaded.run(doctor_ops.doctor_flow(loaded.settings, loaded.registry))
    failed = any(c.level == "fail" for c in checks)
    if json_out:
        typer.echo(doctor_ops.encode(checks))
    else:
        table = Table(show_edge=False)
        for col in ("", "check", "detail", "fix"):
            table.add_column(col, overflow="fold")
        mark = {"ok": "[green]ok[/]", "warn": "[yellow]warn[/]", "fail": "[red]FAIL[/]"}
        for c in checks:
            table.add_row(mark[c.level], escape(c.name), escape(c.detail), escape(c.fix))
        console = _console()
        console.print(table)
        console.print("[red]doctor found problems[/]" if failed else "[green]all checks passed[/]")
    if failed:
        raise typer.Exit(EXIT_ERROR)
