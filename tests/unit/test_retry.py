"""Retry policy: pure decisions, seeded randomness."""

from __future__ import annotations

import random

import pytest

from sqsjobs.retry import Backoff, RetryPolicy, decide


@pytest.mark.parametrize(
    ("backoff", "expected"),
    [(Backoff.EXPONENTIAL, [2, 4, 8, 16]), (Backoff.LINEAR, [2, 4, 6, 8]), (Backoff.FIXED, [2, 2, 2, 2])],
)
def test_delays_grow_as_the_backoff_says(backoff, expected):
    policy = RetryPolicy(backoff=backoff, base_s=2, jitter=False)
    assert [policy.delay_for(a) for a in (1, 2, 3, 4)] == expected


def test_delays_are_capped():
    policy = RetryPolicy(base_s=10, max_delay_s=25, jitter=False)
    assert policy.delay_for(10) == 25


def test_full_jitter_stays_between_zero_and_the_computed_delay():
    policy = RetryPolicy(base_s=4, jitter=True)
    rng = random.Random(7)
    delays = [policy.delay_for(3, rng) for _ in range(500)]
    assert all(0 <= d <= 16 for d in delays)
    assert min(delays) < 2 and max(delays) > 14  # spread over the whole range


def test_the_last_attempt_is_not_retried():
    policy = RetryPolicy(jitter=False)
    assert decide(policy, attempt=2, max_attempts=3, created_at=0, now=1) is not None
    assert decide(policy, attempt=3, max_attempts=3, created_at=0, now=1) is None


def test_a_job_past_its_max_age_is_not_retried():
    policy = RetryPolicy(base_s=10, jitter=False, max_age_s=60)
    assert decide(policy, attempt=1, max_attempts=9, created_at=0, now=40) is not None
    assert decide(policy, attempt=1, max_attempts=9, created_at=0, now=55) is None


def test_a_requested_delay_wins_over_the_policy():
    decision = decide(
        RetryPolicy(jitter=False), attempt=1, max_attempts=3, created_at=0, now=0, requested_delay_s=42
    )
    assert decision is not None and decision.delay_s == 42
