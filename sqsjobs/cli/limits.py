"""``sqsjobs pause``, ``sqsjobs resume`` and ``sqsjobs limits``: flow control from the shell.

The work is in ``sqsjobs.limits.namespace``; ``flow_view`` is also the flow-control part of ``sqsjobs stats``.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from sqsjobs.cli.common import AppOpt, EndpointOpt, JsonOpt, guarded, load_app, out
from sqsjobs.cli.render import print_json, stdout_console, when
from sqsjobs.job import JobStatus
from sqsjobs.limits import namespace as limits_namespace
from sqsjobs.ops import stats as stats_ops

TypeArg = Annotated[str, typer.Argument(help="Job type, as registered")]


def pause(
    job_type: TypeArg,
    app: AppOpt,
    endpoint_url: EndpointOpt = None,
    reason: Annotated[str | None, typer.Option(help="Why (shown by stats and limits)")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Stop starting jobs of a type, fleet-wide, within seconds; they wait (attempts untouched)."""
    loaded = load_app(app, endpoint_url)
    with guarded(loaded):
        loaded.limits.pause(job_type, reason=reason)
    if json_out:
        print_json({"type": job_type, "paused": True, "reason": reason})
        return
    out.print(f"paused {escape(job_type)}" + (f" ({escape(reason)})" if reason else ""))


def resume(
    job_type: TypeArg, app: AppOpt, endpoint_url: EndpointOpt = None, json_out: JsonOpt = False
) -> None:
    """Start jobs of a paused type again (waiting jobs start as their messages come back)."""
    loaded = load_app(app, endpoint_url)
    with guarded(loaded):
        was = loaded.limits.resume(job_type)
    if json_out:
        print_json({"type": job_type, "resumed": was})
        return
    out.print(f"resumed {escape(job_type)}" if was else f"{escape(job_type)} was not paused")


def limits(
    app: AppOpt,
    endpoint_url: EndpointOpt = None,
    key: Annotated[
        list[str] | None, typer.Option(help="Show partitioned limits for this key value (repeatable)")
    ] = None,
    waiting: Annotated[
        bool, typer.Option(help="Count jobs waiting on each limit (one stats Scan: see `sqsjobs stats`)")
    ] = True,
    json_out: JsonOpt = False,
) -> None:
    """Each limit: running, rate, breaker state, jobs waiting on it; and the paused types."""
    loaded = load_app(app, endpoint_url)
    with guarded(loaded):
        now = loaded.clock.now()
        state = loaded.run(
            limits_namespace.state_flow(
                loaded.settings.table_name, loaded.registry, loaded.limits, now=now, keys=key or ()
            )
        )
        if waiting and state.limits:
            snap = loaded.run(stats_ops.stats_flow(loaded.settings, loaded.registry, now))
            limits_namespace.count_waiting(state, waiting_by_type(snap))
    if json_out:
        print_json(state.to_dict())
    else:
        stdout_console().print(flow_view(state, now))


def waiting_by_type(snap: stats_ops.Stats) -> dict[str, int]:
    """Queued and retry-scheduled jobs per type, from a stats snapshot."""
    statuses = (JobStatus.QUEUED.value, JobStatus.RETRY_SCHEDULED.value)
    return {t.type: sum(t.counts.get(s, 0) for s in statuses) for t in snap.types}


def flow_view(state: limits_namespace.FlowState, now: float) -> Table:
    """Paused types and limits, as two tables in a grid."""
    grid = Table.grid()
    paused = Table(title="paused types", title_justify="left", show_edge=False)
    for col in ("type", "since", "reason"):
        paused.add_column(col)
    for job_type, info in sorted(state.paused.items()):
        paused.add_row(escape(job_type), when(info.get("paused_at"), now), escape(info.get("reason") or ""))
    if not state.paused:
        paused.add_row("(none)", "", "")
    grid.add_row(paused)
    if state.limits:
        table = Table(title="limits", title_justify="left", show_edge=False)
        for col in ("limit", "types", "running", "rate (last window)", "breaker", "waiting"):
            table.add_column(col)
        for lim in state.limits:
            table.add_row(
                escape(lim.name),
                escape(", ".join(lim.job_types)),
                _running(lim),
                f"{lim.rate} ({lim.recent_starts})" if lim.rate else "-",
                _breaker(lim, now),
                "?" if lim.waiting is None else str(lim.waiting),
            )
        grid.add_row(table)
    return grid


def _running(lim: limits_namespace.LimitState) -> str:
    if lim.concurrency is None:
        return "-"
    if lim.key is None:
        return f"{lim.running}/{lim.concurrency}"
    if not lim.running_by_key:
        return f"per {lim.key}: ≤{lim.concurrency} (--key to show)"
    return ", ".join(f"{escape(k)}: {n}/{lim.concurrency}" for k, n in sorted(lim.running_by_key.items()))


def _breaker(lim: limits_namespace.LimitState, now: float) -> str:
    if lim.breaker is None:
        return "-"
    if lim.breaker_until:
        return f"{lim.breaker} until {when(lim.breaker_until, now)}"
    return f"{lim.breaker} ({lim.breaker_failures} recent failures)"
