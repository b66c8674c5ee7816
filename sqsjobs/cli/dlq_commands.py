"""``sqsjobs dlq list|show|replay``: what is in the dead-letter queues, and replaying it safely.

The work is done by ``sqsjobs.ops.dlq`` and ``sqsjobs.ops.replay``; errors go through
``sqsjobs.cli.common.guarded`` (one line, an exit code from the table there).
"""

from __future__ import annotations

import contextlib
import signal
import time
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from sqsjobs.cli.common import (
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_NOT_FOUND,
    EXIT_PARTIAL,
    EXIT_USAGE,
    AppOpt,
    EndpointOpt,
    JsonOpt,
    PayloadFileOpt,
    QueueOpt,
    SinceOpt,
    abort,
    duration_option,
    guarded,
    load_app,
    payload_file,
)
from sqsjobs.cli.confirm import YesOpt, confirm_or_exit
from sqsjobs.cli.progress import progress_bar
from sqsjobs.cli.render import (
    print_json,
    render_job,
    status_markup,
    stderr_console,
    stdout_console,
    when,
)
from sqsjobs.errors import JobNotFound
from sqsjobs.ops import digest as digest_ops
from sqsjobs.ops import dlq as dlq_ops
from sqsjobs.ops import inspect as inspect_ops
from sqsjobs.ops import job_views
from sqsjobs.ops import replay as replay_ops
from sqsjobs.ops._common import app_queues
from sqsjobs.ops.requeue import KEEP
from sqsjobs.transport import dead_letters

if TYPE_CHECKING:
    from rich.console import Console

    from sqsjobs.app import App
    from sqsjobs.transport.dead_letters import DlqMessage

dlq_cli = typer.Typer(
    no_args_is_help=True, help="What is in the dead-letter queues, and replaying it safely."
)

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
    age = None if since is None else duration_option(since, "--since")
    return dlq_ops.DlqFilter(
        types=frozenset(types or ()),
        error_classes=frozenset(errors or ()),
        job_ids=frozenset(ids or ()),
        since=app.clock.now() - age if age is not None else None,
    )


def _record_statuses(app: App, messages: list[DlqMessage]) -> dict[str, str]:
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
    group_by: Annotated[
        str | None,
        typer.Option("--group-by", help="error: one line per job type and error signature (the digest's)"),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """What is in the DLQs and why; the record's current status says whether it is still dead."""
    loaded = load_app(app, endpoint_url)
    if group_by not in (None, "error"):
        raise abort(f"--group-by takes 'error', got {group_by!r}", EXIT_USAGE)
    flt = _filter(loaded, job_type, error_class, since)
    with guarded(loaded):
        messages = loaded.run(
            dlq_ops.browse_flow(loaded.queue_urls, app_queues(loaded.registry, queue), flt, limit=limit)
        )
        statuses = _record_statuses(loaded, messages) if group_by is None else {}
    if group_by is not None:
        _grouped(messages, json_out)
        return
    if json_out:
        print_json(
            {"messages": [m.to_dict() | {"record_status": statuses.get(m.job_id or "")} for m in messages]}
        )
        return
    now = time.time()
    table = Table(show_edge=False)
    for col in ("message", "job", "type", "reason", "error", "sent", "record"):
        table.add_column(col, overflow="fold")
    for m in messages:
        error = f"{m.error_class}: {m.error_message}" if m.error_class else ""
        record = statuses.get(m.job_id or "")
        table.add_row(
            m.message_id,
            escape(m.job_id or "-"),
            escape(m.job_type or "-"),
            escape(m.malformed or m.reason),
            escape(error[:120]),
            when(m.sent_at, now),
            status_markup(record) if record else "[red]no record[/]",
        )
    console = stdout_console()
    console.print(table)
    console.print(f"{len(messages)} message(s)", style="dim")


def _grouped(messages: list[DlqMessage], json_out: bool) -> None:
    """``--group-by error``: the messages as digest groups (type + error signature), the largest first."""
    groups = digest_ops.group(
        (
            m.job_type or "-",
            m.error_class or m.malformed or m.reason,
            m.error_message,
            m.job_id or m.message_id,
            m.sent_at,
        )
        for m in messages
    )
    if json_out:
        print_json({"groups": [g.to_dict() for g in groups]})
        return
    table = Table(show_edge=False)
    for column in ("count", "type", "signature", "e.g."):
        table.add_column(column, overflow="fold")
    for g in groups:
        table.add_row(str(g.count), escape(g.job_type), escape(g.signature), escape(g.samples[0]))
    console = stdout_console()
    console.print(table)
    console.print(f"{len(messages)} message(s) in {len(groups)} group(s)", style="dim")


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
        print_json({"message": message.to_dict(), "job": job_views.job_to_dict(job) if job else None})
        return
    console = stdout_console()
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column(overflow="fold")
    for label, value in (
        ("message", message.message_id),
        ("queue", f"{message.queue} (from {message.source_queue or '?'})"),
        ("sent", when(message.sent_at)),
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
    render_job(job, job_views.job_to_dict(job))


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
    payload: PayloadFileOpt = None,
    json_out: JsonOpt = False,
    yes: YesOpt = False,
) -> None:
    """Requeue dead jobs from the DLQs: re-validated, same id and key, attempts reset, audited.

    The DLQ copy is deleted only after the job is queued again. Ctrl-C stops after the current
    message; a re-run carries on and never requeues a job twice. --payload gives every job replayed
    that payload instead of its own; it needs --job-id or --type, and --dry-run shows what changes.
    """
    if payload is not None and not (job_id or job_type):
        raise abort(
            "--payload replaces the payload of every job replayed: select them with --job-id or --type",
            EXIT_USAGE,
        )
    data = KEEP if payload is None else payload_file(payload)
    loaded = load_app(app, endpoint_url)
    flt = _filter(loaded, job_type, error_class, since, job_id)
    queues = app_queues(loaded.registry, queue)
    stop = {"requested": False}

    def on_sigint(signum: int, frame: Any) -> None:
        if stop["requested"]:
            raise KeyboardInterrupt
        stop["requested"] = True
        stderr_console().print("stopping after the current message (Ctrl-C again to quit at once)")

    try:
        previous: Any = signal.signal(signal.SIGINT, on_sigint)
    except ValueError:  # not the main thread (embedded use): Ctrl-C then stops at once, losing nothing
        previous = None
    console = stdout_console()
    try:
        with guarded(loaded):
            depths = loaded.run(dead_letters.depth_flow(loaded.queue_urls, queues))
            total = sum(d.visible for d in depths)
            if total and not dry_run:
                confirm_or_exit(
                    f"Replay up to {total} message(s) from the DLQs of {', '.join(queues)} (filters apply)?",
                    yes=yes,
                )
            with progress_bar("replay", json_out=json_out) as progress:
                task = progress.add_task("", total=total or None)

                def on_item(item: replay_ops.ReplayItem) -> None:
                    progress.update(task, advance=1, description=item.outcome)

                summary: replay_ops.ReplaySummary = loaded.run(
                    replay_ops.replay_flow(
                        settings=loaded.settings,
                        registry=loaded.registry,
                        queue_urls=loaded.queue_urls,
                        queues=queues,
                        flt=flt,
                        clock=loaded.clock,
                        dry_run=dry_run,
                        limit=limit,
                        rate=rate,
                        on_item=on_item,
                        should_stop=lambda: stop["requested"],
                        payload=data,
                    )
                )
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    if json_out:
        print_json(summary.to_dict())
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
