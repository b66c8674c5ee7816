"""The progress bar of the long bulk commands (bulk cancel, DLQ replay), on stderr and only for a person.

A bulk cancel scans the whole table and a replay walks a DLQ message by message: minutes on a large
table, with nothing printed until the end. The bar goes to stderr, so stdout keeps only the result,
and it is off when stderr is not a terminal (a script, a pipe, CI: no escape codes in their logs) and
with ``--json`` (whose reader wants one document and nothing else).
"""

from __future__ import annotations

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from sqsjobs.cli.render import stderr_console


def progress_bar(label: str, *, json_out: bool, counted: bool = True) -> Progress:
    """A transient bar titled ``label``: ``done/total`` when ``counted``, else the task's ``description`` alone.

    Use it as a context manager; ``add_task(description, total=...)`` and ``update(...)`` as rich's.
    A total of None makes the bar pulse (a scan's length is unknown until it ends).
    """
    console = stderr_console()
    columns = [TextColumn(label), BarColumn()]
    if counted:
        columns.append(MofNCompleteColumn())
    columns.append(TextColumn("{task.description}"))
    return Progress(*columns, console=console, transient=True, disable=json_out or not console.is_terminal)
