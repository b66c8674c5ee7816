"""The slow-run watch's items in the jobs table: one baseline per job type, and the flag a run carries.

A baseline item (``baseline#<type>``) holds the type's p50 and p95 running time and how many runs
they were taken over; the sweeper's pass writes it (``plugin.BaselinePass``), every worker reads it
(``plugin.SlowRunWatch``). It has no ``type`` or ``status`` attribute, so listings, stats and the
change stream's events skip it, as they skip the other control items.

The flag is the run's record attribute ``running_long`` (``Job.running_long``: when it was raised,
how long the run had been running, the p95 and the factor it was measured against). It is written by
the run's next lease renewal, only if the record has none yet (``requests.heartbeat``'s notes), so
it costs no write.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqsjobs.store import batched
from sqsjobs.store.codec import RUNNING_LONG, av_n, av_s, num_attr, str_attr
from sqsjobs.store.schema import TTL_ATTRIBUTE
from sqsjobs.store.write import Put

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from sqsjobs._aws import Flow

PREFIX = "baseline#"
#: The record attribute a flagged run carries (``Job.running_long``).
FLAG = RUNNING_LONG
#: A baseline item outlives its refresh by this much before TTL may delete it (a type no longer run).
BASELINE_TTL_S = 7 * 86_400


@dataclass(frozen=True)
class Baseline:
    """A job type's usual running time, over the runs that ended in the baseline's window."""

    job_type: str
    p50_s: float
    p95_s: float
    runs: int
    computed_at: float


def baseline_id(job_type: str) -> str:
    """The baseline item of ``job_type``."""
    return PREFIX + job_type


def put_baseline(table: str, baseline: Baseline) -> Put:
    """PutItem of a type's baseline (unconditional: the newest computation wins)."""
    return Put(
        table,
        {
            "id": av_s(baseline_id(baseline.job_type)),
            "job_type": av_s(baseline.job_type),
            "p50_s": av_n(baseline.p50_s),
            "p95_s": av_n(baseline.p95_s),
            "runs": av_n(baseline.runs),
            "computed_at": av_n(baseline.computed_at),
            TTL_ATTRIBUTE: av_n(int(baseline.computed_at + BASELINE_TTL_S)),
        },
    )


def baseline_of(item: Mapping[str, Any]) -> Baseline:
    """A baseline item, decoded."""
    return Baseline(
        job_type=str_attr(item, "job_type") or str(item["id"]["S"]).removeprefix(PREFIX),
        p50_s=num_attr(item, "p50_s") or 0.0,
        p95_s=num_attr(item, "p95_s") or 0.0,
        runs=int(num_attr(item, "runs") or 0),
        computed_at=num_attr(item, "computed_at") or 0.0,
    )


def read_baselines(table: str, job_types: Sequence[str]) -> Flow[dict[str, Baseline]]:
    """The baselines of ``job_types`` that exist, by type (eventually consistent, 100 to a request)."""
    keys = [{"id": av_s(baseline_id(t))} for t in dict.fromkeys(job_types)]
    items = yield from batched.get_items(table, keys)
    return {b.job_type: b for b in map(baseline_of, items)}
