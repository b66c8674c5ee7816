"""The soak's audit: what the table, the queues, the ledger and the logs say once the run is over.

It reads directly from the emulator, never through the fault proxy, and judges the run: no job
lost, none stuck, every final status as the mix expects, no duplicate effect of a fenced handler.
"""

from __future__ import annotations

import contextlib
import json
import re
import sqlite3
import statistics
from collections import Counter
from typing import TYPE_CHECKING, Any

import boto3
from botocore.config import Config

from sqsjobs.store import codec, schema
from sqsjobs.store.presence_items import WORKER_PREFIX

if TYPE_CHECKING:
    from pathlib import Path

    from tests.soak.plan import PlannedJob, SoakConfig

NON_TERMINAL = ("queued", "retry_scheduled", "running", schema.HELD)


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
                if (
                    item["id"]["S"].startswith(WORKER_PREFIX) or "type" not in item
                ):  # a registry or probe item
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


def read_ledger(path: str) -> dict[str, Any]:
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


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)


#: INFO lines of the execution that show a lost answer recognised as the worker's own write.
_CONFIRMED = ("claim confirmed after a lost answer", "write confirmed after a lost answer")
_LEASE_MSG = re.compile(r"epoch (\d+) lost its lease: now (\w+), owner (\S+), epoch ([\d.]+|None)")


def log_events(log_dir: Path) -> dict[str, Any]:
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


def audit(
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
            "enqueue_to_done_p50": percentile(latencies, 0.50),
            "enqueue_to_done_p95": percentile(latencies, 0.95),
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
