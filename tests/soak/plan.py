"""The soak's job mix: one run's settings, and every job it enqueues with the end it must reach.

Every random choice derives from the seed, so the same seed gives the same jobs (each with an
idempotency key, hence a known id), kinds, delays and duplicate enqueues.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from sqsjobs.store import codec

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
