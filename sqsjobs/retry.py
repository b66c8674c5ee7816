"""Retry policy: when to try again, and when to give up. Pure; takes ``now``."""

from __future__ import annotations

import enum
import random
from dataclasses import dataclass

#: SQS caps the visibility of a received message at 12 h; longer backoffs are held by the record.
#: https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_ChangeMessageVisibility.html
MAX_VISIBILITY_S = 43_200


class Backoff(enum.StrEnum):
    """How the delay grows with the attempt number."""

    EXPONENTIAL = "exponential"
    LINEAR = "linear"
    FIXED = "fixed"


@dataclass(frozen=True)
class RetryPolicy:
    """Backoff with full jitter (AWS Architecture Blog, "Exponential Backoff And Jitter")."""

    backoff: Backoff = Backoff.EXPONENTIAL
    #: First delay (and step, for linear).
    base_s: float = 2.0
    #: Upper bound of any one delay.
    max_delay_s: float = 3_600.0
    #: Full jitter: the delay is uniform in [0, computed]; off gives the computed delay exactly.
    jitter: bool = True
    #: Give up when the job is older than this (seconds since enqueue); None = no limit.
    max_age_s: float | None = None

    def delay_for(self, attempt: int, rng: random.Random | None = None) -> float:
        """Delay before the attempt after ``attempt`` (1-based)."""
        if self.backoff is Backoff.EXPONENTIAL:
            raw = self.base_s * float(2 ** max(attempt - 1, 0))
        elif self.backoff is Backoff.LINEAR:
            raw = self.base_s * attempt
        else:
            raw = self.base_s
        capped: float = min(raw, self.max_delay_s)
        if self.jitter:
            return float((rng or random).uniform(0.0, capped))
        return capped


@dataclass(frozen=True)
class RetryDecision:
    """Run again after ``delay_s``."""

    delay_s: float


def decide(
    policy: RetryPolicy,
    *,
    attempt: int,
    max_attempts: int,
    created_at: float,
    now: float,
    requested_delay_s: float | None = None,
    rng: random.Random | None = None,
) -> RetryDecision | None:
    """Decide whether a failed attempt is retried; None means the job is dead.

    Args:
        policy: the job type's policy.
        attempt: the attempt that just failed (1-based).
        max_attempts: attempts allowed in all.
        created_at: when the job was enqueued (epoch seconds).
        now: current time (epoch seconds).
        requested_delay_s: a delay the handler asked for with ``Retry(delay_s=...)``.
        rng: randomness for jitter (tests pass a seeded one).
    """
    if attempt >= max_attempts:
        return None
    delay = requested_delay_s if requested_delay_s is not None else policy.delay_for(attempt, rng)
    if policy.max_age_s is not None and (now + delay) - created_at > policy.max_age_s:
        return None
    return RetryDecision(delay_s=max(delay, 0.0))
