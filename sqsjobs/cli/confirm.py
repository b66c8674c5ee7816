"""The confirmation a bulk change asks for on a terminal (bulk cancel, DLQ replay); ``--yes`` skips it.

Asked only when both stdin and stderr are a terminal: a script, a pipe or CI is not asked (there is
no one to answer), so existing automation keeps working; ``--yes`` says so explicitly. ``--dry-run``
changes nothing and is never asked. Declining exits 130 with nothing changed.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from sqsjobs.cli.common import EXIT_INTERRUPTED, abort

YesOpt = Annotated[
    bool, typer.Option("--yes", "-y", help="Do not ask for confirmation (it is only asked on a terminal)")
]


def confirm_or_exit(question: str, *, yes: bool) -> None:
    """Ask ``question`` on a terminal unless ``yes``; raise the exit when the answer is not yes."""
    if yes or not (sys.stdin.isatty() and sys.stderr.isatty()):
        return
    if not typer.confirm(question, default=False, err=True):
        raise abort("not confirmed: nothing was changed", EXIT_INTERRUPTED)
