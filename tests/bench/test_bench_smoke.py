"""``make bench-smoke`` inside ``make test``: the benchmark harness runs end to end, so it cannot rot.

All four configurations (sqsjobs c8/c32, Celery, Dramatiq) drain a tiny backlog and answer a few
idle jobs on MiniStack through the counting proxy. Asserted: only counts and states (every job ran
once, the queues ended empty, the request mix each framework must send); wall-clock figures are
written, never asserted. The peers need ``bench/.venv-bench`` (``make bench-venv``, which
``make test`` builds first); without it the test fails with that instruction, it never skips.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PEER_PYTHON = REPO / "bench" / ".venv-bench" / "bin" / "python"


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_bench_smoke_measures_every_framework(tmp_path: Path, bench_env: dict[str, str]) -> None:
    assert PEER_PYTHON.exists(), f"{PEER_PYTHON} is missing: run `make bench-venv` (make test does)"
    out = tmp_path / "smoke"
    done = subprocess.run(
        [sys.executable, "-m", "bench.harness", "--smoke", "--out", str(out)],
        cwd=REPO,
        env=bench_env,
        capture_output=True,
        text=True,
        timeout=220,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    doc = json.loads(out.with_suffix(".json").read_text())
    rows = {r["framework"]: r for r in doc["summary"]}
    assert set(rows) == {"sqsjobs c8", "sqsjobs c32", "celery t32", "dramatiq t8"}
    for run in doc["runs"]:
        assert run["drain"]["left_in_queue"] == 0, run["framework"]
        assert len(run["idle"]["latency_s"]) == run["k"]
        assert run["drain"]["worker_cpu_s"] > 0
    for label in ("sqsjobs c8", "sqsjobs c32"):
        # The durable record: three writes per job (enqueue, claim, complete), each one write unit as
        # DynamoDB reports it, sent in batches: fewer requests than writes; no reads.
        assert rows[label]["write_units_per_job"] == pytest.approx(3.0), rows[label]
        assert rows[label]["dynamodb_writes_per_job"] < 1.5, rows[label]
        assert rows[label]["dynamodb_reads_per_job"] == 0
        assert rows[label]["sqs_requests_per_job"] < 1
        assert rows[label]["cpu_vs_leanest_peer"] > 0
    for label in ("celery t32", "dramatiq t8"):
        # No record: a send and a delete per job, plus batched receives.
        assert rows[label]["dynamodb_writes_per_job"] == 0
        assert 2 <= rows[label]["sqs_requests_per_job"] < 3
    assert out.with_suffix(".md").read_text().count("| sqsjobs c8 |") == 1
    assert out.with_suffix(".png").stat().st_size > 10_000
