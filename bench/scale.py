"""``make bench-scale``: 1, 2 and 4 sqsjobs worker processes drain one backlog (issue 14).

Why: workers scale out by count (docs/scale.md), so a user sizing a fleet needs to know what a job
costs as the fleet grows: worker CPU, AWS requests and emulator work per job, and jobs/s. The
main bench (``bench/harness.py``) runs one process per framework; this runs N of the same.

Per run, process count and proxy latency, on a fresh queue:

1. start N ``sqsjobs worker --concurrency C`` processes (each its own process group), wait for
   N long polls at the proxy, pause every group (SIGSTOP);
2. enqueue the backlog with the proxy at +0 ms: setup, not a figure (the main bench measures
   enqueue), and at +10 ms one PutItem per job would make the wait the longest step;
3. set the proxy's latency, resume every group and drain (``harness.drain``): jobs/s to the last
   handler start; worker CPU summed over the N groups; requests by action as the proxy counted
   them, whatever actions sqsjobs sends; emulator CPU; this process's CPU (mostly the proxy).

Process counts rotate from run to run so slow drift of the machine favours none; every figure is
a median over runs. Output: JSON + markdown under ``bench/results/`` (``scale.json``,
``scale.md``); ``docs/scale.md`` reads them.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench import procs
from bench.frameworks import REPO, Framework
from bench.harness import Bench, Producer, drain, machine, session, versions

#: The figures of one drain, per job, that the summary takes medians of.
FIGURES = (
    "drain_jobs_per_s",
    "worker_cpu_ms_per_job",
    "emulator_cpu_ms_per_job",
    "harness_cpu_ms_per_job",
    "cores_busy",
    "others_busy",
    "requests_per_job",
    "sqs_requests_per_job",
    "dynamodb_requests_per_job",
)


def run_once(
    bench: Bench, fw: Framework, *, processes: int, latency_ms: float, n: int, seq0: int
) -> dict[str, Any]:
    """N worker processes, one latency, one backlog: enqueue paused, then drain."""
    tag = f"s{seq0}"
    queue_url = bench.make_queue(fw, tag)
    env = bench.env(fw, tag, queue_url)
    name = f"{fw.label.replace(' ', '-')}-x{processes}-{latency_ms:g}ms-{tag}"
    logs = [bench.workdir / f"{name}-worker{i}.log" for i in range(processes)]
    bench.proxy.latency_s = 0.0
    bench.proxy.reset_counts()
    workers = [procs.start(fw.worker_argv(), env=env, cwd=REPO, log=log) for log in logs]
    producer: Producer | None = None
    try:
        producer = Producer(fw, env, bench.workdir / f"{name}-producer.log")
        bench.wait_receive(*zip(workers, logs, strict=True))
        for worker in workers:
            procs.signal_group(worker, signal.SIGSTOP)
        bench.proxy.reset_counts()
        bulk = producer.command(f"bulk {n} {seq0}")
        enqueue_counts = dict(bench.proxy.snapshot()["requests"])
        bench.proxy.latency_s = latency_ms / 1000.0
        what = f"{fw.label} x{processes} +{latency_ms:g} ms (logs in {bench.workdir})"
        drained = drain(bench, workers, queue_url, range(seq0, seq0 + n), what)
    finally:
        procs.stop(*workers)
        if producer is not None:
            producer.close()
        bench.proxy.latency_s = 0.0
    return {
        "processes": processes,
        "concurrency": fw.concurrency,
        "latency_ms": latency_ms,
        "n": n,
        "bulk": {"wall_s": bulk["wall_s"], "requests": enqueue_counts},
        "drain": drained,
    }


def figures(run: dict[str, Any], cpus: int) -> dict[str, Any]:
    """Per-job figures of one drain, and its requests per job by ``service:action``."""
    n, d = run["n"], run["drain"]
    by_action = {k: v / n for k, v in sorted(d["requests"].items())}
    ours = d["worker_cpu_s"] + d["emulator_cpu_s"] + d["harness_cpu_s"]
    others = max(0.0, d["machine_cpu_s"] - ours)
    return {
        "drain_jobs_per_s": n / d["wall_s"],
        "worker_cpu_ms_per_job": d["worker_cpu_s"] * 1000 / n,
        "emulator_cpu_ms_per_job": d["emulator_cpu_s"] * 1000 / n,
        "harness_cpu_ms_per_job": d["harness_cpu_s"] * 1000 / n,
        # Shares of the machine's CPUs over the drain: the workers + emulator + proxy, and the rest
        # (other processes on a shared machine take cores the run would otherwise get).
        "cores_busy": ours / d["cpu_window_s"] / cpus,
        "others_busy": others / d["cpu_window_s"] / cpus,
        "requests_per_job": sum(by_action.values()),
        "sqs_requests_per_job": sum(v for k, v in by_action.items() if k.startswith("sqs:")),
        "dynamodb_requests_per_job": sum(v for k, v in by_action.items() if k.startswith("dynamodb:")),
        "by_action": by_action,
    }


def summarise(runs: list[dict[str, Any]], cpus: int) -> list[dict[str, Any]]:
    """Medians per (latency, process count), and worker CPU per job as a ratio to the fewest processes.

    The ratio is taken run by run (the process counts of one run follow each other within a
    minute), then the median: on a shared machine that cancels some of the drift between runs.
    Requests by action are means over runs, so a rare action (a heartbeat's
    ChangeMessageVisibilityBatch) shows at its rate instead of a median of 0.
    """
    for run in runs:
        run["figures"] = figures(run, cpus)
    fewest = min(r["processes"] for r in runs)
    base = {(r["run"], r["latency_ms"]): r["figures"] for r in runs if r["processes"] == fewest}
    rows: list[dict[str, Any]] = []
    for latency in sorted({r["latency_ms"] for r in runs}):
        for processes in sorted({r["processes"] for r in runs}):
            mine = [r for r in runs if (r["latency_ms"], r["processes"]) == (latency, processes)]
            figs = [r["figures"] for r in mine]
            row: dict[str, Any] = {"latency_ms": latency, "processes": processes, "runs": len(mine)}
            row.update({key: statistics.median(f[key] for f in figs) for key in FIGURES})
            actions = sorted({a for f in figs for a in f["by_action"]})
            row["by_action"] = {a: statistics.mean(f["by_action"].get(a, 0.0) for f in figs) for a in actions}
            row["worker_cpu_vs_fewest"] = statistics.median(
                r["figures"]["worker_cpu_ms_per_job"] / base[(r["run"], latency)]["worker_cpu_ms_per_job"]
                for r in mine
            )
            rows.append(row)
    return rows


def markdown(doc: dict[str, Any]) -> str:
    """One table per proxy latency, requests by action, and the conditions of the run."""
    meta, rows = doc["meta"], doc["summary"]
    out = [
        f"# sqsjobs: 1 to {max(meta['processes'])} worker processes on one backlog ({meta['started']})",
        "",
        f"{meta['n']} no-op jobs (1 KB payload) per backlog, `sqsjobs worker --concurrency {meta['concurrency']}` "
        f"per process, median of {meta['runs']} runs; emulator {meta['emulator']}; {meta['cpus']} CPUs "
        f"shared by the workers, the emulator and the proxy; load average {meta['load_average_before'][0]:.2f} "
        f"before, {meta['load_average_after'][0]:.2f} after; took {meta['duration_s']:.0f} s; "
        f"commit {meta['commit']}"
        + (f", summarised again at {meta['summarised_at']}" if "summarised_at" in meta else "")
        + ".",
        "",
    ]
    for latency in meta["latency_ms"]:
        out += [
            f"## +{latency:g} ms per request at the proxy",
            "",
            "| worker processes | drain jobs/s | worker CPU ms/job (all processes) | x fewest processes | "
            "requests/job (SQS + DynamoDB) | SQS req/job | DynamoDB req/job | emulator CPU ms/job | "
            "proxy CPU ms/job | CPUs busy: this run / other processes |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in (r for r in rows if r["latency_ms"] == latency):
            out.append(
                f"| {r['processes']} | {r['drain_jobs_per_s']:.0f} | {r['worker_cpu_ms_per_job']:.2f} | "
                f"{r['worker_cpu_vs_fewest']:.2f} | {r['requests_per_job']:.2f} | "
                f"{r['sqs_requests_per_job']:.2f} | {r['dynamodb_requests_per_job']:.2f} | "
                f"{r['emulator_cpu_ms_per_job']:.1f} | {r['harness_cpu_ms_per_job']:.1f} | "
                f"{r['cores_busy']:.0%} / {r['others_busy']:.0%} |"
            )
        out.append("")
    out += ["## Worker requests per job by action (drain only, mean of runs)", ""]
    for r in rows:
        cells = ", ".join(f"{k} {v:.3f}" for k, v in r["by_action"].items())
        out.append(f"- {r['processes']} x c{meta['concurrency']}, +{r['latency_ms']:g} ms: {cells}")
    enqueue = doc["runs"][0]["bulk"]["requests"]
    n = doc["runs"][0]["n"]
    out += [
        "",
        "Enqueue of the backlog (at +0 ms, not part of the figures above): "
        + ", ".join(f"{k} {v / n:.3f}" for k, v in sorted(enqueue.items()))
        + " per job.",
        "",
        "CPUs busy: CPU-seconds per second of drain (resume to empty queue), as a share of all CPUs: "
        "this run's workers, emulator and proxy, then every other process on the machine (from "
        "/proc/stat). A run that shared the cores with other work is slower than the machine allows.",
        "",
        "Versions: " + ", ".join(f"{k} {v}" for k, v in sorted(meta["versions"].items())) + ".",
        "",
    ]
    return "\n".join(out)


def _commit() -> str:
    """The checkout's commit (``+dirty`` when a tracked file differs), for the results' header."""

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True).stdout.strip()

    dirty = "+dirty" if git("status", "--porcelain", "--untracked-files=no") else ""
    return (git("rev-parse", "--short", "HEAD") or "unknown") + dirty


def main(argv: list[str] | None = None) -> int:
    """Run every (run, latency, process count) and write JSON and markdown."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--processes", default="1,2,4", help="comma list of worker process counts")
    parser.add_argument("--concurrency", type=int, default=32, help="jobs each worker process runs at once")
    parser.add_argument("--n", type=int, default=1000, help="backlog size")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--latency-ms", default="0,10", help="per-request latency added by the proxy")
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "scale"), help="output path stem")
    parser.add_argument("--keep-logs", metavar="DIR", help="keep worker/producer logs in DIR")
    parser.add_argument("--smoke", action="store_true", help="tiny run: --runs 1 --n 60 --latency-ms 0")
    parser.add_argument(
        "--from", dest="source", metavar="JSON", help="measure nothing: summarise the runs of JSON again"
    )
    args = parser.parse_args(argv)
    if args.source:
        document = json.loads(Path(args.source).read_text())
        document["summary"] = summarise(document["runs"], document["meta"]["cpus"])
        document["meta"]["summarised_at"] = _commit()
        return _write(document, Path(args.out))
    if args.smoke:
        args.runs, args.n, args.latency_ms = 1, 60, "0"
    counts = [int(x) for x in args.processes.split(",") if x.strip()]
    latencies = [float(x) for x in args.latency_ms.split(",") if x.strip()]
    fw = Framework(f"sqsjobs c{args.concurrency}", "sqsjobs", args.concurrency)
    cpus = os.cpu_count() or 1
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    started = time.time()
    load_before = os.getloadavg()
    runs: list[dict[str, Any]] = []
    with session("ministack", args.keep_logs, "sqsjobs-scale-") as bench:
        seq = 0
        for run in range(args.runs):
            for latency in latencies:
                for processes in counts[run % len(counts) :] + counts[: run % len(counts)]:
                    t = time.monotonic()
                    result = run_once(bench, fw, processes=processes, latency_ms=latency, n=args.n, seq0=seq)
                    result["run"] = run
                    runs.append(result)
                    seq += args.n
                    f = figures(result, cpus)
                    print(
                        f"run {run} x{processes} +{latency:g}ms: {f['drain_jobs_per_s']:.0f} jobs/s, "
                        f"worker cpu {f['worker_cpu_ms_per_job']:.2f} ms/job, {f['requests_per_job']:.2f} req/job, "
                        f"emulator {f['emulator_cpu_ms_per_job']:.1f} ms/job, other processes "
                        f"{f['others_busy']:.0%} of the CPUs ({time.monotonic() - t:.0f} s)",
                        flush=True,
                    )
    meta = {
        **machine(started, load_before),
        "commit": _commit(),
        "emulator": "ministack",
        "n": args.n,
        "runs": args.runs,
        "concurrency": args.concurrency,
        "processes": counts,
        "latency_ms": latencies,
        "versions": versions([fw]),
        # Handler starts for a job already started: a job that ran twice (expected 0).
        "duplicate_starts": bench.markers.duplicates,
    }
    return _write({"meta": meta, "summary": summarise(runs, cpus), "runs": runs}, out)


def _write(document: dict[str, Any], out: Path) -> int:
    """``<out>.json`` and ``<out>.md``."""
    json_path, md_path = out.with_suffix(".json"), out.with_suffix(".md")
    json_path.write_text(json.dumps(document, indent=1) + "\n")
    md_path.write_text(markdown(document))
    print(md_path.read_text())
    print(f"wrote {json_path} and {md_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
