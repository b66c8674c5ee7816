"""``sqsjobs digest``: the last day's dead jobs, one line per job type and error signature.

The grouping is ``sqsjobs.ops.digest`` (also behind ``sqsjobs dlq list --group-by error``);
``--publish`` sends it as a ``DeadJobsDigest`` event on the App's bus (docs/events.md).
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from sqsjobs.cli.common import AppOpt, EndpointOpt, JsonOpt, duration_option, guarded, load_app
from sqsjobs.cli.render import print_json, stdout_console
from sqsjobs.ops import digest as digest_ops
from sqsjobs.ops._common import iso


def digest(
    app: AppOpt,
    endpoint_url: EndpointOpt = None,
    window: Annotated[str, typer.Option(help="Dead jobs finished this recently (30m, 2h, 7d)")] = "24h",
    publish: Annotated[
        bool, typer.Option("--publish", help="Also send it as a DeadJobsDigest event on SQSJOBS_EVENT_BUS")
    ] = False,
    json_out: JsonOpt = False,
) -> None:
    """Dead jobs of the last day grouped by type and error signature (class + message, ids and numbers taken out)."""
    loaded = load_app(app, endpoint_url)
    window_s = duration_option(window, "--window")
    with guarded(loaded):
        result = loaded.run(digest_ops.digest_flow(loaded.settings, loaded.clock.now(), window_s=window_s))
        if publish:
            loaded.run(digest_ops.publish_digest_flow(loaded.settings, result))
    if json_out:
        print_json(result.to_dict())
        return
    table = Table(show_edge=False)
    for column in ("count", "type", "signature", "last", "e.g."):
        table.add_column(column, overflow="fold")
    for g in result.groups:
        table.add_row(
            str(g.count), escape(g.job_type), escape(g.signature), iso(g.last) or "-", escape(g.samples[0])
        )
    console = stdout_console()
    console.print(table)
    console.print(
        f"{result.total} dead job(s) in {len(result.groups)} group(s) since {iso(result.since)}", style="dim"
    )
