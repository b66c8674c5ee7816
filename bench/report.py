"""Figures per run, medians over runs, ratios to the leanest peer, cost per million jobs, markdown.

Prices are AWS on-demand list prices, us-east-1 (see ``PRICES``); the free tiers are ignored.
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bench.frameworks import Framework

#: USD, us-east-1, on-demand list prices, as stated on AWS's pricing pages (checked against
#: third-party copies of them, 2026): SQS standard queue requests (first 100 B/month, each 64 KB
#: chunk of a request is one request); DynamoDB on-demand write and read request units (since the
#: 1 Nov 2024 price cut); Fargate Linux/x86 vCPU-hour (worker CPU priced as if fully used).
PRICES = {
    "as_of": "2026-11 (DynamoDB on-demand rates in force since 2024-11-01)",
    "sqs_per_million_requests": 0.40,
    "dynamodb_per_million_write_units": 0.625,
    "dynamodb_per_million_read_units": 0.125,
    "fargate_per_vcpu_hour": 0.04048,
}
DYNAMODB_WRITES = {
    "PutItem",
    "UpdateItem",
    "DeleteItem",
    "BatchWriteItem",
    "TransactWriteItems",
    "BatchExecuteStatement",
}
DYNAMODB_READS = {"GetItem", "Query", "Scan", "BatchGetItem", "TransactGetItems"}
#: Which write-unit measurement (``bench/write_units.py``) prices which write request.
WRITE_STEP = {"PutItem": ("enqueue",), "UpdateItem": ("claim", "complete")}


def _per_job(counts: dict[str, int], n: int) -> dict[str, float]:
    return {k: v / n for k, v in sorted(counts.items())}


def _sum(counts: dict[str, float], service: str, actions: set[str] | None = None) -> float:
    total = 0.0
    for key, v in counts.items():
        svc, _, action = key.partition(":")
        if svc == service and (actions is None or action in actions):
            total += v
    return total


def _write_units(per_job: dict[str, float], units: dict[str, dict[str, float]]) -> tuple[float, float]:
    """(table, index) write units per job: each write request priced by the step it performs."""
    table = index = 0.0
    for key, v in per_job.items():
        svc, _, action = key.partition(":")
        if svc != "dynamodb" or action not in DYNAMODB_WRITES:
            continue
        steps = WRITE_STEP.get(action, ("complete",))
        table += v * statistics.mean(units[s]["table"] for s in steps)
        index += v * statistics.mean(units[s]["indexes"] for s in steps)
    return table, index


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    i = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[i]


def _mean_ms(values: list[float]) -> float:
    return statistics.fmean(values) * 1000 if values else float("nan")


def figures(run: dict[str, Any], units: dict[str, dict[str, float]]) -> dict[str, float]:
    """The per-job figures of one run."""
    n = run["n"]
    enqueue = _per_job(run["bulk"]["requests"], n)
    drain = _per_job(run["drain"]["requests"], n)
    both = {k: enqueue.get(k, 0.0) + drain.get(k, 0.0) for k in sorted({*enqueue, *drain})}
    sqs = _sum(both, "sqs")
    ddb_writes = _sum(both, "dynamodb", DYNAMODB_WRITES)
    ddb_reads = _sum(both, "dynamodb", DYNAMODB_READS)
    measured = [run[part].get("write_units") or {} for part in ("bulk", "drain")]
    if any(measured):  # what DynamoDB's answers reported, read at the proxy
        wcu_table = sum(m.get("table", 0.0) for m in measured) / n
        wcu_index = sum(m.get("indexes", 0.0) for m in measured) / n
    else:  # an older run: each write request priced by the step it performs
        wcu_table, wcu_index = _write_units(both, units) if ddb_writes else (0.0, 0.0)
    cpu_ms = run["drain"]["worker_cpu_s"] * 1000 / n
    latencies = [x * 1000 for x in run["idle"]["latency_s"]]
    cost = (
        sqs * PRICES["sqs_per_million_requests"]
        + (wcu_table + wcu_index) * PRICES["dynamodb_per_million_write_units"]
        + ddb_reads
        * PRICES["dynamodb_per_million_read_units"]  # eventually consistent reads would halve this
        + cpu_ms / 3_600_000 * PRICES["fargate_per_vcpu_hour"] * 1_000_000
    )
    return {
        "worker_cpu_ms_per_job": cpu_ms,
        "requests_per_job": sqs + _sum(both, "dynamodb"),
        "sqs_requests_per_job": sqs,
        "sqs_requests_per_job_worker": _sum(drain, "sqs"),
        "dynamodb_writes_per_job": ddb_writes,
        "dynamodb_reads_per_job": ddb_reads,
        "write_units_per_job": wcu_table + wcu_index,
        "write_units_table_per_job": wcu_table,
        "write_units_index_per_job": wcu_index,
        "drain_jobs_per_s": n / run["drain"]["wall_s"],
        "emulator_cpu_ms_per_job": run["drain"].get("emulator_cpu_s", 0.0) * 1000 / n,
        "enqueue_jobs_per_s": n / run["bulk"]["wall_s"],
        "producer_cpu_ms_per_job": run["bulk"]["producer_cpu_s"] * 1000 / n,
        "idle_p50_ms": _pct(latencies, 0.5),
        "idle_p95_ms": _pct(latencies, 0.95),
        "enqueue_call_p50_ms": _pct([x * 1000 for x in run["idle"]["enqueue_call_s"]], 0.5),
        # One job per call, as a web request enqueues (the bulk figure above is enqueue_many's).
        "producer_cpu_ms_per_call": _mean_ms(run["idle"].get("enqueue_call_cpu_s", [])),
        "cost_per_million_jobs_usd": cost,
        "cost_sqs_per_million_jobs_usd": sqs * PRICES["sqs_per_million_requests"],
        "cost_dynamodb_per_million_jobs_usd": (wcu_table + wcu_index)
        * PRICES["dynamodb_per_million_write_units"]
        + ddb_reads * PRICES["dynamodb_per_million_read_units"],
        "cost_cpu_per_million_jobs_usd": cpu_ms / 3_600_000 * PRICES["fargate_per_vcpu_hour"] * 1_000_000,
    }


def summarise(
    runs: list[dict[str, Any]], units: dict[str, dict[str, float]], frameworks: list[Framework]
) -> list[dict[str, Any]]:
    """Medians per (framework, latency), with ratios to the leanest peer taken run by run."""
    for run in runs:
        run["figures"] = figures(run, units)
    peers = {f.label for f in frameworks if f.is_peer}
    rows = []
    for latency in sorted({r["latency_ms"] for r in runs}):
        at = [r for r in runs if r["latency_ms"] == latency]
        by_run: dict[int, dict[str, dict[str, float]]] = {}
        for r in at:
            by_run.setdefault(r["run"], {})[r["framework"]] = r["figures"]
        for fw in frameworks:
            mine = [r["figures"] for r in at if r["framework"] == fw.label]
            if not mine:
                continue
            row: dict[str, Any] = {"framework": fw.label, "latency_ms": latency, "runs": len(mine)}
            for key in mine[0]:
                row[key] = statistics.median(m[key] for m in mine)
            ratios: dict[str, list[float]] = {"cpu": [], "requests": [], "cost": []}
            leanest: list[str] = []
            for same_run in by_run.values():
                peer_rows = {k: v for k, v in same_run.items() if k in peers}
                if fw.label not in same_run or not peer_rows:
                    continue
                lean = min(peer_rows, key=lambda k: peer_rows[k]["worker_cpu_ms_per_job"])
                leanest.append(lean)
                me, them = same_run[fw.label], peer_rows[lean]
                ratios["cpu"].append(me["worker_cpu_ms_per_job"] / them["worker_cpu_ms_per_job"])
                ratios["requests"].append(me["requests_per_job"] / them["requests_per_job"])
                ratios["cost"].append(me["cost_per_million_jobs_usd"] / them["cost_per_million_jobs_usd"])
            if leanest:
                row["leanest_peer"] = max(set(leanest), key=leanest.count)
                row.update({f"{k}_vs_leanest_peer": statistics.median(v) for k, v in ratios.items()})
            rows.append(row)
    return rows


def one_line(run: dict[str, Any], took_s: float) -> str:
    """Progress line printed after each run."""
    n = run["n"]
    reqs = sum(run["drain"]["requests"].values()) + sum(run["bulk"]["requests"].values())
    lat = sorted(run["idle"]["latency_s"])
    p50 = lat[len(lat) // 2] * 1000 if lat else float("nan")
    return (
        f"run {run.get('run', 0)} {run['framework']:<12} +{run['latency_ms']:g}ms: "
        f"cpu {run['drain']['worker_cpu_s'] * 1000 / n:.2f} ms/job, {reqs / n:.2f} req/job, "
        f"drain {n / run['drain']['wall_s']:.0f} jobs/s, idle p50 {p50:.0f} ms ({took_s:.0f} s)"
    )


#: Issue 31's targets against Dramatiq's 8 threads: (figure, sqsjobs row, what passes, its text).
TARGETS = (
    ("enqueue_call_p50_ms", "sqsjobs c8", lambda me, them, lat: me <= 1.15 * them, "≤ 1.15 x"),
    ("producer_cpu_ms_per_call", "sqsjobs c8", lambda me, them, lat: me <= 1.3 * them, "≤ 1.3 x"),
    ("drain_jobs_per_s", "sqsjobs c8", lambda me, them, lat: me >= them, "≥"),
    ("worker_cpu_ms_per_job", "sqsjobs c8", lambda me, them, lat: me <= 0.8 * them, "≤ 0.8 x"),
    ("worker_cpu_ms_per_job", "sqsjobs c32", lambda me, them, lat: me <= 0.6 * them, "≤ 0.6 x"),
    # One claim round trip: the proxy's added latency (the emulator's own answer time is not in it).
    ("idle_p50_ms", "sqsjobs c8", lambda me, them, lat: me <= them + lat, "≤ + one round trip,"),
)


def targets(rows: list[dict[str, Any]], latency: float) -> list[str]:
    """Issue 31's targets, side by side with ``dramatiq t8`` in the same run (nothing without it)."""
    by = {r["framework"]: r for r in rows}
    them = by.get("dramatiq t8")
    if them is None:
        return []
    out = [
        f"Targets against dramatiq t8 (+{latency:g} ms):",
        "",
        "| figure | sqsjobs | dramatiq t8 | target | met |",
        "|---|---|---|---|---|",
    ]
    for key, label, ok, text in TARGETS:
        me = by.get(label)
        if me is None:
            continue
        mine, theirs = me[key], them[key]
        met = "yes" if ok(mine, theirs, latency) else "**no**"
        out.append(f"| {key} ({label}) | {mine:.2f} | {theirs:.2f} | {text} dramatiq | {met} |")
    return [*out, ""]


def markdown(doc: dict[str, Any]) -> str:
    """The results table (one per proxy latency) and the conditions it was measured under."""
    meta, rows = doc["meta"], doc["summary"]
    out = [
        f"# sqsjobs vs Celery vs Dramatiq on SQS ({meta['started']})",
        "",
        f"{meta['n']} no-op jobs (1 KB payload) per backlog, {meta['k']} idle jobs, median of {meta['runs']} runs; "
        f"emulator {meta['emulator']}; {meta['cpus']} CPUs, load average {meta['load_average_before'][0]:.2f} before, "
        f"{meta['load_average_after'][0]:.2f} after; took {meta['duration_s']:.0f} s.",
        "",
    ]
    for latency in meta["latency_ms"]:
        at = [r for r in rows if r["latency_ms"] == latency]
        out += [
            f"## +{latency:g} ms per request at the proxy",
            "",
            "| framework | worker CPU ms/job | x leanest peer | requests/job (SQS + DynamoDB) | SQS req/job | "
            "DynamoDB write requests / WCU / reads per job | drain jobs/s | emulator CPU ms/job | "
            "idle enqueue→start p50 / p95 ms | bulk enqueue jobs/s | $ per million jobs |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in at:
            ratio = f"{r['cpu_vs_leanest_peer']:.2f}" if "cpu_vs_leanest_peer" in r else "-"
            out.append(
                f"| {r['framework']} | {r['worker_cpu_ms_per_job']:.2f} | {ratio} | {r['requests_per_job']:.2f} | "
                f"{r['sqs_requests_per_job']:.2f} | {r['dynamodb_writes_per_job']:.2f} / "
                f"{r['write_units_per_job']:.1f} / {r['dynamodb_reads_per_job']:.0f} | {r['drain_jobs_per_s']:.0f} | "
                f"{r['emulator_cpu_ms_per_job']:.1f} | "
                f"{r['idle_p50_ms']:.0f} / {r['idle_p95_ms']:.0f} | {r['enqueue_jobs_per_s']:.0f} | "
                f"{r['cost_per_million_jobs_usd']:.2f} |"
            )
        out.append("")
        out += targets(at, latency)
    out += ["## Requests per job by action (median run, enqueue + drain)", ""]
    for latency in meta["latency_ms"][:1]:
        for r in [r for r in rows if r["latency_ms"] == latency]:
            runs = [x for x in doc["runs"] if x["framework"] == r["framework"] and x["latency_ms"] == latency]
            mid = sorted(runs, key=lambda x: x["figures"]["requests_per_job"])[len(runs) // 2]
            n = mid["n"]
            parts = {}
            for phase in ("bulk", "drain"):
                for key, v in mid[phase]["requests"].items():
                    parts[key] = parts.get(key, 0) + v
            cells = ", ".join(f"{k} {v / n:.2f}" for k, v in sorted(parts.items()))
            out.append(f"- **{r['framework']}** (+{latency:g} ms): {cells}")
    units = meta["write_units_1kb"]
    p = meta["prices"]
    out += [
        "",
        "Write units per step for a 1 KB payload (MiniStack's size-based ConsumedCapacity, table + indexes): "
        + ", ".join(f"{k} {v['table']:g}+{v['indexes']:g}" for k, v in units.items())
        + ".",
        "",
        f"Prices (us-east-1, on-demand, {p['as_of']}): SQS ${p['sqs_per_million_requests']}/M requests, "
        f"DynamoDB ${p['dynamodb_per_million_write_units']}/M write units and "
        f"${p['dynamodb_per_million_read_units']}/M read units, worker CPU at Fargate "
        f"${p['fargate_per_vcpu_hour']}/vCPU-hour; free tiers ignored.",
        "",
        "Versions: " + ", ".join(f"{k} {v}" for k, v in sorted(meta["versions"].items())) + ".",
        "",
    ]
    return "\n".join(out)
