"""``sqsjobs outbox migrate|relay|count|dead|retry``: the Postgres outbox's tables and its relay (docs/outbox.md).

``relay`` runs until SIGTERM or Ctrl-C: it moves committed outbox rows to SQS and DynamoDB with the
App's ``enqueue_many``, wakes on the table's NOTIFY and polls every ``--poll`` seconds besides. A row
it can never enqueue is set aside in the dead table: ``dead`` lists those rows and why, ``retry``
puts them back once their cause is fixed.
"""

from __future__ import annotations

import signal
import threading
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from sqsjobs.cli.common import EXIT_USAGE, AppOpt, EndpointOpt, JsonOpt, abort, guarded, load_app, out
from sqsjobs.cli.render import print_json, when
from sqsjobs.outbox import OutboxRelay, migrate
from sqsjobs.outbox.dead import dead_count, dead_rows, retry
from sqsjobs.outbox.lag_metrics import LagMetrics
from sqsjobs.outbox.tables import CHANNEL, TABLE, count

outbox_cli = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    help="Jobs written in a Postgres transaction: create the outbox table, run its relay.",
)

DSN_HELP = "libpq connection string of the application's database [env: SQSJOBS_OUTBOX_DSN]"
DsnOpt = Annotated[str, typer.Option("--dsn", envvar="SQSJOBS_OUTBOX_DSN", help=DSN_HELP)]


@outbox_cli.command("migrate")
def migrate_command(dsn: DsnOpt, as_json: JsonOpt = False) -> None:
    """Create the outbox table, its index and its NOTIFY trigger (idempotent: safe at every deploy)."""
    with guarded():
        migrate(dsn)
    if as_json:
        print_json({"table": TABLE, "channel": CHANNEL})
    else:
        out.print(f"outbox table {TABLE} ready (NOTIFY channel {CHANNEL})")


@outbox_cli.command("count")
def count_command(dsn: DsnOpt, as_json: JsonOpt = False) -> None:
    """Print how many rows wait in the outbox (committed, not yet moved by a relay), and how many were set aside."""
    import psycopg

    with guarded(), psycopg.connect(dsn) as conn:
        waiting, dead = count(conn), dead_count(conn)
    if as_json:
        print_json({"rows": waiting, "dead": dead})
    elif dead:
        out.print(f"{waiting} (and {dead} set aside: sqsjobs outbox dead)")
    else:
        out.print(waiting)


@outbox_cli.command("dead")
def dead_command(
    dsn: DsnOpt,
    limit: Annotated[int, typer.Option("--limit", help="Rows to list, oldest first")] = 100,
    as_json: JsonOpt = False,
) -> None:
    """List the rows the relay set aside (it can never enqueue them as they are), with the reason."""
    import psycopg

    with guarded(), psycopg.connect(dsn) as conn:
        rows = dead_rows(conn, limit)
    if as_json:
        print_json({"rows": rows})
        return
    table = Table(show_edge=False)
    for column in ("id", "job id", "type", "partition", "set aside", "reason"):
        table.add_column(column)
    for r in rows:
        table.add_row(
            str(r["id"]),
            r["job_id"],
            escape(r["job_type"]),
            escape(r["partition"]),
            when(r["dead_at"]),
            escape(r["reason"]),
        )
    out.print(table)


@outbox_cli.command("retry")
def retry_command(
    dsn: DsnOpt,
    ids: Annotated[list[int] | None, typer.Argument(help="Dead-table ids (sqsjobs outbox dead)")] = None,
    every: Annotated[bool, typer.Option("--all", help="Every set-aside row")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Put set-aside rows back into the outbox (at the end of their partition) once their cause is fixed."""
    import psycopg

    if not ids and not every:
        raise abort("outbox retry needs dead-table ids or --all", EXIT_USAGE)
    with guarded(), psycopg.connect(dsn) as conn:
        moved = retry(conn, ids or (), every=every)
    if as_json:
        print_json({"retried": moved})
    else:
        out.print(f"{moved} row(s) back in the outbox")


@outbox_cli.command("relay")
def relay_command(
    app: AppOpt,
    dsn: Annotated[str | None, typer.Option("--dsn", envvar="SQSJOBS_OUTBOX_DSN", help=DSN_HELP)] = None,
    endpoint_url: EndpointOpt = None,
    batch_size: Annotated[
        int,
        typer.Option(
            "--batch-size", envvar="SQSJOBS_OUTBOX_BATCH", help="Rows per pass [env: SQSJOBS_OUTBOX_BATCH]"
        ),
    ] = 100,
    poll_s: Annotated[
        float,
        typer.Option(
            "--poll",
            envvar="SQSJOBS_OUTBOX_POLL_S",
            help="Seconds between passes without a NOTIFY [env: SQSJOBS_OUTBOX_POLL_S]",
        ),
    ] = 5.0,
) -> None:
    """Move committed outbox rows to SQS and the job records until SIGTERM/Ctrl-C."""
    loaded = load_app(app, endpoint_url)  # first: a bad --app is reported as every command reports it
    if not dsn:
        raise abort(
            "outbox relay needs --dsn (or SQSJOBS_OUTBOX_DSN): the database the outbox is in", EXIT_USAGE
        )
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    metrics = LagMetrics(loaded.name, interval_s=loaded.settings.metrics_interval_s)
    relay = OutboxRelay(dsn, loaded.enqueue_many, batch_size=batch_size, poll_s=poll_s, metrics=metrics)
    with guarded(loaded):
        relay.run(stop)
