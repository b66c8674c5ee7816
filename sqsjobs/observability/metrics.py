"""Metrics for every job transition, as CloudWatch EMF lines written by Powertools.

Per job type (and per tenant, as a second dimension set, when the job has one; and with the job's
tags named in ``Settings.metric_tags`` as further dimensions: each distinct value is a CloudWatch
metric of its own, so only tags of few values belong there)::

    JobsEnqueued   JobsStarted   JobsSucceeded   JobsRetried   JobsDead   JobsCancelled   (Count)
    JobRunTime     claim → outcome recorded                                        (Milliseconds)
    JobQueueWait   due (run_at) → claimed                                          (Milliseconds)
    ClaimsRefused  claims the record refused (a copy of a finished job, a job not due,   (Count)
                   one another worker holds, one whose attempts runs used up)
    OldestJobWait  the longest a job of the type had waited since due when a worker  (Seconds)
                   met it: claimed (its JobQueueWait) or sent back by a limit or a pause;
                   one value per type per flush, the maximum (per-type figure beside the
                   queue's ApproximateAgeOfOldestMessage)

Per service (the App's name), from each ECS worker once per ``Settings.registry_interval_s``::

    WorkerHeartbeat   one per worker refresh, written at once (not buffered)          (Count)

Per limit and per paused type, from each worker with flow control (``sqsjobs.limits.plugin``)::

    LimitSlotsHeld  slots this worker holds at the flush (Sum over workers: running)  (Count)
    JobsDeferred    jobs the limit sent back to wait   LimitWritesRefused  refused limit writes
    JobsPaused      (dimension job_type) jobs of a paused type sent back to wait       (Count)

Its sum per minute is about workers x 60 / interval; infra/ alarms when it is missing (every
worker of the service silent or gone).

Counts are summed in memory; run and wait times keep every value (CloudWatch takes p50/p95 from
the values of an EMF line). Nothing is sent anywhere: a flush prints one JSON line per
(job type, tenant) to stdout, where Lambda's log pipeline (or a FireLens/CloudWatch-agent route on
ECS) turns it into metrics. Who flushes:

- the Lambda entry point, at the end of every invocation;
- the ECS worker, every ``Settings.metrics_interval_s`` and when it stops;
- any process, on the next transition once ``metrics_interval_s`` has passed since the last flush,
  so a producer that only enqueues still reports (call ``app.telemetry.metrics.flush()`` before it exits).

``POWERTOOLS_METRICS_DISABLED=true`` turns the output off, as it does for Powertools itself.

Beside them, ``RequestCounter``: the AWS calls the drivers make (``sqsjobs._aws`` sees it as a
``CallMeter``) and the capacity DynamoDB says each consumed, read by cost tests, benchmarks and the
worker registry.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections import Counter, defaultdict
from typing import TYPE_CHECKING, Any

from sqsjobs.job import AttemptOutcome

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from aws_lambda_powertools.metrics import EphemeralMetrics, MetricUnit

    from sqsjobs.job import Job

#: Namespace when ``POWERTOOLS_METRICS_NAMESPACE`` is unset.
DEFAULT_NAMESPACE = "sqsjobs"
#: CloudWatch EMF takes at most 100 values per metric in one line, and Powertools prints a line by
#: itself when a metric reaches 100 values; a longer series is split into lines of 99.
#: https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/CloudWatch_Embedded_Metric_Format_Specification.html
MAX_VALUES_PER_LINE = 99
#: A series this long is flushed at once, so memory stays bounded between timed flushes.
MAX_BUFFERED_VALUES = 1_000

ENQUEUED = "JobsEnqueued"
STARTED = "JobsStarted"
SUCCEEDED = "JobsSucceeded"
RETRIED = "JobsRetried"
DEAD = "JobsDead"
CANCELLED = "JobsCancelled"
#: Not started by their deadline (``store/deadlines.py``): counted when the expire write lands.
EXPIRED = "JobsExpired"
RUN_TIME = "JobRunTime"
QUEUE_WAIT = "JobQueueWait"
OLDEST_WAIT = "OldestJobWait"
CLAIMS_REFUSED = "ClaimsRefused"
HEARTBEAT = "WorkerHeartbeat"

#: The ``outcome`` field of a transition's log line → the count it adds to.
OUTCOME_COUNTS: dict[str, str] = {
    AttemptOutcome.STARTED: STARTED,
    AttemptOutcome.SUCCEEDED: SUCCEEDED,
    AttemptOutcome.RETRY: RETRIED,
    AttemptOutcome.DEAD: DEAD,
    AttemptOutcome.CANCELLED: CANCELLED,
}

#: (job type, tenant, the job's declared tags as sorted (name, value) pairs).
_Key = tuple[str, str | None, tuple[tuple[str, str], ...]]


class JobMetrics:
    """Buffers job metrics by (job type, tenant) and writes them as EMF on ``flush``.

    Thread-safe: producers may enqueue from many threads while the worker loop records runs.
    """

    def __init__(
        self,
        service: str,
        *,
        namespace: str | None = None,
        flush_interval_s: float = 60.0,
        write: Callable[[str], None] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        tag_dimensions: frozenset[str] = frozenset(),
    ) -> None:
        """``write`` receives each EMF line (default: stdout, looked up at write time).

        ``tag_dimensions``: the tag names a job's transitions carry as dimensions (``metric_tags``).
        """
        self.service = os.environ.get("POWERTOOLS_SERVICE_NAME") or service
        self.namespace = namespace or os.environ.get("POWERTOOLS_METRICS_NAMESPACE") or DEFAULT_NAMESPACE
        self.flush_interval_s = flush_interval_s
        #: The App makes OpenTelemetry spans (``app.telemetry.tracer``): each transition also tells the job's span.
        self.traced = False
        self._write = write
        self._monotonic = monotonic
        self.tag_dimensions = tag_dimensions
        self._lock = threading.Lock()
        self._counts: dict[_Key, Counter[str]] = {}
        self._timings: dict[_Key, dict[str, list[float]]] = {}
        #: Per job type, the longest wait since due seen since the last flush (``OldestJobWait``).
        self._oldest: dict[str, float] = {}
        self._last_flush = monotonic()
        #: Called at each flush for lines of other dimensions (``sqsjobs.limits``: per limit).
        self._sources: list[Callable[[], list[tuple[dict[str, str], dict[str, float]]]]] = []

    # ── recording ─────────────────────────────────────────────────────────────────────────
    def count(self, name: str, job_type: str, tenant: str | None = None, value: int = 1) -> None:
        """Add to a count."""
        with self._lock:
            self._counts.setdefault((job_type, tenant, ()), Counter())[name] += value
        self._maybe_flush()

    def enqueued(self, job_type: str, tenant: str | None = None) -> None:
        """One new job record (a repeated idempotency key is not counted again)."""
        self.count(ENQUEUED, job_type, tenant)

    def timing(self, name: str, job_type: str, tenant: str | None, seconds: float) -> None:
        """Record one duration (stored in milliseconds)."""
        with self._lock:
            series = self._timings.setdefault((job_type, tenant, ()), {}).setdefault(name, [])
            series.append(round(max(seconds, 0.0) * 1000.0, 3))
            full = len(series) >= MAX_BUFFERED_VALUES
        self._maybe_flush(force=full)

    def waiting(self, job_type: str, seconds: float) -> None:
        """A job of ``job_type`` had waited ``seconds`` since due when a worker met it (kept: the maximum).

        Called for each claim (from its ``wait_s``) and by what sends a due job back to wait (a
        limit, a pause), so a type whose jobs are held shows its oldest wait grow though none starts.
        """
        with self._lock:
            if seconds > self._oldest.get(job_type, -1.0):
                self._oldest[job_type] = max(seconds, 0.0)

    def transition(self, job: Job, fields: Mapping[str, Any]) -> None:
        """Record what one logged transition means, from its ``outcome``, ``wait_s`` and ``duration_s``."""
        outcome = fields.get("outcome")
        name = OUTCOME_COUNTS.get(outcome) if isinstance(outcome, str) else None
        if name is None:
            return
        declared = self.tag_dimensions
        tags = (
            tuple(sorted((k, v) for k, v in job.tags.items() if k in declared))
            if declared and job.tags
            else ()
        )
        with self._lock:
            key = (job.type, job.tenant, tags)
            self._counts.setdefault(key, Counter())[name] += 1
            timings = self._timings.setdefault(key, {})
            if outcome == AttemptOutcome.STARTED and isinstance(fields.get("wait_s"), int | float):
                timings.setdefault(QUEUE_WAIT, []).append(round(max(fields["wait_s"], 0.0) * 1000, 3))
                if fields["wait_s"] > self._oldest.get(job.type, -1.0):
                    self._oldest[job.type] = max(fields["wait_s"], 0.0)
            elif outcome != AttemptOutcome.STARTED and isinstance(fields.get("duration_s"), int | float):
                timings.setdefault(RUN_TIME, []).append(round(max(fields["duration_s"], 0.0) * 1000, 3))
        self._maybe_flush()

    def worker_heartbeat(self) -> None:
        """One ``WorkerHeartbeat`` line now, dimension ``service`` only: the worker's refresh happened.

        Written at once rather than buffered: a buffered count would reach CloudWatch only at the
        next flush, and a gap alarm must see the beat in the minute it happened.
        """
        from aws_lambda_powertools.metrics import EphemeralMetrics, MetricUnit
        from aws_lambda_powertools.metrics.functions import is_metrics_disabled

        if is_metrics_disabled():
            return
        metrics = EphemeralMetrics(namespace=self.namespace, service=self.service)
        metrics.add_dimension(name="service", value=self.service)
        doc = metrics.serialize_metric_set(metrics={HEARTBEAT: _series(MetricUnit.Count, [1.0])})
        (self._write or _stdout)(json.dumps(doc, separators=(",", ":")))

    def add_source(self, source: Callable[[], list[tuple[dict[str, str], dict[str, float]]]]) -> None:
        """``source()`` gives (dimensions, counts) pairs at every flush, each written as one EMF line."""
        self._sources.append(source)

    # ── output ────────────────────────────────────────────────────────────────────────────
    def _maybe_flush(self, force: bool = False) -> None:
        if force or self._monotonic() - self._last_flush >= self.flush_interval_s:
            self.flush()

    def lines(self) -> list[dict[str, Any]]:
        """Take everything buffered and return it as EMF documents (one or more per dimension set)."""
        # Powertools is imported on the first flush, not with sqsjobs: its package imports botocore,
        # which ``import sqsjobs`` leaves out until a client is made (docs/deploy.md, cold starts).
        from aws_lambda_powertools.metrics import EphemeralMetrics, MetricUnit

        with self._lock:
            counts, self._counts = self._counts, {}
            timings, self._timings = self._timings, {}
            oldest, self._oldest = self._oldest, {}
            self._last_flush = self._monotonic()
        out: list[dict[str, Any]] = []
        keys = set(counts) | set(timings) | {(job_type, None, ()) for job_type in oldest}
        for key in sorted(keys, key=lambda k: (k[0], k[1] or "", k[2])):
            series = timings.get(key, {})
            chunks = max(
                [1, *((len(v) + MAX_VALUES_PER_LINE - 1) // MAX_VALUES_PER_LINE for v in series.values())]
            )
            for i in range(chunks):
                metric_set: dict[str, dict[str, Any]] = {}
                if i == 0:
                    for name, total in sorted(counts.get(key, Counter()).items()):
                        metric_set[name] = _series(MetricUnit.Count, [float(total)])
                    if key[1] is None and not key[2] and key[0] in oldest:
                        metric_set[OLDEST_WAIT] = _series(MetricUnit.Seconds, [round(oldest[key[0]], 3)])
                for name, values in sorted(series.items()):
                    part = values[i * MAX_VALUES_PER_LINE : (i + 1) * MAX_VALUES_PER_LINE]
                    if part:
                        metric_set[name] = _series(MetricUnit.Milliseconds, part)
                if metric_set:
                    out.append(dict(self._blob(key).serialize_metric_set(metrics=metric_set)))
        for source in self._sources:
            for dimensions, numbers in source():
                blob = EphemeralMetrics(namespace=self.namespace, service=self.service)
                blob.add_dimensions(service=self.service, **dimensions)
                line = {name: _series(MetricUnit.Count, [v]) for name, v in sorted(numbers.items())}
                out.append(dict(blob.serialize_metric_set(metrics=line)))
        return out

    def flush(self) -> int:
        """Write every buffered metric as EMF; returns the number of lines written."""
        from aws_lambda_powertools.metrics.functions import is_metrics_disabled

        documents = self.lines()
        if not documents or is_metrics_disabled():
            return 0
        write = self._write or _stdout
        for doc in documents:
            write(json.dumps(doc, separators=(",", ":")))
        return len(documents)

    def _blob(self, key: _Key) -> EphemeralMetrics:
        # EphemeralMetrics keeps its own metric set (Metrics shares one per process), so each
        # (job type, tenant) gets its own EMF line with its own dimensions.
        from aws_lambda_powertools.metrics import EphemeralMetrics

        job_type, tenant, tags = key
        metrics = EphemeralMetrics(namespace=self.namespace, service=self.service)
        metrics.add_dimension(name="service", value=self.service)
        metrics.add_dimension(name="job_type", value=job_type)
        if tenant:
            metrics.add_dimensions(service=self.service, job_type=job_type, tenant=tenant)
        if tags:  # a set of its own: the type's figures by declared tag (and tenant, if any)
            named = {f"tag_{name}": value for name, value in tags}
            metrics.add_dimensions(service=self.service, job_type=job_type, **named)
        return metrics


def _series(unit: MetricUnit, values: list[float]) -> dict[str, Any]:
    """A whole series as one entry of a Powertools metric set: what ``add_metric`` builds value by value.

    Handed to ``serialize_metric_set(metrics=...)``, which takes a metric set as a parameter, so
    Powertools still writes (and checks) the EMF document. ``add_metric`` itself is not used for
    series: it formats the series so far into a debug message on every value, logged or not, which
    made a flush quadratic in the series' length (7.5 µs per value at 99 values a line).
    """
    return {"Unit": unit.value, "StorageResolution": 60, "Value": values}


def on_transition(
    metrics: JobMetrics, job: Job, fields: Mapping[str, Any], exception: BaseException | None = None
) -> None:
    """Everything a logged transition feeds besides the log line: metrics and, when traced, the job's span.

    ``exception``: what ended a failed attempt, recorded on the span (never logged: the line has its class).
    """
    metrics.transition(job, fields)
    if not metrics.traced:  # no SDK: nothing here calls into OpenTelemetry
        return
    outcome = fields.get("outcome")
    if isinstance(outcome, str):
        from sqsjobs.observability.spans import note

        note(
            outcome=str(outcome),
            error=str(fields.get("reason") or fields.get("error") or ""),
            error_type=str(fields.get("error") or ""),
            job=job,
            exception=exception,
        )


def _stdout(line: str) -> None:
    # Looked up on every write: Lambda runtimes and test harnesses replace sys.stdout after import.
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


#: DynamoDB operations that report consumed capacity, and which of them read.
#: https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_ConsumedCapacity.html
CAPACITY_OPERATIONS = frozenset(
    {
        "PutItem",
        "UpdateItem",
        "DeleteItem",
        "GetItem",
        "Query",
        "Scan",
        "BatchGetItem",
        "BatchWriteItem",
        "TransactWriteItems",
        "TransactGetItems",
        "ExecuteStatement",
        "BatchExecuteStatement",
    }
)
READ_OPERATIONS = frozenset({"GetItem", "Query", "Scan", "BatchGetItem", "TransactGetItems"})


def consumed_units(consumed: Any) -> list[tuple[str, float]]:
    """``("table", units)`` and ``("index:<name>", units)`` of a ``ConsumedCapacity`` answer (a list for batch calls).

    ``INDEXES`` asks for the table's share apart; an answer with the total only (MiniStack's
    ``BatchExecuteStatement``) is the table's, less any index it names.
    """
    parts: list[tuple[str, float]] = []
    for entry in consumed if isinstance(consumed, list) else [consumed]:
        indexes = [
            (f"index:{name}", float(used.get("CapacityUnits", 0)))
            for group in ("GlobalSecondaryIndexes", "LocalSecondaryIndexes")
            for name, used in entry.get(group, {}).items()
        ]
        table = entry.get("Table", {}).get("CapacityUnits")
        total = float(entry.get("CapacityUnits", 0))
        parts += [
            ("table", float(table) if table is not None else total - sum(u for _, u in indexes)),
            *indexes,
        ]
    return parts


class RequestCounter:
    """Counts API calls by (service, operation), as the drivers hand them to the SDK.

    ``run_sync``/``run_async`` count each call they make (``add``), not a botocore event hook: a
    handler on ``before-call.*.*`` ran inside every request, on top of the SDK's own dozen, for
    what the driver knows anyway. The count is the same: one per API call, whatever botocore
    retries inside it.

    With ``Settings.measure_capacity`` it also adds up the capacity DynamoDB says each call consumed:
    ``capacity[("write", "table")]``, ``capacity[("write", "index:attention")]``, ``("read", ...)``.
    """

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str]] = Counter()
        self.capacity: dict[tuple[str, str], float] = defaultdict(float)
        self._lock = threading.Lock()

    def add(self, service: str, operation: str) -> None:
        """Record one call of ``operation`` (its API name, e.g. ``UpdateItem``) on ``service``."""
        with self._lock:
            self.counts[(service, operation)] += 1

    def ask_capacity(self, params: dict[str, Any], model: Any, **kwargs: Any) -> None:
        """``before-parameter-build.dynamodb``: request ``ReturnConsumedCapacity=INDEXES``."""
        if model.name in CAPACITY_OPERATIONS:
            params.setdefault("ReturnConsumedCapacity", "INDEXES")

    def add_capacity(self, parsed: Mapping[str, Any], model: Any, **kwargs: Any) -> None:
        """``after-call.dynamodb``: add what the answer says it consumed (a list for batch calls)."""
        consumed = parsed.get("ConsumedCapacity")
        if not consumed:
            return
        kind = "read" if model.name in READ_OPERATIONS else "write"
        with self._lock:
            for part, units in consumed_units(consumed):
                self.capacity[(kind, part)] += units

    def units(self, kind: str = "write", part: str | None = None) -> float:
        """Capacity units consumed of ``kind`` (``write``/``read``) by ``part`` (``table``, ``index:<name>``, None: all)."""
        return sum(v for (k, p), v in self.capacity.items() if k == kind and (part is None or p == part))

    def watch(self, client: Any) -> None:
        """Hook the capacity meter into a DynamoDB client's events (``Settings.measure_capacity``)."""
        client.meta.events.register("before-parameter-build.dynamodb.*", self.ask_capacity)
        client.meta.events.register("after-call.dynamodb.*", self.add_capacity)

    def total(self, service: str | None = None) -> int:
        """Calls made, optionally for one service."""
        return sum(n for (s, _), n in self.counts.items() if service is None or s == service)

    def snapshot(self) -> dict[str, int]:
        """``{"dynamodb.UpdateItem": n, ...}``."""
        return {f"{s}.{o}": n for (s, o), n in sorted(self.counts.items())}

    def reset(self) -> None:
        """Forget all counts."""
        with self._lock:
            self.counts.clear()
            self.capacity.clear()
