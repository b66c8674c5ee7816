"""The soak's report: a readable summary (Markdown) and the JSON, side by side under ``tests/soak/results/``."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def summary(report: dict[str, Any]) -> str:
    """The readable summary (Markdown)."""
    j, d, lat, cpu, k = (
        report["jobs"],
        report["duplicates"],
        report["latency_s"],
        report["cpu"],
        report["kills"],
    )
    faults = report["faults_injected"]
    lines = [
        f"# sqsjobs chaos soak — {'PASS' if report['passed'] else 'FAIL'} (seed {report['seed']})",
        "",
        f"- jobs enqueued: {j['enqueued']} ({report['enqueue']['duplicate_enqueues']} duplicate enqueues "
        f"of idempotent keys, {report['enqueue']['id_mismatches']} id mismatches)",
        f"- succeeded: {j['actual'].get('succeeded', 0)} (expected {j['expected'].get('succeeded', 0)}); "
        f"dead: {j['actual'].get('dead', 0)} (expected {j['expected'].get('dead', 0)})",
        f"- **lost: {report['lost']['total']}**; stuck non-terminal: {report['stuck']['count']}; "
        f"wrong final status: {report['wrong_status']['count']}",
        f"- duplicate handler runs: {d['handler_runs']} ({d['handler_runs_pct']} % of jobs; "
        f"{d['jobs_with_a_duplicate_run']} jobs; by kind {d['handler_runs_by_kind']})",
        f"- plain handlers ({d['plain_jobs']} jobs): {d['plain_duplicate_effects']} duplicate effects, "
        f"{d['plain_stale_overwrites']} stale overwrites",
        f"- **fenced handlers ({d['fenced_jobs']} jobs): {d['fenced_duplicate_effects']} duplicate effects**; "
        f"{d['fenced_writes_refused']} stale writes refused by the token",
        f"- claims that never started a run (worker killed between claim and start, or a claim stalled "
        f"past its lease and overtaken by a rescue): "
        f"{d['claims_without_a_run']}",
        f"- enqueue→done: p50 {lat['enqueue_to_done_p50']} s, p95 {lat['enqueue_to_done_p95']} s, "
        f"max {lat['enqueue_to_done_max']} s",
        f"- faults injected: {sum(faults.values())} ({', '.join(f'{n} {kind}' for kind, n in faults.items())}) "
        f"over {sum(report['requests'].values())} requests ({report['requests_per_job']} per job)",
        "- faults by operation: "
        + ", ".join(f"{op} x{n}" for op, n in report["faults_by_operation"].items()),
        f"- kills: {k['sigkill']} SIGKILL, {k['sigterm']} SIGTERM (exits {k['sigterm_exits']}, SIGTERM to "
        f"exit p50 {k['drain_s_p50']} s, max {k['drain_s_max']} s); "
        f"{k['workers_started']} worker processes in all",
        f"- processes that crashed: {len(report['crashes'])} {report['crashes'][:5]}",
        f"- wall: enqueue {report['wall_s']['enqueue']} s, all terminal after {report['wall_s']['all_terminal']} s",
        f"- CPU: emulator {cpu['emulator_s']} s ({cpu['emulator_ms_per_job']} ms/job); workers+sweeper "
        f"{cpu['workers_and_sweeper_s']} s; driver+proxy {cpu['driver_and_proxy_s']} s; "
        f"load avg before {report['load_avg']['before']}, after {report['load_avg']['after']} "
        f"on {report['cores']} cores",
        "",
        "Settings: " + ", ".join(f"{key}={value}" for key, value in report["config"].items() if key != "mix"),
        "",
        "Worker/sweeper warnings: "
        + (", ".join(f"{msg!r} x{n}" for msg, n in report["logs"]["warnings"].items()) or "none"),
        f"Writes refused although the record showed the worker's own transition: "
        f"{report['logs']['refused_own_write']}; lost answers recognised as the worker's own write: "
        f"{report['logs']['lost_answers_recognised']}",
    ]
    return "\n".join(lines) + "\n"


def write_report(report: dict[str, Any], out_dir: Path = RESULTS) -> tuple[Path, Path]:
    """``soak-<time>-seed<seed>.json`` and ``.md`` under ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"soak-{time.strftime('%Y%m%d-%H%M%S')}-seed{report['seed']}"
    json_path = out_dir / f"{stem}.json"
    md_path = out_dir / f"{stem}.md"
    json_path.write_text(json.dumps(report, indent=2, default=str) + "\n")
    md_path.write_text(summary(report))
    return json_path, md_path
