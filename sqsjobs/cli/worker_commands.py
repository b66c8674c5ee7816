"""``sqsjobs workers``: the ECS worker processes in the registry, their status and what each runs now.

The work is done by ``sqsjobs.ops.worker_views`` (the same flow ``GET /workers`` and the dashboard call);
errors go through ``sqsjobs.cli.common.guarded``. Lambda workers are not listed: the function is
the worker, seen in CloudWatch.
"""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from sqsjobs.cli.common import AppOpt, EndpointOpt, JsonOpt, guarded, load_app
from sqsjobs.cli.render import ago, print_json, stdout_console
from sqsjobs.ops import worker_views

_STATUS_STYLE = {"live": "green", "draining": "yellow", "silent": "red"}


def workers(app: AppOpt, endpoint_url: EndpointOpt = None, json_out: JsonOpt = False) -> None:
    """List live, draining and silent ECS workers with their queues and the jobs each runs now."""
    loaded = load_app(app, endpoint_url)
    now = loaded.clock.now()
    with guarded(loaded):
        found: list[worker_views.WorkerInfo] = loaded.run(
            worker_views.list_workers_flow(loaded.settings, now)
        )
    if json_out:
        print_json({"workers": [w.to_dict() for w in found], "counts": worker_views.count_workers(found)})
        return
    table = Table(show_edge=False)
    for col in ("worker", "status", "host", "pid", "version", "queues", "running", "last seen", "started"):
        table.add_column(col, overflow="fold")
    for w in found:
        style = _STATUS_STYLE[w.status.value]
        running = f"{w.running_count}/{w.concurrency}"
        if w.running:
            more = w.running_count - len(w.running)
            running += " " + ", ".join(w.running) + (f" (+{more})" if more > 0 else "")
        table.add_row(
            escape(w.id),
            f"[{style}]{w.status.value}[/]",
            escape(w.host),
            str(w.pid),
            escape(w.version),
            escape(",".join(w.queues)),
            escape(running),
            ago(now - w.last_seen),
            ago(now - w.started_at),
        )
    console = stdout_console()
    console.print(table)
    counts = worker_views.count_workers(found)
    console.print(", ".join(f"{n} {status}" for status, n in counts.items()))
