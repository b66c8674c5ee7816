"""Time series for the charts, from the job records: starts and outcomes per bucket, waiting jobs, p50/p95.

On the emulators (and whenever CloudWatch is not wanted) the series come from what the records
hold: one Scan projecting each record's type, times and capped attempt history, capped at
``max_entries`` items like ``sqsjobs stats``'s (0.5 read unit per 4 KB item read: at most 1,250
read units, $0.00016, per refresh at the default 10,000 items of 1 KB; a table larger than the cap
is sampled, and ``truncated`` says so). From each record:

- **started**: every attempt's start (the history's, and the record's own ``started_at`` for the
  attempt the history does not hold: the running one, or one that succeeded without a history);
- **succeeded**, **failed** (an attempt that failed and was retried), **dead**: each history entry's
  outcome at its ``finished_at``, and the record's own status at its ``finished_at``;
- **waiting** at the end of each bucket: jobs created by then and not yet started (nor finished
  without a run); **oldest waiting**: the age of the oldest of them;
- **wait** (first start - creation, a requested delay included) and **run** (an attempt's finish -
  its start), p50 and p95 per type over the window.

A history is capped (``store``), so a job with more attempts than it keeps counts only the kept ones.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqsjobs._aws import Call, Flow

if TYPE_CHECKING:
    from sqsjobs.config import Settings

#: Records one pass reads at most (the cost bound above).
DEFAULT_MAX_ENTRIES = 10_000
#: The windows the charts offer, and the bucket each is drawn in.
WINDOWS = {"1h": (3600.0, 60.0), "1d": (86_400.0, 900.0)}
#: The counted series, in drawing order.
COUNTS = ("started", "succeeded", "failed", "dead")
_OUTCOMES = {"succeeded": "succeeded", "retry": "failed", "dead": "dead"}
_NAMES = {
    "#t": "type",
    "#s": "status",
    "#c": "created_at",
    "#b": "started_at",
    "#f": "finished_at",
    "#h": "history",
    "#n": "attempt",
}


#: What AWS answers a role that may not call GetMetricData (the reader then reads the records).
ACCESS_DENIED = ("AccessDenied", "AccessDeniedException")


def series_source(settings: Settings) -> str:
    """``records`` or ``cloudwatch``: ``charts_source``, where ``auto`` is CloudWatch unless an emulator is named."""
    if settings.charts_source != "auto":
        return settings.charts_source
    return "records" if settings.endpoint_url else "cloudwatch"


@dataclass
class Series:
    """The buckets of one window, for one job type or all of them."""

    start: float
    bucket_s: float
    buckets: int
    #: ``started``/``succeeded``/``failed``/``dead`` → a count per bucket.
    counts: dict[str, list[int]]
    #: Jobs waiting at the end of each bucket, and the age of the oldest of them (0 when none).
    waiting: list[int]
    oldest_waiting_s: list[float]
    #: Per type: ``{"wait": {"p50", "p95", "n"}, "run": {...}}`` over the window.
    latency: dict[str, dict[str, dict[str, float | int | None]]] = field(default_factory=dict)
    #: Records read, and whether the cap stopped the Scan.
    read: int = 0
    truncated: bool = False
    #: Where the numbers came from: ``records`` (this module) or ``cloudwatch``
    #: (``sqsjobs.ops.cloudwatch_series``), and the metrics GetMetricData was asked for (its price).
    source: str = "records"
    metrics: int = 0

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "start": self.start,
            "bucket_s": self.bucket_s,
            "buckets": self.buckets,
            "counts": self.counts,
            "waiting": self.waiting,
            "oldest_waiting_s": self.oldest_waiting_s,
            "latency": self.latency,
            "read": self.read,
            "truncated": self.truncated,
            "source": self.source,
            "metrics": self.metrics,
        }


def percentile(values: list[float], q: float) -> float | None:
    """The ``q`` quantile (0..1) of ``values``, nearest rank; None for none."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def _n(av: dict[str, Any] | None) -> float | None:
    return float(av["N"]) if av and "N" in av else None


class _Builder:
    def __init__(self, now: float, window_s: float, bucket_s: float) -> None:
        self.buckets = int(window_s // bucket_s)
        self.end = math.floor(now / bucket_s) * bucket_s + bucket_s
        self.start = self.end - self.buckets * bucket_s
        self.bucket_s = bucket_s
        self.counts = {k: [0] * self.buckets for k in COUNTS}
        self.spans: list[tuple[float, float]] = []  # (created, first start or end) of every job
        self.waits: dict[str, list[float]] = {}
        self.runs: dict[str, list[float]] = {}

    def _add(self, series: str, ts: float | None) -> None:
        if ts is not None and self.start <= ts < self.end:
            self.counts[series][int((ts - self.start) // self.bucket_s)] += 1

    def record(self, item: dict[str, Any]) -> None:
        job_type = item.get("type", {}).get("S", "?")
        created, started, finished = (
            _n(item.get("created_at")),
            _n(item.get("started_at")),
            _n(item.get("finished_at")),
        )
        first_start: float | None = None
        seen: set[float] = set()
        for entry in item.get("history", {}).get("L", []):
            h = entry.get("M", {})
            if (number := _n(h.get("attempt"))) is not None:
                seen.add(number)
            begun, ended = _n(h.get("started_at")), _n(h.get("finished_at"))
            self._add("started", begun)
            outcome = _OUTCOMES.get(h.get("outcome", {}).get("S", ""))
            if outcome:
                self._add(outcome, ended)
            if begun is not None and ended is not None and self.start <= ended < self.end:
                self.runs.setdefault(job_type, []).append(ended - begun)
            if begun is not None and (first_start is None or begun < first_start):
                first_start = begun
        # The current (or last) attempt is in the record itself: a job that succeeded on its first
        # attempt has no history entry at all (the happy path writes none).
        attempt, status = _n(item.get("attempt")), item.get("status", {}).get("S", "")
        if started is not None and attempt is not None and attempt not in seen:
            self._add("started", started)
            first_start = started if first_start is None else min(first_start, started)
            if status in ("succeeded", "dead") and finished is not None:
                self._add(status, finished)
                if self.start <= finished < self.end:
                    self.runs.setdefault(job_type, []).append(finished - started)
        if created is not None:
            self.spans.append((created, first_start if first_start is not None else finished or math.inf))
            if first_start is not None and self.start <= first_start < self.end:
                self.waits.setdefault(job_type, []).append(max(0.0, first_start - created))

    def series(self, read: int, truncated: bool) -> Series:
        waiting, oldest = [], []
        for i in range(self.buckets):
            t = self.start + (i + 1) * self.bucket_s
            ages = [t - c for c, s in self.spans if c <= t < s]
            waiting.append(len(ages))
            oldest.append(round(max(ages), 3) if ages else 0.0)
        latency = {
            job_type: {
                name: {
                    "p50": percentile(values.get(job_type, []), 0.5),
                    "p95": percentile(values.get(job_type, []), 0.95),
                    "n": len(values.get(job_type, [])),
                }
                for name, values in (("wait", self.waits), ("run", self.runs))
            }
            for job_type in sorted(set(self.waits) | set(self.runs))
        }
        return Series(
            self.start, self.bucket_s, self.buckets, self.counts, waiting, oldest, latency, read, truncated
        )


def records_series_flow(
    settings: Settings,
    now: float,
    *,
    window: str = "1h",
    job_type: str | None = None,
    max_entries: int = DEFAULT_MAX_ENTRIES,
) -> Flow[Series]:
    """The series of ``window`` (a key of ``WINDOWS``) from one capped Scan of the records."""
    if window not in WINDOWS:
        raise ValueError(f"window must be one of {', '.join(WINDOWS)}, got {window!r}")
    if max_entries < 1:
        raise ValueError(f"max_entries must be at least 1, got {max_entries}")
    window_s, bucket_s = WINDOWS[window]
    builder = _Builder(now, window_s, bucket_s)
    params: dict[str, Any] = {
        "TableName": settings.table_name,
        "ProjectionExpression": ", ".join(_NAMES),
        "ExpressionAttributeNames": dict(_NAMES),
    }
    if job_type is not None:  # the filter shrinks the answer, not the bill
        params["FilterExpression"] = "#t = :t"
        params["ExpressionAttributeValues"] = {":t": {"S": job_type}}
    read, start, truncated = 0, None, False
    while True:
        request = params | {"Limit": max_entries - read}
        if start:
            request["ExclusiveStartKey"] = start
        page = yield Call("dynamodb", "scan", request)
        for item in page.get("Items", []):
            if "created_at" in item:  # job records only (control items have none)
                builder.record(item)
        read += int(page.get("ScannedCount", len(page.get("Items", []))))
        start = page.get("LastEvaluatedKey")
        if not start:
            break
        if read >= max_entries:
            truncated = True
            break
    return builder.series(read, truncated)
