"""Chaos soak (issue 8): thousands of jobs through killed workers and injected AWS faults.

```
 driver (this process) ── producers ─┐
                                      ├─▶ AwsProxy (faults, seeded) ─▶ MiniStack (own instance)
 W worker processes ──────────────────┤        ▲
 sqsjobs sweep (short stale_after) ───┘        │ the driver watches and audits directly, no faults
 killer: every 2-5 s SIGKILL (or SIGTERM) a random worker, start a replacement
 ledger: SQLite file every handler writes to (bench/soak_app.py)
```

Pass means: no job lost (every enqueued job has its record, and every succeeded job ran and left its
effect), none stuck (all terminal by the deadline), succeeded/dead exactly as the job mix expects,
and 0 duplicate effects among handlers that pass the fencing token to their write.

Run: ``python -m bench.soak --jobs 5000 --fault-rate 0.10 --seed 1`` (``make soak``). The same seed
gives the same job mix, fault draws and kill schedule; thread timing still varies between runs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import re
import resource
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config

from bench.proxy import AwsProxy, FaultPlan
from bench.soak_app import build_app, create_ledger
from sqsjobs import JobRequest
from sqsjobs.errors import SqsJobsError
from sqsjobs.store import codec, schema
from sqsjobs.store.presence_items import WORKER_PREFIX

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
NON_TERMINAL = ("queued", "retry_scheduled", "running", schema.HELD)
#: Probability of each kind of job; "delayed" and "dup" run the quick handler.
DEFAULT_MIX = {
    "quick": 0.38,
    "quick_async": 0.10,
    "slow": 0.05,
    "flaky": 0.15,
    "permanent": 0.05,
    "delayed": 0.12,
    "dup": 0.15,
}
_CLK = os.sysconf("SC_CLK_TCK")
#: A SIGTERMed worker gets drain_timeout_s plus this to exit before it is SIGKILLed and counted: the
#: worker's own budget is drain_timeout_s + 10 s for handlers to stop + 5 s to flush acks.
DRAIN_GRACE_S = 20.0


@dataclass(frozen=True)
class SoakConfig:
    """One soak run; every random choice derives from ``seed``."""

    jobs: int = 5000
    workers: int = 4
    concurrency: int = 20
    fault_rate: float = 0.10
    seed: int = 1
    kill_min_s: float = 2.0
    kill_max_s: float = 5.0
    #: Share of kills that are SIGTERM (graceful drain) instead of SIGKILL.
    sigterm_share: float = 0.2
    #: Enqueue pace (jobs/s over all producers); 0 = as fast as possible.
    enqueue_rate: float = 0.0
    #: Enqueue batches in flight at once (async producer, one loop).
    producers: int = 32
    deadline_s: float = 540.0
    lease_s: float = 5.0
    visibility_timeout_s: int = 10
    receive_wait_s: int = 2
    stale_after_s: float = 10.0
    sweep_interval_s: float = 2.0
    drain_timeout_s: float = 3.0
    slow_job_s: float = 8.0
    max_delay_s: float = 15.0
    mix: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_MIX))
    #: Use this emulator instead of starting a private MiniStack (its CPU is then not measured).
    endpoint: str | None = None


@dataclass
class PlannedJob:
    """One job of the mix, as the driver expects it to end."""

    id: str
    kind: str
    type: str
    key: str
    payload: dict[str, Any]
    delay_s: float
    copies: int
    expected_status: str
    expected_runs: int


def plan_jobs(config: SoakConfig) -> list[PlannedJob]:
    """The job mix for ``config.seed``: deterministic ids (every job has an idempotency key)."""
    rng = random.Random(config.seed)
    kinds, weights = zip(*config.mix.items(), strict=True)
    planned = []
    for i in range(config.jobs):
        kind = rng.choices(kinds, weights)[0]
        job_type = kind if kind in ("quick", "quick_async", "slow", "flaky", "permanent") else "quick"
        payload: dict[str, Any] = {"n": i, "fenced": rng.random() < 0.5}
        delay = 0.0
        copies = 1
        runs = 1
        status = "succeeded"
        if kind == "slow":
            payload["sleep_s"] = config.slow_job_s
        elif kind == "flaky":
            payload["fail_times"] = rng.choice((1, 2))
            runs = payload["fail_times"] + 1
        elif kind == "permanent":
            payload["fenced"] = False
            status = "dead"
        else:
            payload["sleep_s"] = round(rng.uniform(0.0, 0.05), 3)
        if kind == "delayed":
            delay = round(rng.uniform(1.0, config.max_delay_s), 2)
        if kind == "dup":
            copies = rng.choice((2, 3))
        key = f"soak-{config.seed}-{i}"
        planned.append(
            PlannedJob(
                id=codec.idempotent_job_id(job_type, key),
                kind=kind,
                type=job_type,
                key=key,
                payload=payload,
                delay_s=delay,
                copies=copies,
                expected_status=status,
                expected_runs=runs,
            )
        )
    return planned


# ── processes ───────────────────────────────────────────────────────────────────────────────
def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of a live process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLK


class Fleet:
    """The worker processes and the sweeper; kills and replaces workers on a seeded schedule."""

    def __init__(self, config: SoakConfig, env: dict[str, str], log_dir: Path) -> None:
        self.config = config
        self.env = env
        self.log_dir = log_dir
        self.rng = random.Random(config.seed * 7919 + 1)
        self.workers: list[subprocess.Popen[bytes]] = []
        self.draining: list[threading.Thread] = []
        self._lock = threading.Lock()
        self.sweeper: subprocess.Popen[bytes] | None = None
        self.started = 0
        self.sigkills = 0
        self.sigterms = 0
        self.term_exits: Counter[str] = Counter()
        self.drain_s: list[float] = []
        self.kill_log: list[dict[str, Any]] = []
        #: Processes that exited without a signal from the fleet (a worker must never crash).
        self.crashes: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = time.monotonic()

    def _spawn(self, *args: str) -> subprocess.Popen[bytes]:
        self.started += 1
        log = open(self.log_dir / f"{args[0]}-{self.started}.log", "wb")  # noqa: SIM115 (owned by the child)
        try:
            return subprocess.Popen(
                [sys.executable, "-m", "sqsjobs", *args, "--app", "bench.soak_app:app"],
                env=self.env,
                cwd=REPO,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            log.close()

    def start(self) -> None:
        """Start the workers, the sweeper and the killer."""
        for _ in range(self.config.workers):
            self.workers.append(self._spawn("worker", "--concurrency", str(self.config.concurrency)))
        self.sweeper = self._spawn("sweep")
        self._thread = threading.Thread(target=self._kill_loop, name="soak-killer", daemon=True)
        self._thread.start()

    def _kill_loop(self) -> None:
        while not self._stop.wait(self.rng.uniform(self.config.kill_min_s, self.config.kill_max_s)):
            self._replace_crashed()
            victim = self.rng.randrange(len(self.workers))
            proc = self.workers[victim]
            graceful = self.rng.random() < self.config.sigterm_share
            if proc.poll() is None:
                if graceful:
                    proc.send_signal(signal.SIGTERM)
                    watcher = threading.Thread(
                        target=self._watch_exit, args=(proc, time.monotonic()), daemon=True
                    )
                    watcher.start()
                    self.draining.append(watcher)
                    self.sigterms += 1
                else:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    self.sigkills += 1
            self.kill_log.append(
                {
                    "t": round(time.monotonic() - self._t0, 2),
                    "pid": proc.pid,
                    "signal": "TERM" if graceful else "KILL",
                }
            )
            self.workers[victim] = self._spawn("worker", "--concurrency", str(self.config.concurrency))

    def _replace_crashed(self) -> None:
        """A worker that exited without being told to crashed: count it and start another."""
        for i, proc in enumerate(self.workers):
            if proc.poll() is not None:
                self.crashes.append(f"pid {proc.pid} exited {proc.returncode}")
                self.workers[i] = self._spawn("worker", "--concurrency", str(self.config.concurrency))

    def _watch_exit(self, proc: subprocess.Popen[bytes], since: float) -> None:
        """Wait for a SIGTERMed worker in a thread: its exact drain time, or SIGKILL past the budget."""
        try:
            rc = proc.wait(self.config.drain_timeout_s + DRAIN_GRACE_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            with self._lock:
                self.term_exits["killed_after_drain_budget"] += 1
            return
        with self._lock:
            self.term_exits[f"exit:{rc}"] += 1
            self.drain_s.append(round(time.monotonic() - since, 2))

    def stop(self) -> None:
        """Stop killing; SIGTERM everything still running and wait for it (SIGKILL after a grace)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
            self._replace_crashed()
            if self.sweeper is not None and self.sweeper.poll() is not None:
                self.crashes.append(f"sweeper exited {self.sweeper.returncode}")
        procs = [p for p in [*self.workers, self.sweeper] if p is not None and p.poll() is None]
        for p in procs:
            p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.config.drain_timeout_s + DRAIN_GRACE_S
        for p in procs:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        for watcher in self.draining:
            watcher.join()


# ── watching and auditing (directly on the emulator: no faults) ─────────────────────────────
class Auditor:
    """Reads the job table, queues and ledger without going through the proxy."""

    def __init__(self, endpoint: str, table: str, app_settings: Any) -> None:
        cfg = Config(retries={"mode": "standard", "max_attempts": 10}, read_timeout=60)
        self.ddb = boto3.client("dynamodb", endpoint_url=endpoint, region_name="us-east-1", config=cfg)
        self.sqs = boto3.client("sqs", endpoint_url=endpoint, region_name="us-east-1", config=cfg)
        self.table = table
        self.settings = app_settings

    def non_terminal(self) -> int:
        """Records not yet succeeded, dead or cancelled (a Scan: there is no status index any more)."""
        total = 0
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "FilterExpression": "#status IN (:q, :r, :run)",
            "ExpressionAttributeNames": {"#status": "status"},
            "ExpressionAttributeValues": {
                ":q": {"S": "queued"},
                ":r": {"S": "retry_scheduled"},
                ":run": {"S": "running"},
            },
            "Select": "COUNT",
        }
        while True:
            page = self.ddb.scan(**kwargs)
            total += int(page.get("Count", 0))
            if not page.get("LastEvaluatedKey"):
                break
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        return total

    def records(self) -> dict[str, dict[str, Any]]:
        """Every record, decoded to the fields the audit needs."""
        out: dict[str, dict[str, Any]] = {}
        kwargs: dict[str, Any] = {"TableName": self.table}
        while True:
            page = self.ddb.scan(**kwargs)
            for item in page.get("Items", []):
                if item["id"]["S"].startswith(WORKER_PREFIX):  # a worker's registry item, not a job
                    continue
                job = codec.job_from_item(item)
                out[job.id] = {
                    "status": str(job.status),
                    "attempt": job.attempt,
                    "epoch": job.lease_epoch,
                    "created_at": job.created_at.timestamp(),
                    "finished_at": job.finished_at.timestamp() if job.finished_at else None,
                    "reason": job.reason,
                    "outcomes": [h.outcome for h in job.history],
                }
            if not page.get("LastEvaluatedKey"):
                return out
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def queue_depths(self) -> dict[str, dict[str, int]]:
        """Messages left in the default queue and its DLQ."""
        out = {}
        for name in (self.settings.queue_name("default"), self.settings.dlq_name("default")):
            url = self.sqs.get_queue_url(QueueName=name)["QueueUrl"]
            attrs = self.sqs.get_queue_attributes(
                QueueUrl=url,
                AttributeNames=[
                    "ApproximateNumberOfMessages",
                    "ApproximateNumberOfMessagesNotVisible",
                    "ApproximateNumberOfMessagesDelayed",
                ],
            )["Attributes"]
            out[name] = {
                "visible": int(attrs["ApproximateNumberOfMessages"]),
                "in_flight": int(attrs["ApproximateNumberOfMessagesNotVisible"]),
                "delayed": int(attrs["ApproximateNumberOfMessagesDelayed"]),
            }
        return out


def _ledger(path: str) -> dict[str, Any]:
    with contextlib.closing(sqlite3.connect(path, timeout=60)) as db:
        runs: dict[str, set[int]] = {}
        run_rows: Counter[str] = Counter()
        for job_id, epoch in db.execute("SELECT job_id, epoch FROM runs"):
            runs.setdefault(job_id, set()).add(epoch)
            run_rows[job_id] += 1
        plain = Counter(j for (j,) in db.execute("SELECT job_id FROM plain"))
        plain_last = dict(db.execute("SELECT job_id, epoch FROM plain_last").fetchall())
        fenced = dict(db.execute("SELECT job_id, epoch FROM fenced").fetchall())
        refused = db.execute("SELECT count(*) FROM fence_log WHERE accepted = 0").fetchone()[0]
        accepted_writes = Counter(j for (j,) in db.execute("SELECT job_id FROM fence_log WHERE accepted = 1"))
    return {
        "runs": runs,
        "run_rows": run_rows,
        "plain": plain,
        "plain_last": plain_last,
        "fenced": fenced,
        "fence_refused": refused,
        "fenced_accepted": accepted_writes,
    }


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


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)


#: INFO lines of the execution that show a lost answer recognised as the worker's own write.
_CONFIRMED = ("claim confirmed after a lost answer", "write confirmed after a lost answer")
_LEASE_MSG = re.compile(r"epoch (\d+) lost its lease: now (\w+), owner (\S+), epoch ([\d.]+|None)")


def _log_events(log_dir: Path) -> dict[str, Any]:
    """Counts of the workers' and sweeper's WARNING+ log lines by message, and self-refused writes."""
    events: Counter[str] = Counter()
    confirmed: Counter[str] = Counter()
    self_refused = 0
    for path in log_dir.glob("*.log"):
        for line in path.read_text(errors="replace").splitlines():
            if not line.startswith("{"):
                if "Traceback" in line:
                    events["(traceback)"] += 1
                continue
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if entry.get("message") in _CONFIRMED:
                confirmed[str(entry["message"])] += 1
            if entry.get("level") in ("WARNING", "ERROR", "CRITICAL"):
                events[str(entry.get("message"))] += 1
                match = _LEASE_MSG.search(str(entry.get("error", "")))
                # refused although the record already shows this epoch's own transition
                if (
                    entry.get("message") == "write refused: lease lost"
                    and match
                    and match.group(2) != "running"
                    and match.group(4) != "None"
                    and int(float(match.group(4))) == int(match.group(1))
                ):
                    self_refused += 1
    return {
        "warnings": dict(events.most_common()),
        "refused_own_write": self_refused,
        "lost_answers_recognised": dict(confirmed),
    }


# ── the run ────────────────────────────────────────────────────────────────────────────────────
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
        sys.path.insert(0, str(REPO))
        from tests.emulators import MiniStack

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
    proxy: AwsProxy | None = None
    fleet: Fleet | None = None
    passed = False
    try:
        admin.provision()
        tally = FaultTally()
        proxy = AwsProxy(
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
        ms_cpu0 = _cpu_s(server.pid) if server else 0.0
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
        ms_cpu = (_cpu_s(server.pid) - ms_cpu0) if server else None
        load_after = os.getloadavg()
        t_stop = time.monotonic()
        fleet.stop()
        t_stopped = time.monotonic()
        kids_cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        self_cpu1 = resource.getrusage(resource.RUSAGE_SELF)
        proxy_counts = proxy.snapshot()
        records = auditor.records()
        depths = auditor.queue_depths()
        report = _audit(config, planned, records, _ledger(ledger))
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
                "drain_s_p50": _percentile(fleet.drain_s, 0.5),
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
            logs=_log_events(work),
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


def _audit(
    config: SoakConfig, planned: list[PlannedJob], records: dict[str, dict[str, Any]], ledger: dict[str, Any]
) -> dict[str, Any]:
    expected_status = Counter(j.expected_status for j in planned)
    actual_status = Counter(records[j.id]["status"] for j in planned if j.id in records)
    missing = [j.id for j in planned if j.id not in records]
    unexpected_records = sorted(set(records) - {j.id for j in planned})
    stuck = [j.id for j in planned if j.id in records and records[j.id]["status"] in NON_TERMINAL]
    wrong = [
        (j.id, j.kind, records[j.id]["status"], records[j.id]["reason"])
        for j in planned
        if j.id in records and j.id not in stuck and records[j.id]["status"] != j.expected_status
    ]
    runs, run_rows = ledger["runs"], ledger["run_rows"]
    succeeded_without_run = []
    missing_effect = []
    duplicate_runs = 0
    jobs_with_duplicates = 0
    plain_dup_effects = 0
    plain_stale = 0
    fenced_dup_effects = 0
    fenced_jobs = plain_jobs = 0
    claims_without_run = 0
    duplicates_by_kind: Counter[str] = Counter()
    latencies: list[float] = []
    for j in planned:
        rec = records.get(j.id)
        if rec is None or rec["status"] in NON_TERMINAL:
            continue
        claims_without_run += max(0, rec["epoch"] - len(runs.get(j.id, ())))
        extra = max(0, run_rows.get(j.id, 0) - j.expected_runs)
        duplicate_runs += extra
        jobs_with_duplicates += bool(extra)
        duplicates_by_kind[j.kind] += extra
        if rec["status"] != "succeeded":
            continue
        latencies.append(rec["finished_at"] - (rec["created_at"] + j.delay_s))
        if rec["epoch"] not in runs.get(j.id, set()):
            succeeded_without_run.append(j.id)
        if j.payload.get("fenced"):
            fenced_jobs += 1
            standing = ledger["fenced"].get(j.id)
            if standing is None:
                missing_effect.append(j.id)
            elif standing != rec["epoch"]:
                fenced_dup_effects += 1  # a stale run's effect stands instead of the completing run's
        else:
            plain_jobs += 1
            applied = ledger["plain"].get(j.id, 0)
            if applied == 0:
                missing_effect.append(j.id)
            plain_dup_effects += max(0, applied - 1)
            if ledger["plain_last"].get(j.id) not in (None, rec["epoch"]):
                plain_stale += 1
    slowest = sorted(
        (
            (
                round(rec["finished_at"] - rec["created_at"] - j.delay_s, 1),
                j.kind,
                rec["epoch"],
                rec["outcomes"],
            )
            for j in planned
            if (rec := records.get(j.id)) and rec["finished_at"] and rec["status"] == "succeeded"
        ),
        reverse=True,
    )[:5]
    lost = len(missing) + len(succeeded_without_run) + len(missing_effect)
    passed = (
        lost == 0
        and not stuck
        and not wrong
        and fenced_dup_effects == 0
        and not unexpected_records
        and actual_status == expected_status
    )
    n = len(planned)
    return {
        "seed": config.seed,
        "jobs": {
            "enqueued": n,
            "expected": dict(expected_status),
            "actual": dict(actual_status),
            "by_kind": dict(Counter(j.kind for j in planned)),
        },
        "lost": {
            "total": lost,
            "no_record": missing[:20],
            "succeeded_without_run": succeeded_without_run[:20],
            "succeeded_without_effect": missing_effect[:20],
        },
        "stuck": {"count": len(stuck), "ids": stuck[:20]},
        "wrong_status": {"count": len(wrong), "examples": wrong[:20]},
        "unexpected_records": len(unexpected_records),
        "duplicates": {
            "handler_runs": duplicate_runs,
            "handler_runs_pct": round(100 * duplicate_runs / n, 2),
            "jobs_with_a_duplicate_run": jobs_with_duplicates,
            "handler_runs_by_kind": dict(duplicates_by_kind),
            "plain_jobs": plain_jobs,
            "plain_duplicate_effects": plain_dup_effects,
            "plain_stale_overwrites": plain_stale,
            "fenced_jobs": fenced_jobs,
            "fenced_duplicate_effects": fenced_dup_effects,
            "fenced_writes_refused": ledger["fence_refused"],
            "claims_without_a_run": claims_without_run,
        },
        "latency_s": {
            "enqueue_to_done_p50": _percentile(latencies, 0.50),
            "enqueue_to_done_p95": _percentile(latencies, 0.95),
            "enqueue_to_done_max": round(max(latencies), 3) if latencies else None,
            "mean": round(statistics.fmean(latencies), 3) if latencies else None,
            "slowest": [
                {"seconds": sec, "kind": kind, "claims": epoch, "outcomes": outcomes}
                for sec, kind, epoch, outcomes in slowest
            ],
        },
        "verdict": {
            "passed": passed,
            "rule": (
                "lost == 0, stuck == 0, succeeded/dead as expected, fenced duplicate effects == 0, "
                "no worker or sweeper crashed"
            ),
        },
    }


# ── output ─────────────────────────────────────────────────────────────────────────────────────
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


def main(argv: list[str] | None = None) -> int:
    """Command line: ``python -m bench.soak --jobs 5000 --fault-rate 0.1 --seed 1``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
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
