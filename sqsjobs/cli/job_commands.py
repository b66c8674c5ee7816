"""``sqsjobs jobs get|list|cancel|retry``: find a job, see why it failed, cancel or retry it.

The work is done by ``sqsjobs.ops.inspect`` and the App; errors go through
``sqsjobs.cli.common.guarded`` (one line, an exit code from the table there).
"""

from __future__ import annotations

import json
from pathlib import Path  # noqa: TC003 (typer reads the annotation at runtime)
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.table import Table

from sqsjobs.cli.common import (
    EXIT_REFUSED,
    EXIT_USAGE,
    AppOpt,
    EndpointOpt,
    JsonOpt,
    PayloadFileOpt,
    abort,
    duration_option,
    guarded,
    load_app,
    payload_file,
)
from sqsjobs.cli.confirm import YesOpt, confirm_or_exit
from sqsjobs.cli.progress import progress_bar
from sqsjobs.cli.render import print_json, render_job, status_markup, stdout_console, when
from sqsjobs.errors import JobNotFound, PayloadError
from sqsjobs.job import JobStatus
from sqsjobs.ops import bulk_cancel, job_views
from sqsjobs.ops import inspect as inspect_ops
from sqsjobs.ops._common import iso
from sqsjobs.ops.requeue import KEEP

if TYPE_CHECKING:
    from sqsjobs.app import App

jobs_cli = typer.Typer(no_args_is_help=True, help="Find a job, see why it failed, cancel or retry it.")


@jobs_cli.command("get")
def jobs_get(
    job_id: Annotated[str, typer.Argument(help="Job id")],
    app: AppOpt,
    endpoint_url: EndpointOpt = None,
    json_out: JsonOpt = False,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            help="Write the job's result (JSON) to this file and show only its reference: for a "
            "result too large to read on a terminal (one kept in S3)",
        ),
    ] = None,
) -> None:
    """The job's record: status, attempts, lease, times, result, last error, history and audit."""
    loaded = load_app(app, endpoint_url)
    with guarded(loaded):
        try:
            job = loaded.get(job_id)
        except JobNotFound:
            if loaded.settings.archive_days <= 0:
                raise
            job = loaded.archive.get(job_id)  # its record is gone (TTL): the archive keeps it
    if output is not None:
        output.write_text(json.dumps(job.result))
        job = job.evolve(result=None)
    data = job_views.job_to_dict(job)
    if output is not None:
        data["result_written_to"] = str(output)
    if json_out:
        print_json(data)
        return
    render_job(job, data)
    if output is not None:
        stdout_console().print(f"result written to {escape(str(output))}")


@jobs_cli.command("list")
def jobs_list(
    app: AppOpt,
    endpoint_url: EndpointOpt = None,
    status: Annotated[JobStatus | None, typer.Option(help="Only jobs in this state")] = None,
    job_type: Annotated[str | None, typer.Option("--type", help="Only this job type")] = None,
    queue: Annotated[str | None, typer.Option(help="Only this logical queue")] = None,
    tenant: Annotated[str | None, typer.Option(help="Only this tenant")] = None,
    tag: Annotated[
        str | None, typer.Option(help="Only jobs with this tag, name=value (read from the tags index)")
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(
            help="Only jobs updated this recently, e.g. 30m, 2h, 7d (default 24h; --status dead: "
            "finished this recently, default all)"
        ),
    ] = None,
    limit: Annotated[
        int, typer.Option(help=f"Rows per page (1..{inspect_ops.MAX_LIMIT})")
    ] = inspect_ops.DEFAULT_LIMIT,
    cursor: Annotated[
        str | None, typer.Option(help="Next page: the cursor the previous page printed")
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Jobs, newest first, one page per call, paginated with --cursor.

    --status dead reads the attention index (dead jobs only), --tag the tags index (newest first);
    every other listing scans the table within the window, reading a bounded number of items per
    call, and sorts each page.
    """
    loaded = load_app(app, endpoint_url)
    query = inspect_ops.ListQuery(
        status,
        job_type,
        queue,
        tenant,
        None if since is None else duration_option(since, "--since"),
        limit,
        cursor,
        tag=tag,
    )
    now = loaded.clock.now()
    with guarded(loaded):
        page: inspect_ops.JobPage = loaded.run(inspect_ops.list_flow(loaded.settings, query, now))
    if json_out:
        print_json(
            {
                "jobs": [r.to_dict() for r in page.rows],
                "next_cursor": page.next_cursor,
                "index": page.index,
                "read": page.read,
                "since": iso(page.since),
            }
        )
        return
    console = stdout_console()
    at_label = "finished" if page.index == inspect_ops.ATTENTION else "updated"
    table = Table(show_edge=False)
    table.add_column("id", no_wrap=True)
    for col in ("status", "type", "queue", "tenant", "attempt", "created", at_label, "reason"):
        table.add_column(col, overflow="fold")
    for r in page.rows:
        attempt = f"{r.attempt}/{r.max_attempts}" if r.attempt is not None else "-"
        table.add_row(
            r.id,
            status_markup(r.status),
            escape(r.type),
            escape(r.queue),
            escape(r.tenant or "-"),
            attempt,
            when(r.created_at, now),
            when(r.at, now),
            escape(r.reason or ""),
        )
    console.print(table)
    if page.index == inspect_ops.ATTENTION:
        source = f"via index {page.index}, {len(page.partitions)} dead shards ({page.read} entries read)"
    elif page.index == inspect_ops.TAGS:
        source = f"tagged {tag} via index {page.index} ({page.read} entries and records read)"
    else:
        source = (
            f"via a table scan ({page.read} items read, updated since {when(page.since, now)}; "
            "sorted newest first within the page)"
        )
    console.print(f"{len(page.rows)} job(s) {source}", style="dim")
    if page.next_cursor:
        console.print(f"more: --cursor {page.next_cursor}")


@jobs_cli.command("cancel")
def jobs_cancel(
    app: AppOpt,
    job_id: Annotated[str | None, typer.Argument(help="Job id (or select jobs with --type)")] = None,
    endpoint_url: EndpointOpt = None,
    job_type: Annotated[
        str | None, typer.Option("--type", help="Bulk: cancel the waiting jobs of this type")
    ] = None,
    status: Annotated[
        JobStatus, typer.Option(help="Bulk: only jobs in this state (queued or retry_scheduled)")
    ] = JobStatus.QUEUED,
    tenant: Annotated[str | None, typer.Option(help="Bulk: only this tenant's jobs")] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Bulk: count what would be cancelled, change nothing")
    ] = False,
    limit: Annotated[int | None, typer.Option(help="Bulk: cancel at most this many jobs in this run")] = None,
    rate: Annotated[float | None, typer.Option(help="Bulk: at most this many cancels per second")] = None,
    resume: Annotated[str | None, typer.Option(help="Bulk: continue the operation with this id")] = None,
    page_size: Annotated[
        int, typer.Option(help="Bulk: items each Scan request reads (a checkpoint after each)")
    ] = bulk_cancel.DEFAULT_PAGE_SIZE,
    json_out: JsonOpt = False,
    yes: YesOpt = False,
) -> None:
    """Cancel a waiting job, or ask a running one to stop at its next heartbeat; or, with --type, every waiting job of a type.

    Bulk: a Scan finds the jobs (no status index: it reads the whole table, read units only) and
    each gets the conditional cancel, with an audit entry; a job that started meanwhile is skipped.
    The operation's id is printed first: --resume ID continues a run that was cut short, without
    cancelling any job twice (see docs/flow-control-expiry.md).
    """
    loaded = load_app(app, endpoint_url)
    bulk = job_type is not None or resume is not None
    if (job_id is None) == (not bulk) or (job_id is not None and bulk):
        raise abort("give a job id, or --type (or --resume) for a bulk cancel, not both", EXIT_USAGE)
    if bulk:
        if not dry_run and resume is None:
            whose = f" of tenant {tenant}" if tenant else ""
            confirm_or_exit(f"Cancel every {status.value} job of type {job_type}{whose}?", yes=yes)
        _bulk_cancel(
            loaded,
            bulk_cancel.BulkCancel(job_type or "", status, tenant, dry_run, limit, rate, page_size),
            resume,
            json_out,
        )
        return
    assert job_id is not None
    with guarded(loaded):
        outcome = loaded.cancel(job_id)
    if json_out:
        print_json({"id": job_id, "result": outcome})
    elif outcome == "cancelled":
        stdout_console().print(f"job {job_id} cancelled")
    else:
        stdout_console().print(f"job {job_id} is running: cancel requested, it stops at its next heartbeat")


def _bulk_cancel(loaded: App, spec: bulk_cancel.BulkCancel, resume: str | None, json_out: bool) -> None:
    def started(op_id: str) -> None:
        if not json_out:  # first, so that a run cut short can be resumed
            typer.echo(f"operation {op_id}" + (" (dry run: nothing is written)" if spec.dry_run else ""))

    # The Scan's length is unknown until it ends (no status index, on purpose): the bar pulses and
    # counts what it has read, matched and cancelled, page by page.
    with guarded(loaded), progress_bar("cancel", json_out=json_out, counted=False) as progress:
        task = progress.add_task("", total=None)

        def on_page(so_far: bulk_cancel.BulkCancelReport) -> None:
            verb = "would cancel" if so_far.dry_run else "cancelled"
            progress.update(
                task, description=f"{so_far.read} read, {so_far.matched} matched, {so_far.cancelled} {verb}"
            )

        report: bulk_cancel.BulkCancelReport = loaded.run(
            bulk_cancel.bulk_cancel_flow(
                loaded.settings,
                loaded.registry,
                spec,
                loaded.clock,
                resume=resume,
                on_start=started,
                on_page=on_page,
            )
        )
    if json_out:
        print_json(report.to_dict())
        return
    verb = "would cancel" if report.dry_run else "cancelled"
    skipped = ", ".join(f"{n} {why}" for why, n in sorted(report.skipped.items())) or "none"
    stdout_console().print(
        f"matched {report.matched}, {verb} {report.cancelled}, skipped {skipped} ({report.read} items read)"
    )
    if not report.done and not report.dry_run:
        stdout_console().print(f"not finished: sqsjobs jobs cancel --resume {report.op_id} to go on")


@jobs_cli.command("retry")
def jobs_retry(
    job_id: Annotated[str, typer.Argument(help="Job id")],
    app: AppOpt,
    endpoint_url: EndpointOpt = None,
    payload: PayloadFileOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Put a dead or cancelled job back in its queue: attempts reset, same id and key, audit entry kept.

    With --payload the job runs with that payload instead of its own (see docs/payloads.md).
    """
    data = KEEP if payload is None else payload_file(payload)
    loaded = load_app(app, endpoint_url)
    with guarded(loaded):
        try:
            job = loaded.retry(job_id, payload=data)
        except PayloadError as exc:  # the job is fine; the current code refuses its payload, or the new one
            raise abort(str(exc), EXIT_REFUSED if data is KEEP else EXIT_USAGE) from None
    if json_out:
        print_json(
            {
                "id": job.id,
                "status": job.status.value,
                "queue": job.queue,
                "max_attempts": job.max_attempts,
                "payload_hash": job.payload_hash,
                "payload_version": job.payload_version,
            }
        )
    else:
        replaced = "" if data is KEEP else f" with the new payload (hash {(job.payload_hash or '')[:12]})"
        stdout_console().print(
            f"job {job.id} queued again on {job.queue}{replaced} (attempts 0/{job.max_attempts})"
        )
