"""What every ``sqsjobs`` sub-command shares: the --app/--endpoint-url options, loading, and the one error path.

Every command does its work inside ``guarded`` (``load_app`` is guarded too): an expected error
becomes one line on stderr, ``error: <what went wrong and what to do>``, and an exit code; never a
traceback. A command that decides an outcome itself (a DLQ message that is not there, a replay
that skipped messages) uses the same codes. The exit codes, also in ``sqsjobs --help`` and
``docs/operations.md``:

====  ============================================================================================
code  meaning
====  ============================================================================================
0     done
1     error: configuration (--app cannot be loaded, settings), AWS (unreachable, no credentials, missing table or queue), a doctor check or a replay item that failed
2     usage: typer's own (unknown option, bad choice) and bad input: invalid JSON, duration or --cursor, unknown job type, payload failing validation
3     not found: no such job, chain or DLQ message
4     refused: the job's state does not allow it (cancelling a finished job, retrying a queued one, an idempotency conflict), or the current code refuses its payload
5     partial: a replay left messages in the DLQ (skipped, with the reason)
130   interrupted (Ctrl-C) before the command could finish cleanly, or a confirmation declined
====  ============================================================================================
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from sqsjobs.app import App
from sqsjobs.envelope import read_json
from sqsjobs.errors import (
    AwsError,
    ChainNotFound,
    HandlerNotFound,
    JobNotFound,
    JobStateError,
    PayloadError,
    SqsJobsError,
)
from sqsjobs.ops._common import parse_duration

if TYPE_CHECKING:
    from collections.abc import Iterator

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

JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output on stdout")]
QueueOpt = Annotated[
    list[str] | None, typer.Option("--queue", help="Logical queue (repeatable; default: all of the app's)")
]
SinceOpt = Annotated[str | None, typer.Option(help="Only this recent, e.g. 30m, 2h, 7d")]
PayloadFileOpt = Annotated[
    str | None,
    typer.Option(
        "--payload",
        metavar="FILE",
        help="A corrected payload: a JSON file, or - for stdin. Validated by the job's current handler, "
        "it replaces the stored payload (same job id and idempotency key; audited)",
    ),
]

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
EXIT_REFUSED = 4
EXIT_PARTIAL = 5
EXIT_INTERRUPTED = 130

#: Every exit code of the CLI and what it means: the module docstring's table, in data.
EXIT_CODES: dict[int, str] = {
    EXIT_OK: "done",
    EXIT_ERROR: (
        "error: configuration (--app cannot be loaded, settings), AWS (unreachable, no credentials, "
        "missing table or queue), a doctor check or a replay item that failed"
    ),
    EXIT_USAGE: (
        "usage: typer's own (unknown option, bad choice) and bad input: invalid JSON, duration or "
        "--cursor, unknown job type, payload failing validation"
    ),
    EXIT_NOT_FOUND: "not found: no such job, chain or DLQ message",
    EXIT_REFUSED: (
        "refused: the job's state does not allow it (cancelling a finished job, retrying a queued one, "
        "an idempotency conflict), or the current code refuses its payload"
    ),
    EXIT_PARTIAL: "partial: a replay left messages in the DLQ (skipped, with the reason)",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C) before the command could finish cleanly, or a confirmation declined",
}

#: ``sqsjobs --help`` ends with the table.
EXIT_CODES_HELP = "Exit codes:\n" + "\n".join(f"{code:<5}{meaning}" for code, meaning in EXIT_CODES.items())

_MISSING_QUEUE = ("AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist")
#: typer's own outcomes: a chosen exit code, or a usage error typer prints itself (exit 2).
_TYPER_OUTCOMES = (typer.Exit, typer.Abort, typer.BadParameter)


def exit_code(exc: BaseException) -> int:
    """The exit code for an error (see the module docstring)."""
    if isinstance(exc, KeyboardInterrupt):
        return EXIT_INTERRUPTED
    if isinstance(exc, JobNotFound | ChainNotFound):
        return EXIT_NOT_FOUND
    if isinstance(exc, JobStateError):  # InvalidTransition, IdempotencyConflict, LeaseLost
        return EXIT_REFUSED
    if isinstance(exc, HandlerNotFound | PayloadError | ValueError):  # CursorError is a ValueError
        return EXIT_USAGE
    return EXIT_ERROR  # ConfigurationError, AwsError, OSError, any other


def abort(message: str, code: int) -> typer.Exit:
    """Print ``error: <message>`` as one line on stderr and return the Exit to raise."""
    # Made per call, so the current stderr is used (tests, pipes); whitespace is folded into one line.
    Console(stderr=True, highlight=False).print(
        f"[red]error:[/red] {escape(' '.join(message.split()))}", soft_wrap=True
    )
    return typer.Exit(code)


def describe(exc: BaseException, app: App | None = None) -> str:
    """The line an operator reads for ``exc``: what went wrong, and for AWS errors what to check."""
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted"
    if isinstance(exc, AwsError):
        return _aws_message(exc, app)
    if isinstance(exc, SqsJobsError | ValueError | OSError):
        return str(exc)
    return f"unexpected {type(exc).__name__}: {exc}"  # the class name says where to look


@contextlib.contextmanager
def guarded(app: App | None = None) -> Iterator[None]:
    """Run a command's work: an error becomes one line on stderr and its exit code, never a traceback.

    Args:
        app: the loaded App, when there is one; AWS errors then name its endpoint and table.
    """
    try:
        yield
    except _TYPER_OUTCOMES:
        raise
    except KeyboardInterrupt as exc:
        raise abort(describe(exc), exit_code(exc)) from None
    except Exception as exc:
        raise abort(describe(exc, app), exit_code(exc)) from None


def duration_option(text: str, option: str) -> float:
    """Seconds from a duration option (``90s``, ``15m``, ``2h``, ``7d``); bad input exits 2 naming the option."""
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise abort(f"{option}: {exc}", EXIT_USAGE) from None


def payload_file(path: str) -> Any:
    """The JSON document of a ``--payload FILE`` (``-``: stdin); unreadable or not JSON exits 2."""
    try:
        return read_json(sys.stdin.read() if path == "-" else Path(path).read_text(), max_bytes=None)
    except (OSError, ValueError) as exc:
        raise abort(f"--payload {path}: not a readable JSON file: {exc}", EXIT_USAGE) from None


def load_app(app_path: str, endpoint_url: str | None) -> App:
    """Import the App (the current directory is importable, as for ``python -m``); errors exit as above."""
    with guarded():
        if os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())
        app = App.from_path(app_path)
        if endpoint_url:
            app.configure(endpoint_url=endpoint_url)
        return app


def _aws_message(exc: AwsError, app: App | None) -> str:
    endpoint = (app.settings.endpoint_url if app else None) or "the default AWS endpoint"
    text = str(exc)
    if exc.code == "ConnectionError":
        if "credential" in text.lower():
            return "no AWS credentials found: set AWS_PROFILE or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY"
        return f"cannot reach {endpoint}: {text}; check --endpoint-url (SQSJOBS_ENDPOINT_URL) and the network"
    if exc.code == "ResourceNotFoundException":
        table = app.settings.table_name if app else "the job table"
        return f"{text} ({table}); run `sqsjobs provision`, or check --app and SQSJOBS_TABLE"
    if exc.code in _MISSING_QUEUE:
        return f"{text}; run `sqsjobs provision` or `sqsjobs doctor`"
    if exc.code in ("UnrecognizedClientException", "InvalidClientTokenId", "ExpiredTokenException"):
        return f"{text}; check the AWS credentials"
    return text
