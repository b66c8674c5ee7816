"""Bulk cancel and DLQ replay show a progress bar to a person at a terminal, and only to them.

The CLI runs as a real process with stderr on a pseudo-terminal (as in a shell): the bar is drawn
there. With ``--json``, or with stderr a pipe (a script, CI), nothing but the result is written.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from sqsjobs import JobStatus
from tests.apps import held
from tests.integration.helpers import queue_url, sqs_call, worker_env
from tests.integration.test_confirm import APP, on_terminal_apart

pytestmark = pytest.mark.slow  # each test starts a process

BAR = "━"  # rich's bar segment (a table's rules use it too: stdout is checked apart)


def piped(app, args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sqsjobs", *args, "--app", APP],
        env=worker_env(app),
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def held_app(ministack_url, make_app):
    app = make_app(ministack_url)
    app.registry.include(held.app.registry)
    app.provision()
    return app


def test_bulk_cancel_shows_its_scan_on_a_terminal_and_nothing_with_json_or_through_a_pipe(
    ministack_url, make_app, tmp_path
):
    app = held_app(ministack_url, make_app)
    payload = {"started": str(tmp_path / "s"), "release": str(tmp_path / "r")}
    ids = app.enqueue_many([{"type": "held", "payload": payload} for _ in range(12)])
    cancel = ["jobs", "cancel", "--type", "held", "--yes", "--page-size", "5"]
    # WHEN a person runs a bulk cancel at a terminal
    code, shown, out = on_terminal_apart(app, cancel, None)
    # THEN the bar on stderr counted the scan as it went, and stdout has the result alone
    assert code == 0, shown
    assert BAR in shown and "12 matched, 12 cancelled" in shown, shown
    assert BAR not in out and "matched 12, cancelled 12" in out, out
    assert {app.get(i, load_result=False).status for i in ids} == {JobStatus.CANCELLED}
    # WHEN the same runs with --json at a terminal: stderr shows no bar
    more = app.enqueue_many([{"type": "held", "payload": payload} for _ in range(3)])
    code, shown, out = on_terminal_apart(app, [*cancel, "--json"], None)
    assert code == 0, shown
    assert BAR not in shown and "matched," not in shown, shown
    assert json.loads(out)["cancelled"] == 3
    # ... and through pipes (a script) stderr carries no bar; stdout is the result alone
    more += app.enqueue_many([{"type": "held", "payload": payload} for _ in range(2)])
    done = piped(app, [*cancel, "--json"])
    assert done.returncode == 0, done.stderr
    assert BAR not in done.stderr
    assert json.loads(done.stdout)["cancelled"] == 2
    assert {app.get(i, load_result=False).status for i in more} == {JobStatus.CANCELLED}


def test_dlq_replay_shows_its_progress_on_a_terminal_only(ministack_url, make_app):
    app = held_app(ministack_url, make_app)
    dlq = queue_url(app, "default", dlq=True)
    for n in range(3):
        sqs_call(app, "send_message", QueueUrl=dlq, MessageBody=f"not a job {n}")
    # WHEN a person replays on a terminal: the bar counts the messages
    code, shown, _ = on_terminal_apart(app, ["dlq", "replay", "--dry-run"], None)
    assert code in (0, 5), shown
    assert BAR in shown and "replay" in shown and "3/3" in shown, shown
    # ... with --json, and through a pipe, it is not drawn
    code, shown, out = on_terminal_apart(app, ["dlq", "replay", "--dry-run", "--json"], None)
    assert BAR not in shown, shown
    assert json.loads(out)
    done = piped(app, ["dlq", "replay", "--dry-run"])
    assert BAR not in done.stderr, done.stderr
