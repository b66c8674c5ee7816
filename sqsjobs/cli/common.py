"""What every ``sqsjobs`` sub-command shares: the --app/--endpoint-url options, loading, and errors."""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from sqsjobs.app import App

#: Results (tables, ids, --json) go to stdout; errors and progress to stderr.
out = Console()
console = Console(stderr=True)

AppOpt = Annotated[
    str,
    typer.Option("--app", envvar="SQSJOBS_APP", help="App to load, e.g. shop.jobs:app [env: SQSJOBS_APP]"),
]
EndpointOpt = Annotated[
    str | None,
    typer.Option(
        "--endpoint-url",
        envvar="SQSJOBS_ENDPOINT_URL",
        help="AWS endpoint (an emulator) [env: SQSJOBS_ENDPOINT_URL]",
    ),
]

EXIT_ERROR = 1
EXIT_USAGE = 2


def load_app(app_path: str, endpoint_url: str | None) -> App:
    """Import the App (the current directory is importable, as for ``python -m``)."""
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    app = App.from_path(app_path)
    if endpoint_url:
        app.configure(endpoint_url=endpoint_url)
    return app


def fail(exc: Exception, code: int = EXIT_ERROR) -> typer.Exit:
    """Print one actionable line and return the Exit to raise.

    The message is escaped: brackets in it (``pip install 'sqsjobs[local]'``, a DynamoDB path)
    are text, not rich markup.
    """
    console.print(f"[red]error:[/red] {escape(str(exc))}", soft_wrap=True, markup=True)
    return typer.Exit(code)
