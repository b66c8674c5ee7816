"""Bulk cancel and DLQ replay ask before changing anything when a person is at a terminal.

The CLI runs as a real process on a pseudo-terminal (stdin and stderr are a tty, as in a shell):
it asks, and a "no" changes nothing; ``--yes`` does not ask; without a terminal (a script) it
does not ask either.
"""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time

import pytest

from sqsjobs import JobStatus
from tests.apps import held
from tests.integration.helpers import depth, queue_url, sqs_call, worker_env

pytestmark = pytest.mark.slow  # each test starts a process

APP = "tests.apps.held:app"


def on_terminal(app, args: list[str], answer: str | None) -> tuple[int, str]:
    """Run ``sqsjobs ARGS`` with stdin and stderr on a pty; type ``answer`` when it asks. (code, what it wrote)."""
    code, terminal, out = on_terminal_apart(app, args, answer)
    return code, terminal + out


def on_terminal_apart(app, args: list[str], answer: str | None) -> tuple[int, str, str]:
    """``on_terminal``, keeping apart what went to the terminal (stderr) and to stdout."""
    primary, secondary = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "sqsjobs", *args, "--app", APP],
        env=worker_env(app, COLUMNS="200"),
        stdin=secondary,
        stderr=secondary,
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    os.close(secondary)
    seen, answered, deadline = b"", False, time.monotonic() + 60
    try:
        while proc.poll() is None or select.select([primary], [], [], 0)[0]:
            assert time.monotonic() < deadline, seen.decode(errors="replace")
            if select.select([primary], [], [], 0.1)[0]:
                try:
                    chunk = os.read(primary, 4096)
                except OSError:  # the child closed the terminal
                    break
                seen += chunk
            if answer is not None and not answered and b"[y/N]" in seen:
                os.write(primary, answer.encode() + b"\n")
                answered = True
        proc.wait(30)
    finally:
        os.close(primary)
        if proc.poll() is None:
            proc.kill()
    assert proc.stdout is not None
    with proc.stdout:
        out = proc.stdout.read().decode()
    return proc.returncode, seen.decode(errors="replace"), out


def _statuses(app, ids):
    return {app.get(i, load_result=False).status for i in ids}


def test_bulk_cancel_asks_on_a_terminal_and_a_no_changes_nothing(ministack_url, make_app, tmp_path):
    app = make_app(ministack_url)
    app.registry.include(held.app.registry)
    app.provision()
    payload = {"started": str(tmp_path / "s"), "release": str(tmp_path / "r")}
    ids = [app.enqueue("held", payload) for _ in range(3)]
    # WHEN a person answers "n"
    code, shown = on_terminal(app, ["jobs", "cancel", "--type", "held"], "n")
    # THEN it asked, exited 130 and cancelled nothing
    assert "Cancel every queued job of type held?" in shown
    assert code == 130, shown
    assert _statuses(app, ids) == {JobStatus.QUEUED}
    # WHEN --yes is given on the terminal: no question, every job cancelled
    code, shown = on_terminal(app, ["jobs", "cancel", "--type", "held", "--yes"], None)
    assert code == 0, shown
    assert "[y/N]" not in shown
    assert _statuses(app, ids) == {JobStatus.CANCELLED}
    # AND a script (no terminal) is not asked either
    more = [app.enqueue("held", payload) for _ in range(2)]
    done = subprocess.run(
        [sys.executable, "-m", "sqsjobs", "jobs", "cancel", "--type", "held", "--app", APP, "--json"],
        env=worker_env(app),
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    assert _statuses(app, more) == {JobStatus.CANCELLED}


def test_dlq_replay_asks_on_a_terminal_and_a_no_leaves_the_dlq_alone(ministack_url, make_app):
    app = make_app(ministack_url)
    app.registry.include(held.app.registry)
    app.provision()
    sqs_call(app, "send_message", QueueUrl=queue_url(app, "default", dlq=True), MessageBody="not a job")
    code, shown = on_terminal(app, ["dlq", "replay"], "n")
    assert "Replay up to 1 message(s)" in shown
    assert code == 130, shown
    assert depth(app, "default", dlq=True)["visible"] + depth(app, "default", dlq=True)["in_flight"] == 1
    # --dry-run changes nothing, so it is never asked
    code, shown = on_terminal(app, ["dlq", "replay", "--dry-run"], None)
    assert "[y/N]" not in shown and code in (0, 5), shown
