"""The commands that Scan the table show their progress on a terminal, and nothing of it anywhere else.

``doctor --stranded`` and ``priority --type`` read the whole table (no index serves them): minutes
on a large one. Run as a person runs them, in a terminal (a pseudo-terminal here), each shows what
it has read so far on stderr; with ``--json`` or into a pipe, the output is the result alone.
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys
import uuid

import pytest

from sqsjobs import App
from tests.cli.conftest import fake_aws_env
from tests.integration.helpers import worker_env

APP = "tests.apps.guarantees:app"


@pytest.fixture(scope="module")
def table_of_waiting_jobs(ministack_url):
    """An App (the one ``APP`` names, under a name of its own) with a few delayed jobs: a Scan has pages to read."""
    from tests.apps import guarantees

    app = App(f"scan{uuid.uuid4().hex[:10]}", endpoint_url=ministack_url)
    app.registry.include(guarantees.app.registry)
    with fake_aws_env():  # made once for the module, before each test's scrubbed environment
        app.provision()
        app.enqueue_many(
            {"type": "count", "payload": {"runs_dir": "/nonexistent"}, "delay": 600} for _ in range(5)
        )
    return app


def in_a_terminal(app: App, *args: str) -> str:
    """Run ``sqsjobs *args`` with its stdout and stderr on a pseudo-terminal; everything it wrote there."""
    leader, follower = pty.openpty()
    env = {**worker_env(app), "TERM": "xterm-256color", "COLUMNS": "120"}
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "sqsjobs", *args, "--app", APP],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=follower,
        stderr=follower,
        start_new_session=True,
    )
    os.close(follower)
    chunks = []
    try:
        while True:
            ready, _, _ = select.select([leader], [], [], 60)
            assert ready, "the command wrote nothing for 60 s"
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the terminal closed: the command exited
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(leader)
        proc.wait(30)
    return b"".join(chunks).decode(errors="replace")


def test_doctor_stranded_shows_what_its_scan_has_read(table_of_waiting_jobs):
    screen = in_a_terminal(table_of_waiting_jobs, "doctor", "--stranded", "--segments", "2")
    assert re.search(r"scan\b.*\b\d+ read", screen), screen
    assert "no stranded record" in screen


def test_priority_by_type_shows_what_its_scan_has_read_and_matched(table_of_waiting_jobs):
    screen = in_a_terminal(table_of_waiting_jobs, "priority", "low", "--type", "count", "--dry-run")
    assert re.search(r"scan\b.*\b\d+ read, 5 waiting", screen), screen


def test_with_json_or_into_a_pipe_the_output_is_the_result_alone(table_of_waiting_jobs):
    app = table_of_waiting_jobs
    screen = in_a_terminal(app, "doctor", "--stranded", "--json")
    assert " read" not in screen.split("{", 1)[0], screen  # nothing before the document
    piped = subprocess.run(
        [sys.executable, "-m", "sqsjobs", "priority", "low", "--type", "count", "--dry-run", "--app", APP],
        env=worker_env(app),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert " read" not in piped.stderr, piped.stderr
    assert "of 5 would move" in piped.stdout or "0 of 5" in piped.stdout, piped.stdout
    assert json.loads(screen[screen.index("{") :].strip().replace("\r\n", "\n"))["stranded"] == []
