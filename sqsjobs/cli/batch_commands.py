"""``sqsjobs batches get|list``: a batch with its tree of child batches, and the newest batches.

The work is done by ``sqsjobs.ops.batch_views``; errors go through ``sqsjobs.cli.common.guarded``
(an unknown batch id exits 3, like an unknown job id).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.table import Table
from rich.tree import Tree

from sqsjobs.batches.namespace import env_of, list_flow
from sqsjobs.cli.common import AppOpt, EndpointOpt, JsonOpt, guarded, load_app
from sqsjobs.cli.render import print_json, stdout_console, when
from sqsjobs.ops import batch_views

if TYPE_CHECKING:
    from sqsjobs.batches.namespace import BatchStatus

batches_cli = typer.Typer(
    no_args_is_help=True, help="See batches: counts, completion, their tree of child batches."
)

_STYLE = {"open": "cyan", "sealed": "yellow", "complete": "green"}


def _line(st: BatchStatus, now: float) -> str:
    status = "failed" if st.failed else st.status
    style = "red" if st.failed else _STYLE.get(st.status, "white")
    counts = st.counts
    line = (
        f"[bold]{escape(st.id)}[/bold]  [{style}]{status}[/{style}]  "
        f"{counts['succeeded']} succeeded, {counts['failed']} failed, {counts['pending']} pending"
    )
    if st.children:
        line += f"  children {st.children_complete}/{len(st.children)} complete"
    line += f"  → {escape(st.on_complete)}"
    if st.callback_id:
        line += f" (job {escape(st.callback_id)})"
    if st.completed_at:
        line += f"  completed {when(st.completed_at, now)}"
    if st.reason:
        line += f"  ({escape(st.reason)})"
    return line


def _add(tree: Tree, node: batch_views.BatchNode, now: float) -> None:
    for child in node.children:
        _add(tree.add(_line(child.status, now)), child, now)


@batches_cli.command("get")
def batches_get(
    batch_id: Annotated[str, typer.Argument(help="Batch id")],
    app: AppOpt,
    endpoint_url: EndpointOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """The batch, its counts and callback, with the tree of its child batches below it."""
    loaded = load_app(app, endpoint_url)
    with guarded(loaded):
        node = loaded.run(batch_views.tree_flow(env_of(loaded.kernel), batch_id))
    if json_out:
        print_json(batch_views.node_to_dict(node))
        return
    now = time.time()
    tree = Tree(_line(node.status, now))
    _add(tree, node, now)
    console = stdout_console()
    console.print(tree)
    st = node.status
    if st.parent_id:
        console.print(f"parent {escape(st.parent_id)}, root {escape(st.root_id)}", style="dim")


@batches_cli.command("list")
def batches_list(
    app: AppOpt,
    endpoint_url: EndpointOpt = None,
    limit: Annotated[int, typer.Option(help="Newest batches to show")] = 50,
    json_out: JsonOpt = False,
) -> None:
    """The newest batches, with their counts."""
    loaded = load_app(app, endpoint_url)
    with guarded(loaded):
        rows = loaded.run(list_flow(env_of(loaded.kernel), limit=limit))
    if json_out:
        print_json({"batches": [batch_views.status_to_dict(r) for r in rows]})
        return
    now = time.time()
    table = Table(show_edge=False)
    for col in (
        "id",
        "status",
        "succeeded",
        "failed",
        "pending",
        "callback",
        "parent",
        "created",
        "completed",
    ):
        table.add_column(col, overflow="fold")
    for r in rows:
        status = "failed" if r.failed else r.status
        table.add_row(
            r.id,
            status,
            str(r.counts["succeeded"]),
            str(r.counts["failed"]),
            str(r.counts["pending"]),
            escape(r.on_complete),
            r.parent_id or "-",
            when(r.created_at, now),
            when(r.completed_at, now),
        )
    console = stdout_console()
    console.print(table)
    console.print(f"{len(rows)} batch(es)", style="dim")
