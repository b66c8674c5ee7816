"""The charts' series from CloudWatch: the EMF metrics the workers emit, read with GetMetricData.

On AWS the workers already write, per job type (``sqsjobs.observability.metrics``: dimensions
``service`` and ``job_type``), ``JobsStarted``, ``JobsSucceeded``, ``JobsRetried``, ``JobsDead``
(counts) and ``JobQueueWait``, ``JobRunTime`` (milliseconds, every value kept, so CloudWatch gives
percentiles); SQS publishes ``ApproximateNumberOfMessagesVisible`` and
``ApproximateAgeOfOldestMessage`` per queue (namespace ``AWS/SQS``). This reads them instead of the
job records (``sqsjobs.ops.series``), into the same ``Series``:

- started / succeeded / failed (``JobsRetried``) / dead: ``Sum`` per bucket, per type, summed;
- waiting: each queue's ``Maximum`` visible messages per bucket, summed over the App's queues
  (every level); oldest waiting: the largest ``ApproximateAgeOfOldestMessage``;
- wait and run p50 / p95 per type: ``p50``, ``p95`` and ``SampleCount`` over the whole window.

Cost: GetMetricData is billed per metric requested, $0.01 per 1,000 (whatever the table size,
however many datapoints each returns): 10 per job type (4 counts, 2 x 3 latency statistics) and 2
per SQS queue (a queue with priority levels has 3). An App of 10 types and 2 plain queues asks for
104 metrics per refresh, $0.00104: every 5 s that is $0.75 an hour, so the dashboard's refresh
stops while the tab is hidden. A query names its metrics exactly (no ``SEARCH`` expression, which
the emulators do not serve), so a type this process does not register is not charted.

CloudWatch's numbers arrive a minute or more after the fact (a worker flushes its EMF every
``metrics_interval_s``, and the log pipeline turns lines into metrics), and a count is per attempt
as the worker recorded it: the records' series and these can differ in the last minutes.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sqsjobs._aws import Call, Flow
from sqsjobs.observability import metrics as job_metrics
from sqsjobs.ops.series import COUNTS, WINDOWS, Series
from sqsjobs.transport.sqs import chunks

if TYPE_CHECKING:
    from collections.abc import Sequence

#: The count metric behind each counted series.
COUNT_METRICS = {
    "started": job_metrics.STARTED,
    "succeeded": job_metrics.SUCCEEDED,
    "failed": job_metrics.RETRIED,
    "dead": job_metrics.DEAD,
}
#: The timing metric behind each latency.
LATENCY_METRICS = {"wait": job_metrics.QUEUE_WAIT, "run": job_metrics.RUN_TIME}
LATENCY_STATS = {"p50": "p50", "p95": "p95", "n": "SampleCount"}
#: GetMetricData takes at most this many queries per request.
MAX_QUERIES = 500


def _query(
    ident: str, namespace: str, name: str, dimensions: dict[str, str], period: float, stat: str
) -> Any:
    return {
        "Id": ident,
        "MetricStat": {
            "Metric": {
                "Namespace": namespace,
                "MetricName": name,
                "Dimensions": [{"Name": k, "Value": v} for k, v in dimensions.items()],
            },
            "Period": int(period),
            "Stat": stat,
        },
        "ReturnData": True,
    }


def cloudwatch_series_flow(
    now: float,
    *,
    window: str,
    job_types: Sequence[str],
    queues: Sequence[str],
    namespace: str,
    service: str,
) -> Flow[Series]:
    """The series of ``window`` for ``job_types`` (summed) and the SQS queues named ``queues``."""
    if window not in WINDOWS:
        raise ValueError(f"window must be one of {', '.join(WINDOWS)}, got {window!r}")
    window_s, bucket_s = WINDOWS[window]
    buckets = int(window_s // bucket_s)
    end = math.floor(now / bucket_s) * bucket_s + bucket_s
    start = end - buckets * bucket_s
    queries: list[Any] = []
    meaning: dict[str, tuple[str, ...]] = {}
    for i, job_type in enumerate(job_types):
        dims = {"service": service, "job_type": job_type}
        for series, metric in COUNT_METRICS.items():
            queries.append(_query(f"c{i}_{series}", namespace, metric, dims, bucket_s, "Sum"))
            meaning[f"c{i}_{series}"] = ("count", series)
        for name, metric in LATENCY_METRICS.items():
            for key, stat in LATENCY_STATS.items():
                ident = f"l{i}_{name}_{key}"
                queries.append(_query(ident, namespace, metric, dims, window_s, stat))
                meaning[ident] = ("latency", job_type, name, key)
    for j, queue in enumerate(queues):
        dims = {"QueueName": queue}
        queries.append(
            _query(f"w{j}", "AWS/SQS", "ApproximateNumberOfMessagesVisible", dims, bucket_s, "Maximum")
        )
        queries.append(_query(f"o{j}", "AWS/SQS", "ApproximateAgeOfOldestMessage", dims, bucket_s, "Maximum"))
        meaning[f"w{j}"], meaning[f"o{j}"] = ("waiting",), ("oldest",)

    counts = {k: [0] * buckets for k in COUNTS}
    waiting, oldest = [0] * buckets, [0.0] * buckets
    stats: dict[tuple[str, str, str], dict[float, float]] = {}
    for chunk in chunks(queries, MAX_QUERIES):
        token: str | None = None
        while True:
            params: dict[str, Any] = {
                "MetricDataQueries": list(chunk),
                "StartTime": datetime.fromtimestamp(start, UTC),
                "EndTime": datetime.fromtimestamp(end, UTC),
                "ScanBy": "TimestampAscending",
            }
            if token:
                params["NextToken"] = token
            answer = yield Call("cloudwatch", "get_metric_data", params)
            for result in answer.get("MetricDataResults", []):
                what = meaning.get(result["Id"], ("?",))
                for when, value in zip(result.get("Timestamps", []), result.get("Values", []), strict=False):
                    ts = when.timestamp() if isinstance(when, datetime) else float(when)
                    slot = int((ts - start) // bucket_s)
                    if what[0] == "latency":
                        stats.setdefault((what[1], what[2], what[3]), {})[ts] = float(value)
                    elif not 0 <= slot < buckets:
                        continue
                    elif what[0] == "count":
                        counts[what[1]][slot] += round(value)
                    elif what[0] == "waiting":
                        waiting[slot] += round(value)
                    elif what[0] == "oldest":
                        oldest[slot] = max(oldest[slot], float(value))
            token = answer.get("NextToken")
            if not token:
                break
    return Series(
        start,
        bucket_s,
        buckets,
        counts,
        waiting,
        oldest,
        _latency(job_types, stats),
        source="cloudwatch",
        metrics=len(queries),
    )


def _latency(
    job_types: Sequence[str], stats: dict[tuple[str, str, str], dict[float, float]]
) -> dict[str, dict[str, dict[str, float | int | None]]]:
    """Per type with samples: p50/p95 in seconds (the datapoint with the most samples) and the sample count."""
    out: dict[str, dict[str, dict[str, float | int | None]]] = {}
    for job_type in job_types:
        entry: dict[str, dict[str, float | int | None]] = {}
        for name in LATENCY_METRICS:
            samples = stats.get((job_type, name, "n"), {})
            n = round(sum(samples.values()))
            best = max(samples, key=lambda ts: samples[ts]) if samples else None
            entry[name] = {
                key: (None if best is None else _seconds(stats.get((job_type, name, key), {}).get(best)))
                for key in ("p50", "p95")
            } | {"n": n}
        if any(v["n"] for v in entry.values()):
            out[job_type] = entry
    return out


def _seconds(ms: float | None) -> float | None:
    return None if ms is None else round(ms / 1000.0, 3)
