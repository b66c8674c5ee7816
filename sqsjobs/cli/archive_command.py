"""``sqsjobs archive-ddl``: the Athena table over the App's archive of finished records (docs/archive.md)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

import typer

from sqsjobs.archive.records import athena_ddl
from sqsjobs.cli.common import AppOpt, JsonOpt, load_app
from sqsjobs.cli.render import print_json


def archive_ddl(
    app: AppOpt,
    table: Annotated[str, typer.Option(help="The Athena table's name")] = "sqsjobs_archive",
    first_day: Annotated[
        str,
        typer.Option(
            help="The first day the archive holds (YYYY-MM-DD): the partitions projected start there"
        ),
    ] = "",
    json_out: JsonOpt = False,
) -> None:
    """Print the CREATE EXTERNAL TABLE that makes the archive queryable with Athena (partition projection)."""
    loaded = load_app(app, None)
    day = first_day or datetime.now(UTC).strftime("%Y-%m-%d")
    types = [spec.name for spec in loaded.registry]
    ddl = athena_ddl(table, loaded.settings.payload_bucket, types, day)
    if json_out:
        print_json({"table": table, "first_day": day, "job_types": sorted(types), "ddl": ddl})
        return
    typer.echo(ddl)
