"""The relay's metrics, as CloudWatch EMF lines like the worker's (``sqsjobs.observability.metrics``).

Per service (the App's name), written at most once per ``interval_s`` and when the relay stops::

    OutboxLag         age of the oldest outbox row at each pass of the interval   (Milliseconds)
    OutboxRowsMoved   rows enqueued and deleted in the interval                   (Count)
    OutboxRowsDead    rows set aside in the interval: refused for good (dead.py)  (Count)

``OutboxLag`` keeps every pass's value, so CloudWatch gives its maximum and percentiles; infra/
alarms on its maximum (a relay that stopped, or one that falls behind). An idle pass records 0.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import TYPE_CHECKING

from sqsjobs.observability.metrics import DEFAULT_NAMESPACE, MAX_VALUES_PER_LINE

if TYPE_CHECKING:
    from collections.abc import Callable

LAG = "OutboxLag"
MOVED = "OutboxRowsMoved"
DEAD = "OutboxRowsDead"


class LagMetrics:
    """Buffers the relay's lag samples and moved rows; ``flush`` writes them as EMF lines."""

    def __init__(
        self,
        service: str,
        *,
        namespace: str = DEFAULT_NAMESPACE,
        interval_s: float = 60.0,
        write: Callable[[str], None] | None = None,
    ) -> None:
        """``write`` receives each line (default: stdout, looked up at write time)."""
        self.service = service
        self.namespace = namespace
        self.interval_s = interval_s
        self._write = write
        self._lock = threading.Lock()
        self._lags: list[float] = []
        self._moved = 0
        self._dead = 0
        self._last = time.monotonic()

    def lag(self, seconds: float) -> None:
        """One pass's lag: the age of the oldest row it found (0 for an empty outbox)."""
        with self._lock:
            self._lags.append(round(max(seconds, 0.0) * 1000.0, 3))
        self._maybe_flush()

    def moved(self, rows: int) -> None:
        """Rows one pass enqueued and deleted."""
        with self._lock:
            self._moved += rows
        self._maybe_flush()

    def dead(self, rows: int) -> None:
        """Rows one pass set aside in the dead table."""
        with self._lock:
            self._dead += rows
        self._maybe_flush()

    def _maybe_flush(self) -> None:
        if time.monotonic() - self._last >= self.interval_s:
            self.flush()

    def flush(self) -> int:
        """Write what is buffered (a line per 99 lag values); returns the number of lines."""
        # Imported at the first flush: ``import sqsjobs`` (and a TAB press) must not pay for Powertools.
        from aws_lambda_powertools.metrics import EphemeralMetrics, MetricUnit
        from aws_lambda_powertools.metrics.functions import is_metrics_disabled

        with self._lock:
            lags, moved, dead = self._lags, self._moved, self._dead
            self._lags, self._moved, self._dead = [], 0, 0
            self._last = time.monotonic()
        if is_metrics_disabled() or not lags:
            return 0
        lines = 0
        for start in range(0, len(lags), MAX_VALUES_PER_LINE):
            metrics = EphemeralMetrics(namespace=self.namespace, service=self.service)
            metrics.add_dimension(name="service", value=self.service)
            chunk = lags[start : start + MAX_VALUES_PER_LINE]
            values = {LAG: {"Unit": MetricUnit.Milliseconds.value, "Value": chunk, "StorageResolution": 60}}
            if start == 0:
                for name, rows in ((MOVED, moved), (DEAD, dead)):
                    values[name] = {
                        "Unit": MetricUnit.Count.value,
                        "Value": [float(rows)],
                        "StorageResolution": 60,
                    }
            doc = metrics.serialize_metric_set(metrics=values)
            (self._write or _stdout)(json.dumps(doc, separators=(",", ":")))
            lines += 1
        return lines


def _stdout(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()
