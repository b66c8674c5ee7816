"""Chaos soak (issue 8): thousands of jobs through killed workers and injected AWS faults.

```
 driver (this process) ── producers ─┐
                                      ├─▶ FaultProxy (seeded) ─▶ MiniStack (own instance)
 W worker processes ──────────────────┤        ▲
 sqsjobs sweep (short stale_after) ───┘        │ the driver watches and audits directly, no faults
 killer: every 2-5 s SIGKILL (or SIGTERM) a random worker, start a replacement
 ledger: SQLite file every handler writes to (tests/soak/soak_app.py)
```

Pass means: no job lost (every enqueued job has its record, and every succeeded job ran and left its
effect), none stuck (all terminal by the deadline), succeeded/dead exactly as the job mix expects,
and 0 duplicate effects among handlers that pass the fencing token to their write.

Run: ``python -m tests.soak --jobs 5000 --fault-rate 0.10 --seed 1`` (``make soak``). The same seed
gives the same job mix, fault draws and kill schedule; thread timing still varies between runs.

The parts: the job mix (``plan.py``), the processes and the killer (``fleet.py``), the fault proxy
(``faults.py``), the audit (``audit.py``) and the report (``results.py``); this module runs them.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import resource
import shutil
import tempfile
import threading
import time
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Any

from sqsjobs import JobRequest
from sqsjobs.errors import SqsJobsError
from tests.emulators import MiniStack
from tests.soak.audit import Auditor, audit, log_events, percentile, read_ledger
from tests.soak.faults import FaultPlan, FaultProxy
from tests.soak.fleet import REPO, Fleet, cpu_s
from tests.soak.plan import PlannedJob, SoakConfig, plan_jobs
from tests.soak.results import RESULTS, summary, write_report
from tests.soak.soak_app import build_app, create_ledger

_TRANSITIONS = (  # (label, a fragment only that request's UpdateExpression has), first match wins
    ("claim", "lease_epoch = lease_epoch + :one"),
    ("finish", "#status = :final"),  # complete, fail and abort share one builder
    ("complete", "#status = :done"),
    ("retry", "#status = :retry"),
    ("release", "attempt = attempt - :one"),
    ("heartbeat", "lease_expires = :expires, due = :expires"),
    ("sweep_mark", "due = :next"),
    ("fail_or_reject", ":dead"),
)


class FaultTally:
    """Names the operation behind each injected fault: a DynamoDB write by its transition."""

    def __init__(self) -> None:
        self.by_operation: Counter[str] = Counter()
        self._lock = threading.Lock()

    def __call__(self, kind: str, service: str, action: str, body: bytes) -> None:
        """``on_fault`` hook of the proxy."""
        label = action
        if action == "UpdateItem":
            text = body.decode("utf-8", "replace")
            label = next(
                (f"UpdateItem:{name}" for name, frag in _TRANSITIONS if frag in text), "UpdateItem:other"
            )
            if label == "UpdateItem:finish":  # the new status is the only final one in the body
                label += next((f":{st}" for st in ("succeeded", "dead") if f'"{st}"' in text), ":cancelled")
        with self._lock:
            self.by_operation[f"{kind} {service}:{label}"] += 1


def run_soak(config: SoakConfig, *, keep_logs: bool = False) -> dict[str, Any]:
    """Run one soak and return its report (also see ``write_report``)."""
    rng_name = random.Random(config.seed).getrandbits(32)
    name = f"soak{config.seed}x{rng_name:08x}"[:24] + f"{int(time.time()) % 100000}"
    t_setup = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="sqsjobs-soak-"))
    ledger = str(work / "ledger.sqlite")
    create_ledger(ledger)
    server = None
    if config.endpoint is None:
        server = MiniStack()
        endpoint = server.start()
    else:
        endpoint = config.endpoint
    settings = {
        "lease_s": config.lease_s,
        "visibility_timeout_s": config.visibility_timeout_s,
        "receive_wait_s": config.receive_wait_s,
        "stale_after_s": config.stale_after_s,
        "sweep_interval_s": config.sweep_interval_s,
        "drain_timeout_s": config.drain_timeout_s,
    }
    admin = build_app(name, endpoint_url=endpoint, **settings)
    proxy: FaultProxy | None = None
    fleet: Fleet | None = None
    passed = False
    try:
        admin.provision()
        tally = FaultTally()
        proxy = FaultProxy(
            endpoint, faults=FaultPlan.uniform(config.fault_rate), seed=config.seed, on_fault=tally
        )
        proxy_url = proxy.start()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "SQSJOBS_"))}
        env.update(
            AWS_ACCESS_KEY_ID="testing",
            AWS_SECRET_ACCESS_KEY="testing",
            AWS_DEFAULT_REGION="us-east-1",
            PYTHONPATH=str(REPO),
            SOAK_APP_NAME=name,
            SOAK_LEDGER=ledger,
            SQSJOBS_ENDPOINT_URL=proxy_url,
            SQSJOBS_LOG_LEVEL="INFO",
            **{f"SQSJOBS_{k.upper()}": str(v) for k, v in settings.items()},
        )
        planned = plan_jobs(config)
        auditor = Auditor(endpoint, admin.settings.table_name, admin.settings)
        ms_cpu0 = cpu_s(server.pid) if server else 0.0
        self_cpu0 = resource.getrusage(resource.RUSAGE_SELF)
        kids_cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        load_before = os.getloadavg()
        t0 = time.monotonic()
        fleet = Fleet(config, env, work)
        fleet.start()
        enqueue = _enqueue_all(config, name, proxy_url, settings, planned)
        t_enqueued = time.monotonic() - t0
        deadline = t0 + config.deadline_s
        remaining = -1
        while time.monotonic() < deadline:
            remaining = auditor.non_terminal()
            if remaining == 0:
                break
            time.sleep(2.0)
        t_done = time.monotonic() - t0
        ms_cpu = (cpu_s(server.pid) - ms_cpu0) if server else None
        load_after = os.getloadavg()
        t_stop = time.monotonic()
        fleet.stop()
        t_stopped = time.monotonic()
        kids_cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        self_cpu1 = resource.getrusage(resource.RUSAGE_SELF)
        proxy_counts = proxy.snapshot()
        records = auditor.records()
        depths = auditor.queue_depths()
        report = audit(config, planned, records, read_ledger(ledger))
        report.update(
            config={k: v for k, v in asdict(config).items() if k != "endpoint"},
            app=name,
            passed=report["verdict"]["passed"],
            enqueue=enqueue,
            wall_s={
                "setup": round(t0 - t_setup, 1),
                "enqueue": round(t_enqueued, 1),
                "all_terminal": round(t_done, 1),
                "stop_fleet": round(t_stopped - t_stop, 1),
                "audit": round(time.monotonic() - t_stopped, 1),
            },
            remaining_non_terminal_at_stop=remaining,
            faults_injected=proxy_counts["faults"],
            faults_by_operation=dict(sorted(tally.by_operation.items())),
            requests=proxy_counts["requests"],
            requests_per_job=round(sum(proxy_counts["requests"].values()) / max(1, len(planned)), 2),
            kills={
                "sigkill": fleet.sigkills,
                "sigterm": fleet.sigterms,
                "sigterm_exits": dict(fleet.term_exits),
                "drain_s_p50": percentile(fleet.drain_s, 0.5),
                "drain_s_max": max(fleet.drain_s, default=None),
                "workers_started": fleet.started - 1,
            },
            crashes=fleet.crashes,
            cpu={
                "emulator_s": round(ms_cpu, 1) if ms_cpu is not None else None,
                "emulator_ms_per_job": round(1000 * ms_cpu / len(planned), 2) if ms_cpu is not None else None,
                "workers_and_sweeper_s": round(
                    kids_cpu1.ru_utime + kids_cpu1.ru_stime - kids_cpu0.ru_utime - kids_cpu0.ru_stime, 1
                ),
                "driver_and_proxy_s": round(
                    self_cpu1.ru_utime + self_cpu1.ru_stime - self_cpu0.ru_utime - self_cpu0.ru_stime, 1
                ),
            },
            load_avg={
                "before": [round(x, 2) for x in load_before],
                "after": [round(x, 2) for x in load_after],
            },
            cores=os.cpu_count(),
            queues_at_end=depths,
            logs=log_events(work),
        )
        if fleet.crashes:
            report["passed"] = report["verdict"]["passed"] = False
        passed = bool(report["passed"])
        if keep_logs or not passed:
            report["work_dir"] = str(work)
        return report
    finally:
        if fleet is not None:
            fleet.stop()
        if proxy is not None:
            proxy.stop()
        admin.close()
        if server is not None:
            server.stop()
        if passed and not keep_logs:
            shutil.rmtree(work, ignore_errors=True)


def _enqueue_all(
    config: SoakConfig, name: str, proxy_url: str, settings: dict[str, Any], planned: list[PlannedJob]
) -> dict[str, Any]:
    """Enqueue every copy of every job through the proxy: batches of ten, ``producers`` at a time.

    One asyncio loop with the async producer API, so a batch stalled by a slow fault (30 s until
    the read timeout) holds up only itself.
    """
    copies = [j for j in planned for _ in range(j.copies)]
    random.Random(config.seed + 1).shuffle(copies)
    batches = [copies[i : i + 10] for i in range(0, len(copies), 10)]
    errors: Counter[str] = Counter()
    mismatched: list[str] = []
    started = time.monotonic()

    async def produce_all() -> None:
        app = build_app(name, endpoint_url=proxy_url, **settings)
        gate = asyncio.Semaphore(config.producers)

        async def produce(index: int) -> None:
            if config.enqueue_rate > 0:
                await asyncio.sleep(max(0.0, started + index * 10 / config.enqueue_rate - time.monotonic()))
            batch = batches[index]
            requests = [
                JobRequest(j.type, j.payload, idempotency_key=j.key, delay=j.delay_s or None) for j in batch
            ]
            async with gate:
                for _ in range(10):  # the keys make a repeated batch safe
                    try:
                        ids = await app.aenqueue_many(requests)
                        break
                    except SqsJobsError as exc:
                        errors[type(exc).__name__] += 1
                else:
                    raise RuntimeError("enqueue failed 10 times in a row")
            mismatched.extend(job.id for job, got in zip(batch, ids, strict=True) if got != job.id)

        try:
            await asyncio.gather(*(produce(i) for i in range(len(batches))))
        finally:
            await app.aclose()

    asyncio.run(produce_all())
    return {
        "calls": len(copies),
        "distinct_jobs": len(planned),
        "duplicate_enqueues": len(copies) - len(planned),
        "errors_retried": dict(errors),
        "id_mismatches": len(mismatched),
        "seconds": round(time.monotonic() - started, 1),
    }


def main(argv: list[str] | None = None) -> int:
    """Command line: ``python -m tests.soak --jobs 5000 --fault-rate 0.1 --seed 1``."""
    parser = argparse.ArgumentParser(prog="python -m tests.soak", description=__doc__.split("\n\n")[0])
    defaults = SoakConfig()
    for f in (
        "jobs",
        "workers",
        "concurrency",
        "seed",
        "producers",
        "visibility_timeout_s",
        "receive_wait_s",
    ):
        parser.add_argument(f"--{f.replace('_', '-')}", type=int, default=getattr(defaults, f))
    for f in (
        "fault_rate",
        "kill_min_s",
        "kill_max_s",
        "sigterm_share",
        "enqueue_rate",
        "deadline_s",
        "lease_s",
        "stale_after_s",
        "sweep_interval_s",
        "drain_timeout_s",
        "slow_job_s",
    ):
        parser.add_argument(f"--{f.replace('_', '-')}", type=float, default=getattr(defaults, f))
    parser.add_argument(
        "--endpoint", default=None, help="an emulator already running (default: own MiniStack)"
    )
    parser.add_argument("--keep-logs", action="store_true", help="keep the workers' logs and the ledger")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = vars(parser.parse_args(argv))
    for key, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing")):
        os.environ.setdefault(key, value)  # the emulator accepts any credentials
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")  # the producers' EMF lines are noise here
    keep, out = args.pop("keep_logs"), args.pop("out")
    report = run_soak(SoakConfig(**args), keep_logs=keep)
    json_path, md_path = write_report(report, out)
    print(summary(report))
    print(f"report: {json_path}\nsummary: {md_path}")
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
