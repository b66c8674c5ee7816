"""``sqsjobs stats`` and ``sqsjobs doctor``: queue and job-type health, and the deployment checked against the app.

The work is done by ``sqsjobs.ops.stats`` and ``sqsjobs.ops.doctor``; errors go through
``sqsjobs.cli.common.guarded`` (one line, an exit code from the table there).
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.table import Table

from sqsjobs.cli.common import EXIT_ERROR, AppOpt, EndpointOpt, JsonOpt, duration_option, guarded, load_app
from sqsjobs.cli.limits import flow_view, waiting_by_type
from sqsjobs.cli.progress import progress_bar
from sqsjobs.cli.render import ago, print_json, stdout_console
from sqsjobs.limits.namespace import FlowState, count_waiting, state_flow
from sqsjobs.ops import doctor as doctor_ops
from sqsjobs.ops import stats as stats_ops
from sqsjobs.ops import stranded as stranded_ops

if TYPE_CHECKING:
    from sqsjobs.app import App
    from sqsjobs.ops.checks import Check


def stats(
    app: AppOpt,
    endpoint_url: EndpointOpt = None,
    watch: Annotated[bool, typer.Option("--watch", help="Refresh until Ctrl-C")] = False,
    interval: Annotated[float, typer.Option(help="Seconds between refreshes with --watch")] = 2.0,
    count: Annotated[int, typer.Option(help="With --watch, stop after this many refreshes (0 = never)")] = 0,
    window: Annotated[str, typer.Option(help="Count finished jobs over this window")] = "1h",
    json_out: JsonOpt = False,
) -> None:
    """Per queue: visible, in flight, delayed, DLQ depth; per job type: counts by status, oldest due, stuck; workers."""
    loaded = load_app(app, endpoint_url)
    window_s = duration_option(window, "--window")

    def snapshot() -> tuple[stats_ops.Stats, FlowState]:
        with guarded(loaded):
            now = loaded.clock.now()
            result: stats_ops.Stats = loaded.run(
                stats_ops.stats_flow(loaded.settings, loaded.registry, now, window_s=window_s)
            )
            flow = loaded.run(state_flow(loaded.settings.table_name, loaded.registry, loaded.limits, now=now))
            count_waiting(flow, waiting_by_type(result))
        return result, flow

    def as_json(snap: tuple[stats_ops.Stats, FlowState]) -> dict[str, object]:
        return snap[0].to_dict() | {"flow_control": snap[1].to_dict()}

    def view(snap: tuple[stats_ops.Stats, FlowState]) -> Table:
        grid = Table.grid()
        grid.add_row(_stats_view(snap[0]))
        grid.add_row(flow_view(snap[1], snap[0].at))
        return grid

    if not watch:
        snap = snapshot()
        if json_out:
            print_json(as_json(snap))
        else:
            stdout_console().print(view(snap))
        return
    from rich.live import Live

    refreshes = 0
    with contextlib.suppress(KeyboardInterrupt), contextlib.ExitStack() as stack:
        live = None if json_out else stack.enter_context(Live(console=stdout_console(), auto_refresh=False))
        while True:
            snap = snapshot()
            refreshes += 1
            if live is None:
                print_json(as_json(snap))  # one JSON document per line
            else:
                live.update(view(snap), refresh=True)
            if count and refreshes >= count:
                break
            time.sleep(interval)


def _levels(levels: dict[str, int]) -> str:
    """``high 3, normal 5, low 20``: a queue's waiting messages per priority level (and FIFO)."""
    return ", ".join(f"{level} {n}" for level, n in levels.items())


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
            visible = str(q.visible) + (f" ({_levels(q.levels)})" if q.levels else "")
            queues.add_row(escape(q.queue), visible, str(q.in_flight), str(q.delayed), dlq)
    window = ago(snap.window_s).removesuffix(" ago")
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
        "expired",
        "held",
        "oldest due",
    )
    for col in cols:
        types.add_column(col, justify="left" if col == "type" else "right")
    for t in snap.types:
        c = t.counts
        stuck = f"[red]{t.expired_leases}[/]" if t.expired_leases else "0"
        dead = f"[red]{c.get('dead', 0)}[/]" if c.get("dead") else "0"
        oldest = ago(t.oldest_due_s).removesuffix(" ago") if t.oldest_due_s is not None else "-"
        counts = [str(c.get(s, 0)) for s in ("queued", "retry_scheduled", "running")]
        finished = [str(c.get("succeeded", 0)), dead, str(c.get("cancelled", 0)), str(c.get("expired", 0))]
        types.add_row(escape(t.type), *counts, stuck, *finished, str(t.held), oldest)
    outer.add_row(queues)
    outer.add_row("")
    outer.add_row(types)
    outer.add_row("")
    w = snap.workers
    silent = f"[red]{w.get('silent', 0)} silent[/]" if w.get("silent") else "0 silent"
    outer.add_row(f"workers: {w.get('live', 0)} live, {w.get('draining', 0)} draining, {silent}")
    if snap.truncated:
        outer.add_row(
            f"[yellow]counts truncated: the scan stopped after {stats_ops.DEFAULT_MAX_ENTRIES} records "
            "(a uniform sample of a larger table)[/]"
        )
    return outer


def doctor(
    app: AppOpt,
    endpoint_url: EndpointOpt = None,
    json_out: JsonOpt = False,
    stranded: Annotated[
        bool,
        typer.Option(
            "--stranded",
            help="Instead: scan every record for unfinished jobs nothing will bring back; exit 1 if any. "
            "It reads the whole table: for records of 1 KB, 125,000 read units ($0.016 on demand) and "
            "~1,000 requests per 1 M records, $1.56 per 100 M (docs/lifecycle.md)",
        ),
    ] = False,
    grace: Annotated[
        str, typer.Option(help="With --stranded: report a due job no claim took for this long")
    ] = "12h",
    segments: Annotated[
        int, typer.Option(min=1, max=64, help="With --stranded: Scan segments read in parallel")
    ] = stranded_ops.DEFAULT_SEGMENTS,
) -> None:
    """Check the table, indexes, TTL, queues, DLQs, redrive, visibility and retention against the app; exit 1 on any fail."""
    loaded = load_app(app, endpoint_url)
    if stranded:
        _stranded(loaded, json_out, grace_s=duration_option(grace, "--grace"), segments=segments)
        return
    with guarded(loaded):
        checks: list[Check] = loaded.run(doctor_ops.doctor_flow(loaded.settings, loaded.registry))
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
        console = stdout_console()
        console.print(table)
        console.print("[red]doctor found problems[/]" if failed else "[green]all checks passed[/]")
    if failed:
        raise typer.Exit(EXIT_ERROR)


def _stranded(loaded: App, json_out: bool, *, grace_s: float, segments: int) -> None:
    """``doctor --stranded``: the records without a witness (``ops/stranded.py``)."""
    # A Scan of the whole table, in parallel segments: the bar counts the items read as pages come.
    with guarded(loaded), progress_bar("scan", json_out=json_out, counted=False) as progress:
        task = progress.add_task("", total=None)
        read = [0]
        lock = threading.Lock()  # the segments' threads each report their pages

        def on_page(items: int) -> None:
            with lock:
                read[0] += items
                so_far = read[0]
            progress.update(task, description=f"{so_far} read")

        found = stranded_ops.find_stranded(
            loaded.run,
            loaded.settings,
            loaded.clock.now(),
            segments=segments,
            grace_s=grace_s,
            on_page=on_page,
        )
    if json_out:
        print_json(found.to_dict())
    else:
        console = stdout_console()
        if found.stranded:
            table = Table(show_edge=False)
            for col in ("job", "type", "queue", "status", "why"):
                table.add_column(col, overflow="fold")
            for s in found.stranded:
                table.add_row(escape(s.id), escape(s.type), escape(s.queue), s.status, escape(s.reason))
            console.print(table)
        units = f", {found.read_units:g} read units" if found.read_units else ""
        console.print(f"scanned {found.scanned} records in {found.segments} segments{units}")
        console.print(
            f"[red]{len(found.stranded)} stranded records[/]"
            if found.stranded
            else "[green]no stranded record[/]"
        )
    if found.stranded:
        raise typer.Exit(EXIT_ERROR)
