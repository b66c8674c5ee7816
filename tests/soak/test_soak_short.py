"""The chaos soak's short version (issue 8): 300 jobs through killed workers and 5 % injected faults.

The full soak is ``make soak`` (tests/soak/driver.py). This one runs in ``make test``: a private MiniStack,
the fault proxy, four worker processes with one killed every 2-5 s, and the sweeper. Nothing may
be lost or stuck, the job mix must end exactly as expected, and handlers that pass the fencing
token to their write must show no duplicate effect. ``SQSJOBS_SOAK_SEED`` replays another seed.
"""

from __future__ import annotations

import os

import pytest

from tests.soak.driver import run_soak
from tests.soak.plan import SoakConfig
from tests.soak.results import summary, write_report

pytestmark = pytest.mark.slow


@pytest.mark.timeout(400)
def test_short_soak_loses_nothing_and_fenced_effects_never_repeat(tmp_path, monkeypatch):
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    config = SoakConfig(
        jobs=300,
        fault_rate=0.05,
        seed=int(os.environ.get("SQSJOBS_SOAK_SEED", "8")),
        slow_job_s=6.0,
        deadline_s=240.0,
    )

    report = run_soak(config)

    write_report(report, tmp_path)
    text = summary(report)
    assert report["lost"]["total"] == 0, text
    assert report["stuck"]["count"] == 0, text
    assert report["jobs"]["actual"] == report["jobs"]["expected"], text
    assert report["duplicates"]["fenced_duplicate_effects"] == 0, text
    assert report["enqueue"]["id_mismatches"] == 0, text
    assert report["kills"]["sigkill"] + report["kills"]["sigterm"] >= 3, text
    assert sum(report["faults_injected"].values()) > 0, text
    assert report["passed"], text
