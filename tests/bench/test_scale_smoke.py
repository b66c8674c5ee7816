"""``python -m bench.scale --smoke`` inside ``make test``: the scaling run works end to end, so it cannot rot.

One and two sqsjobs worker processes drain a tiny backlog on MiniStack through the counting
proxy. Asserted: only counts and states (every job ran once, the queue ended empty, each
process count has its row, requests were counted for both services); wall-clock figures are
written, never asserted. Action names are not asserted either: the library's batching changes them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_scale_smoke_drains_with_one_and_two_processes(tmp_path: Path, bench_env: dict[str, str]) -> None:
    out = tmp_path / "scale"
    done = subprocess.run(
        [sys.executable, "-m", "bench.scale", "--smoke", "--processes", "1,2", "--out", str(out)],
        cwd=REPO,
        env=bench_env,
        capture_output=True,
        text=True,
        timeout=160,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    doc = json.loads(out.with_suffix(".json").read_text())
    assert doc["meta"]["duplicate_starts"] == 0
    assert [r["processes"] for r in doc["summary"]] == [1, 2]
    for run in doc["runs"]:
        assert run["drain"]["left_in_queue"] == 0, run["processes"]
        assert run["drain"]["worker_cpu_s"] > 0
    for row in doc["summary"]:
        assert row["sqs_requests_per_job"] > 0
        assert row["dynamodb_requests_per_job"] > 0
    assert out.with_suffix(".md").read_text().count("\n| 2 |") == 1
