"""``sqsjobs chains get|cancel``: where a chain is, which step stopped it and why; cancel it.

The work is done by the App (``sqsjobs.chains.namespace``) and ``sqsjobs.ops.chain_views``; errors go
through ``sqsjobs.cli.common.guarded`` (one line, an exit code from the table there).
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from sqsjobs.cli.common import AppOpt, EndpointOpt, JsonOpt, guarded, load_app
from sqsjobs.cli.render import print_json, status_markup, stdout_console, when
from sqsjobs.ops.chain_views import chain_to_dict

chains_cli = typer.Typer(no_args_is_help=True, help="See a chain's steps and where it stopped; cancel it.")


@chains_cli.command("get")
def chains_get(
    chain_id: Annotated[str, typer.Argument(help="Chain id (what app.chains.start returned)")],
    app: AppOpt,
    endpoint_url: EndpointOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """The chain's state, and each step's job id and state (``sqsjobs jobs get`` shows a step in full)."""
    loaded = load_app(app, endpoint_url)
    with guarded(loaded):
        status = loaded.chains.get(chain_id)
    data = chain_to_dict(status)
    if json_out:
        print_json(data)
        return
    console = stdout_console()
    console.print(f"chain [bold]{escape(status.id)}[/bold] {status_markup(status.status)}")
    console.print(f"created {when(status.created_at)}, finished {when(status.finished_at)}")
    if status.stopped_at is not None:
        console.print(f"stopped at step {status.stopped_at}: {escape(status.reason or '-')}")
    if status.cancel_requested and status.status == "running":
        console.print("cancel requested: the running step stops at its next heartbeat")
    table = Table(title_justify="left")
    for column in ("#", "type", "job id", "status"):
        table.add_column(column, overflow="fold")
    for step in status.steps:
        state = status_markup(step.status.value) if step.status else "(expired)"
        table.add_row(str(step.position), escape(step.type), escape(step.job_id), state)
    console.print(table)


@chains_cli.command("cancel")
def chains_cancel(
    chain_id: Annotated[str, typer.Argument(help="Chain id")],
    app: AppOpt,
    endpoint_url: EndpointOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Cancel the chain: its waiting steps at once; a running step at its next heartbeat."""
    loaded = load_app(app, endpoint_url)
    with guarded(loaded):
        outcome = loaded.chains.cancel(chain_id)
    if json_out:
        print_json({"id": chain_id, "result": outcome})
        return
    stdout_console().print(f"chain {escape(chain_id)}: {escape(outcome)}")
