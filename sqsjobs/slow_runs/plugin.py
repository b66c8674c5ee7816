"""The slow-run watch as the kernel sees it: a look at running jobs at each beat, and the sweeper's baseline pass.

**Baselines** (``BaselinePass``, a sweep pass): every ``BASELINE_EVERY_S`` the sweeper takes each
type's p50 and p95 running time over the last day from the charts' source (``ops.series``: on AWS
the ``JobRunTime`` metric the workers already emit, read with GetMetricData, 2 metrics per type;
on an emulator, or without CloudWatch, the capped Scan of the records) and writes them as baseline
items: one PutItem per type per refresh.

**The watch** (``SlowRunWatch``, a ``RunWatch``): at each heartbeat beat the worker looks at its
running jobs; one that has run more than its type's factor x p95 (a baseline of at least
``Settings.slow_min_runs`` runs) is flagged once per run: a warning log line, the ``JobsRunningLong``
metric, and the record's ``running_long`` attribute (written by the run's next lease renewal, so no
write of its own; the change stream makes it the ``JobRunningLong`` event). Baselines are read once
per ``BASELINE_CACHE_S`` per worker, for the types it is running: one BatchGetItem.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqsjobs.errors import AwsError, StoreError
from sqsjobs.job import RunningLong
from sqsjobs.ops import series as series_ops
from sqsjobs.ops.cloudwatch_series import cloudwatch_series_flow
from sqsjobs.runtime.seams import Plugin
from sqsjobs.slow_runs import records
from sqsjobs.store.apply import apply

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from sqsjobs._aws import Flow
    from sqsjobs.job import Job
    from sqsjobs.runtime.kernel import Kernel
    from sqsjobs.slow_runs.namespace import SlowRuns

#: How often the sweeper refreshes the baselines, and how long a worker keeps the ones it read.
BASELINE_EVERY_S = 900.0
BASELINE_CACHE_S = 300.0
#: The metric a flag counts (per type, like the workers' other job metrics).
RUNNING_LONG = "JobsRunningLong"


def slow_runs_plugin(kernel: Kernel, declared: SlowRuns) -> Plugin:
    """The watch and the baseline pass; nothing at all when ``slow_factor`` is 0."""
    if kernel.settings.slow_factor == 0:
        return Plugin("slow_runs", fields=(), types=frozenset())
    return Plugin("slow_runs", watch=SlowRunWatch(kernel, declared), sweep=BaselinePass(kernel))


class SlowRunWatch:
    """Flags each run past its type's factor x p95, once (see the module docstring)."""

    def __init__(self, kernel: Kernel, declared: SlowRuns) -> None:
        self.kernel = kernel
        self.declared = declared
        self._baselines: dict[str, records.Baseline] = {}
        self._read_at: dict[str, float] = {}
        #: (job id, claim token) of the runs flagged, and the flags no renewal has written yet.
        self._flagged: set[tuple[str, str | None]] = set()
        self._unwritten: dict[tuple[str, str | None], RunningLong] = {}

    async def look(self, running: Sequence[Job], now: float) -> None:
        """Flag the runs past their type's bound (reading the baselines this worker lacks or holds too long)."""
        runs = {(j.id, j.claim_token) for j in running}
        self._flagged &= runs  # a run that ended is forgotten, with a flag no renewal wrote
        self._unwritten = {run: flag for run, flag in self._unwritten.items() if run in runs}
        candidates = [
            j for j in running if j.started_at is not None and (j.id, j.claim_token) not in self._flagged
        ]
        stale = [
            t
            for t in {j.type for j in candidates}
            if now - self._read_at.get(t, -BASELINE_CACHE_S) >= BASELINE_CACHE_S
        ]
        if stale:
            try:
                self._baselines |= await self.kernel.arun(
                    records.read_baselines(self.kernel.settings.table_name, stale)
                )
            except (StoreError, AwsError):
                self.kernel.logger.warning("slow-run baselines not read", exc_info=True)
            else:
                self._read_at |= dict.fromkeys(stale, now)
        for job in candidates:
            flag = self._flag(job, now)
            if flag is not None:
                self._raise(job, flag)

    def _flag(self, job: Job, now: float) -> RunningLong | None:
        baseline = self._baselines.get(job.type)
        factor = self.declared.factor(job.type, self.kernel.settings.slow_factor)
        if baseline is None or factor == 0 or baseline.runs < self.kernel.settings.slow_min_runs:
            return None
        assert job.started_at is not None
        elapsed = now - job.started_at.timestamp()
        if baseline.p95_s <= 0 or elapsed <= factor * baseline.p95_s:
            return None
        return RunningLong(at=now, elapsed_s=round(elapsed, 3), p95_s=baseline.p95_s, factor=factor)

    def _raise(self, job: Job, flag: RunningLong) -> None:
        run = (job.id, job.claim_token)
        self._flagged.add(run)
        self._unwritten[run] = flag
        self.kernel.logger.warning(
            "job running long",
            extra={
                "job_id": job.id,
                "job_type": job.type,
                "elapsed_s": flag.elapsed_s,
                "p95_s": flag.p95_s,
                "factor": flag.factor,
            },
        )
        self.kernel.metrics.count(RUNNING_LONG, job.type, job.tenant)

    def notes(self, job: Job) -> Mapping[str, Any]:
        """The run's flag, until a renewal wrote it."""
        flag = self._unwritten.get((job.id, job.claim_token))
        return {records.FLAG: flag.to_json()} if flag is not None else {}

    def written(self, job: Job) -> None:
        """The run's flag is on its record; the run stays flagged (never twice)."""
        self._unwritten.pop((job.id, job.claim_token), None)


class BaselinePass:
    """The sweeper's pass: each type's baseline, refreshed every ``BASELINE_EVERY_S``."""

    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel
        self._next_at = 0.0

    async def sweep(self, now: float) -> list[str]:
        """Refresh the baselines when due; returns the types refreshed."""
        if now < self._next_at:
            return []
        self._next_at = now + BASELINE_EVERY_S
        try:
            return await self.kernel.arun(self.refresh_flow(now))
        except (StoreError, AwsError):  # the sweep's other passes go on; the next refresh tries again
            self.kernel.logger.warning("slow-run baselines not refreshed", exc_info=True)
            return []

    def refresh_flow(self, now: float) -> Flow[list[str]]:
        """Take the last day's p50/p95 per type and write them (types without a run in it are left alone)."""
        kernel = self.kernel
        types = sorted(spec.name for spec in kernel.registry)
        series: series_ops.Series | None = None
        if series_ops.series_source(kernel.settings) == "cloudwatch":
            try:
                series = yield from cloudwatch_series_flow(
                    now,
                    window="1d",
                    job_types=types,
                    queues=[],
                    namespace=kernel.metrics.namespace,
                    service=kernel.metrics.service,
                )
            except AwsError as exc:  # a role without GetMetricData reads the records, as the charts do
                if kernel.settings.charts_source == "cloudwatch" or exc.code not in series_ops.ACCESS_DENIED:
                    raise
        if series is None:
            series = yield from series_ops.records_series_flow(kernel.settings, now, window="1d")
        written = []
        for job_type in types:
            run = series.latency.get(job_type, {}).get("run", {})
            p50, p95, n = run.get("p50"), run.get("p95"), int(run.get("n") or 0)
            if p50 is None or p95 is None or n == 0:
                continue
            baseline = records.Baseline(job_type, float(p50), float(p95), n, now)
            yield from apply(records.put_baseline(kernel.settings.table_name, baseline))
            written.append(job_type)
        return written
