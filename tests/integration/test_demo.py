"""``make demo`` runs to completion by itself, as a new user runs it: a subprocess on the embedded emulator."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.emulators import REPO_ROOT

pytestmark = pytest.mark.slow


def run_example(module: str) -> str:
    """Run ``python -m module`` as a new user's ``make`` target does (no SQSJOBS_ settings); its stdout."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SQSJOBS_")}
    done = subprocess.run(
        [sys.executable, "-m", module], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stdout + done.stderr
    return done.stdout


def test_the_demo_runs_every_job_to_its_final_state():
    out = run_example("examples.demo")
    for line in ("receipts.send", "inventory.sync", "payments.charge", "reminders.send", "inventory.audit"):
        assert line in out
    assert "DLQ holds job" in out and "done in" in out


def test_the_payroll_example_completes_its_tree_root_last_and_its_chain():
    """``make payroll`` (examples/payroll.py): issue 15's example, run as a new user runs it."""
    out = run_example("examples.payroll")
    assert "complete: 5 succeeded, 0 failed, 0 pending → payroll.report succeeded" in out
    assert "complete: 4 succeeded, 1 failed, 0 pending → checks.done succeeded" in out
    assert "completed in this order: checks.done → payroll.report" in out
    assert "returned the same item: True" in out
    assert "ledger.close  succeeded" in out and "done in" in out


def test_the_flow_control_example_holds_its_limit_and_its_pause():
    """``make flow-demo`` (examples/flow_control.py): issue 16's example, run as a new user runs it."""
    out = run_example("examples.flow_control")
    assert "the paused newsletters are: queued, queued, queued" in out
    assert re.search(r"most geo.lookup runs at once: [12] \(limit 2\)", out), out
    assert "newsletters started" in out and "after the resume" in out and "done in" in out
