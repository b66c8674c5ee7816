"""``make demo`` runs to completion by itself, as a new user runs it: a subprocess on the embedded emulator."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.emulators import REPO_ROOT

pytestmark = pytest.mark.slow


def test_the_demo_runs_every_job_to_its_final_state():
    env = {k: v for k, v in os.environ.items() if not k.startswith("SQSJOBS_")}
    done = subprocess.run(
        [sys.executable, "-m", "examples.demo"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stdout + done.stderr
    for line in ("receipts.send", "inventory.sync", "payments.charge", "reminders.send", "inventory.audit"):
        assert line in done.stdout
    assert "DLQ holds job" in done.stdout and "done in" in done.stdout
