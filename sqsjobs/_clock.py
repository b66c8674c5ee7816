"""Time, injectable: lease and backoff logic read a Clock so tests can move it."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """Wall-clock seconds since the epoch (what DynamoDB stores and compares)."""

    def now(self) -> float:
        """Return the current time in epoch seconds."""
        ...


class SystemClock:
    """The real clock: ``now`` is ``time.time`` itself, so reading it costs no Python frame per job."""

    now = staticmethod(time.time)


class FakeClock:
    """A clock that moves only when told; for tests."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self._now = start

    def now(self) -> float:
        """Return the fake time."""
        return self._now

    def advance(self, seconds: float) -> None:
        """Move time forward."""
        self._now += seconds
