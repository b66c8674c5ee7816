"""The frameworks under test: how to start each one's worker and producer, and which queue it uses.

Each peer gets its documented best configuration for short jobs on SQS (see the module docstrings
in ``bench/apps/``); sqsjobs runs with its defaults. Celery and Dramatiq run from the bench
virtualenv (``bench/.venv-bench``, made by ``make bench-venv``), sqsjobs from the project's.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MAIN_VENV = Path(os.environ.get("BENCH_MAIN_VENV", REPO / ".venv"))
PEER_VENV = Path(os.environ.get("BENCH_PEER_VENV", REPO / "bench" / ".venv-bench"))

SQSJOBS_APP = "bench-sqsjobs"


@dataclass(frozen=True)
class Framework:
    """One configuration in the comparison."""

    #: Row label, e.g. ``sqsjobs c32``.
    label: str
    #: ``sqsjobs``, ``celery`` or ``dramatiq`` (selects the producer and the app module).
    kind: str
    #: Jobs one worker process runs at once.
    concurrency: int

    @property
    def is_peer(self) -> bool:
        """Peers are what sqsjobs is compared against."""
        return self.kind != "sqsjobs"

    @property
    def venv(self) -> Path:
        """The virtualenv the worker and producer run in."""
        return PEER_VENV if self.is_peer else MAIN_VENV

    @property
    def python(self) -> str:
        """The interpreter of that virtualenv."""
        return str(self.venv / "bin" / "python")

    def queue_name(self, tag: str) -> str:
        """The SQS queue of the run ``tag``.

        Each run gets fresh queues: a stopped worker's long poll can outlive it (at the proxy and
        the emulator) and would take up to ten messages of the next run out of sight for the
        visibility timeout.
        """
        if self.kind == "sqsjobs":
            return f"{SQSJOBS_APP}-{tag}-default"  # <queue prefix>-<logical queue>
        if self.kind == "celery":
            return f"bench-celery-{tag}"
        return f"bench-{tag}_default"  # dramatiq_sqs: <namespace>_<queue_name>

    def queue_env(self, tag: str, url: str) -> dict[str, str]:
        """Environment that points the worker and producer at the run's queue."""
        if self.kind == "sqsjobs":
            # Capacity asked of DynamoDB itself, so the proxy reads the write units each answer reports.
            return {
                "SQSJOBS_QUEUE_PREFIX": f"{SQSJOBS_APP}-{tag}",
                "SQSJOBS_TABLE": f"{SQSJOBS_APP}-jobs",
                "SQSJOBS_MEASURE_CAPACITY": "1",
            }
        if self.kind == "celery":
            return {"BENCH_CELERY_QUEUE": self.queue_name(tag), "BENCH_CELERY_QUEUE_URL": url}
        return {"BENCH_DRAMATIQ_NAMESPACE": f"bench-{tag}"}

    def worker_argv(self) -> list[str]:
        """The worker command line."""
        bin_dir = self.venv / "bin"
        if self.kind == "sqsjobs":
            return [
                str(bin_dir / "sqsjobs"),
                "worker",
                "--app",
                "bench.apps.sqsjobs_app:app",
                "--concurrency",
                str(self.concurrency),
            ]
        if self.kind == "celery":
            return [
                str(bin_dir / "celery"),
                "-A",
                "bench.apps.celery_app",
                "worker",
                "--pool",
                "threads",
                "--concurrency",
                str(self.concurrency),
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
                "--loglevel",
                "WARNING",
            ]
        if self.kind == "dramatiq":
            return [
                str(bin_dir / "dramatiq"),
                "bench.apps.dramatiq_app",
                "--processes",
                "1",
                "--threads",
                str(self.concurrency),
            ]
        raise ValueError(self.kind)

    def producer_argv(self) -> list[str]:
        """The producer command line (``bench/producer.py``)."""
        return [self.python, "-m", "bench.producer", self.kind]


ALL = (
    Framework("sqsjobs c8", "sqsjobs", 8),
    Framework("sqsjobs c32", "sqsjobs", 32),
    Framework("celery t32", "celery", 32),
    Framework("dramatiq t8", "dramatiq", 8),
)


def select(names: str) -> list[Framework]:
    """``all``, ``sqsjobs`` (both sqsjobs rows), or a comma list of labels/kinds."""
    if names == "all":
        return list(ALL)
    wanted = {n.strip() for n in names.split(",") if n.strip()}
    chosen = [f for f in ALL if f.label in wanted or f.kind in wanted]
    if not chosen:
        raise SystemExit(f"no framework matches {names!r}; choose from {[f.label for f in ALL]}")
    return chosen
