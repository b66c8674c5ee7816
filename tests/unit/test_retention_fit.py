"""How long one message of a job type may have to live: the bound ``sqsjobs doctor`` checks against the retention."""

from __future__ import annotations

import pytest

from sqsjobs import App, RetryPolicy
from sqsjobs.ops.retention import duration, message_span_s
from sqsjobs.retry import Backoff


def _spec(**options):
    app = App("spans")
    app.job("t", **options)(lambda payload, ctx: None)
    return app.registry.get("t")


def test_runs_and_backoffs_at_their_largest_add_up():
    # 3 runs of 60 s, backoffs 10 s and 20 s (exponential from 10, no jitter counted)
    spec = _spec(max_attempts=3, timeout=60, retry=RetryPolicy(base_s=10))
    assert message_span_s(spec) == 3 * 60 + 10 + 20


def test_a_backoff_beyond_the_visibility_cap_starts_a_new_message():
    # each retry waits a day: held by the record and sent again, so no message lives through two runs
    spec = _spec(
        max_attempts=4,
        timeout=60,
        retry=RetryPolicy(backoff=Backoff.FIXED, base_s=86_400, max_delay_s=86_400),
    )
    assert message_span_s(spec) == 60


def test_max_age_bounds_the_span():
    spec = _spec(max_attempts=50, timeout=600, retry=RetryPolicy(max_age_s=3600))
    assert message_span_s(spec) == 3600 + 600


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(90, "90 s"), (1_209_600, "14 d"), (86_400 + 3 * 3600 + 20 * 60, "1 d 3 h 20 min"), (3600, "1 h")],
)
def test_durations_read_as_an_operator_reads_them(seconds, text):
    assert duration(seconds) == text
