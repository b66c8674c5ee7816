"""The confirmation a bulk change asks for on a terminal (bulk cancel, DLQ replay); ``--yes`` skips it.

Asked only when both stdin and stderr are a terminal: a script, a pipe or CI is not asked (there is
no one to answer), so existing automation keeps working; ``--yes`` says so explicitly. ``--dry-run``
changes nothing and is never asked. Declining exits 130 with nothing changed.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from sqsjobs.cli.common import EXIT_INTERRUPTED, EXIT_USAGE, abort

YesOpt = Annotated[
    bool, typer.Option("--yes", "-y", help="Do not ask for confirmation (it is only asked on a terminal)")
]


def confirm_or_exit(question: str, *, yes: bool) -> None:
    """Ask ``question`` on a terminal unless ``yes``; raise the exit when the answer is not yes."""
    if yes or not (sys.stdin.isatty() and sys.stderr.isatty()):
        return
    if not typer.confirm(question, default=False, err=True):
        raise abort("not confirmed: nothing was changed", EXIT_INTERRUPTED)


def consent_or_exit(question: str, *, yes: bool, refusal: str) -> None:
    """Like ``confirm_or_exit``, but off a terminal without ``yes`` nothing changes: exit 2 with ``refusal``.

    For a change that deletes what nobody asked to delete by name (``schedules apply`` removes every
    schedule the code no longer declares): a script that means it says ``--yes``.
    """
    if not yes and not (sys.stdin.isatty() and sys.stderr.isatty()):
        raise abort(refusal, EXIT_USAGE)
    confirm_or_exit(question, yes=yes)
