"""How fast a queue drains, as this API process has seen it: the basis of ``POST /jobs``'s estimate.

Each ``POST /jobs`` of a job due now reads its queue's depth (visible and in flight, one
``GetQueueAttributes``) and records it here with how many messages this process has sent to that
queue so far. Between two samples ``t0`` and ``t1`` of one queue::

    drained = pending(t0) + sent by this process in (t0, t1] - pending(t1)
    rate    = drained / (t1 - t0)                 over the oldest sample still in WINDOW_S

and a job behind ``ahead`` visible messages is estimated to start ``ahead / rate`` from now. What
this cannot see makes the estimate late, never early: another producer's messages look like a
slower drain. No rate yet (one sample, samples under ``MIN_SPAN_S`` apart, or nothing drained
over the window: workers down, or all busy on long jobs) gives no estimate (null), never a guess.
In AWS each API function instance keeps its own samples, so a cold instance answers null at first.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

#: The oldest sample a rate is measured from (s).
WINDOW_S = 300.0
#: The shortest span a rate is measured over (s): depth counts are approximate.
MIN_SPAN_S = 2.0


@dataclass(frozen=True)
class Drain:
    """A queue's drain rate, and what it was measured from."""

    #: Messages per second leaving the queue (received and deleted by workers).
    per_s: float
    #: The span of the samples it was measured over, and how many samples it had.
    span_s: float
    samples: int


class DrainMeter:
    """Depth samples per queue, with the messages this process sent between them (thread-safe)."""

    def __init__(self, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._monotonic = monotonic
        self._samples: dict[str, deque[tuple[float, int, int]]] = {}
        self._sent: Counter[str] = Counter()
        self._lock = threading.Lock()

    def sent(self, queue: str, n: int = 1) -> None:
        """This process sent ``n`` messages to ``queue``."""
        with self._lock:
            self._sent[queue] += n

    def observe(self, queue: str, pending: int) -> Drain | None:
        """Record ``pending`` (visible + in flight) now; the drain rate measured so far, or None."""
        now = self._monotonic()
        with self._lock:
            samples = self._samples.setdefault(queue, deque())
            samples.append((now, pending, self._sent[queue]))
            while len(samples) > 2 and now - samples[0][0] > WINDOW_S:
                samples.popleft()  # the rate of the last WINDOW_S (two samples at least)
            t0, pending0, sent0 = samples[0]
            span, drained = now - t0, pending0 + (self._sent[queue] - sent0) - pending
            count = len(samples)
        if span < MIN_SPAN_S or drained <= 0:
            return None
        return Drain(drained / span, span, count)
