"""``sqsjobs priority``: move waiting jobs to another priority level from the shell.

The work is ``sqsjobs.ops.reprioritize`` (what ``POST /jobs/priority`` and the dashboard's
``/ui/priority`` do): the jobs are found (by ``--id``, or by ``--type`` and ``--tenant`` with a
Scan) and listed; with ``--dry-run`` nothing changes, otherwise the listed ids move after a
confirmation on a terminal (``--yes`` skips it).
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from sqsjobs.cli.common import (
    EXIT_NOT_FOUND,
    EXIT_PARTIAL,
    EXIT_REFUSED,
    EXIT_USAGE,
    AppOpt,
    EndpointOpt,
    JsonOpt,
    abort,
    guarded,
    load_app,
    out,
)
from sqsjobs.cli.confirm import YesOpt, confirm_or_exit
from sqsjobs.cli.progress import progress_bar
from sqsjobs.cli.render import print_json
from sqsjobs.ops import reprioritize


def priority(
    to: Annotated[str, typer.Argument(metavar="LEVEL", help="The level to move to: high, normal or low")],
    app: AppOpt,
    endpoint_url: EndpointOpt = None,
    job_type: Annotated[str | None, typer.Option("--type", help="The waiting jobs of this type")] = None,
    tenant: Annotated[str | None, typer.Option(help="With --type: only this tenant's jobs")] = None,
    job_id: Annotated[list[str] | None, typer.Option("--id", help="This job (repeatable)")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="List what would move; change nothing")] = False,
    yes: YesOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Move queued or retry_scheduled jobs to another priority level (the record, then the message)."""
    loaded = load_app(app, endpoint_url)
    if to not in reprioritize.LEVELS:
        raise abort(f"LEVEL must be one of {', '.join(reprioritize.LEVELS)}, got {to!r}", EXIT_USAGE)
    if not job_id and job_type is None:
        raise abort("name the jobs: --id ID (repeatable) or --type T", EXIT_USAGE)
    with guarded(loaded):
        if job_id:
            found = loaded.run(reprioritize.candidates_flow(loaded.settings, job_id, to))
            if missing := [c.job_id for c in found if c.status == "missing"]:
                raise abort(f"no such job: {', '.join(missing)}", EXIT_NOT_FOUND)
            if busy := [f"{c.job_id} is {c.status}" for c in found if not c.waiting]:
                raise abort(
                    f"only queued or retry_scheduled jobs change level: {'; '.join(busy)}", EXIT_REFUSED
                )
        else:
            assert job_type is not None
            loaded.registry.get(job_type)
            # A Scan (no index serves a type and a status): minutes on a large table, so it shows
            # what it has read and matched, page by page, on stderr.
            with progress_bar("scan", json_out=json_out, counted=False) as progress:
                task = progress.add_task("", total=None)
                found, _ = loaded.run(
                    reprioritize.find_flow(
                        loaded.settings,
                        job_type,
                        to,
                        tenant=tenant,
                        on_page=lambda read, matched: progress.update(
                            task, description=f"{read} read, {matched} waiting"
                        ),
                    )
                )
        ids = [c.job_id for c in found if not c.reason]
        if dry_run or not ids:
            if json_out:
                print_json(
                    {"dry_run": True, "to": to, "job_ids": ids, "candidates": [c.to_dict() for c in found]}
                )
            else:
                for c in found:
                    verdict = "would move" if not c.reason else escape(c.reason)
                    out.print(f"{escape(c.job_id)}  {c.status}  {c.level} → {to}: {verdict}")
                out.print(f"{len(ids)} of {len(found)} would move to {to}")
            return
        confirm_or_exit(f"move {len(ids)} jobs to {to}?", yes=yes)
        report = loaded.run(reprioritize.move_flow(loaded.settings, loaded.queue_urls, ids, to, loaded.clock))
    if json_out:
        print_json(report.to_dict())
    else:
        out.print(f"moved {len(report.moved)} jobs to {to} ({len(report.messages_moved)} with their message)")
        for job, why in report.skipped.items():
            out.print(f"skipped {escape(job)}: {escape(why)}")
        for job in report.left:
            out.print(f"{escape(job)}: its message was not visible; its next start comes from its old level")
    if report.skipped:
        raise typer.Exit(EXIT_PARTIAL)
