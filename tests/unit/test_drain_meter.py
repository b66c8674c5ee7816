"""The drain rate behind ``POST /jobs``'s estimate: what it counts, and when it gives none."""

from __future__ import annotations

import pytest

from sqsjobs.api.drain import MIN_SPAN_S, WINDOW_S, DrainMeter


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_no_rate_from_one_sample_a_short_span_or_a_queue_that_did_not_drain():
    clock = Clock()
    meter = DrainMeter(clock)
    assert meter.observe("q", 100) is None  # one sample
    clock.t += MIN_SPAN_S / 2
    assert meter.observe("q", 90) is None  # too short to say
    clock.t += MIN_SPAN_S
    meter.sent("q", 5)
    assert meter.observe("q", 105) is None  # 100 + 5 sent - 105: nothing drained


def test_the_rate_counts_what_this_process_sent_in_between():
    clock = Clock()
    meter = DrainMeter(clock)
    meter.observe("q", 100)
    clock.t += 10
    meter.sent("q", 20)
    drain = meter.observe("q", 90)  # 100 + 20 - 90 = 30 drained in 10 s
    assert drain is not None
    assert drain.per_s == pytest.approx(3.0) and drain.span_s == 10 and drain.samples == 2
    assert meter.observe("other", 5) is None  # per queue


def test_the_rate_is_measured_over_the_window_only():
    clock = Clock()
    meter = DrainMeter(clock)
    meter.observe("q", 1000)  # an old burst, drained long ago
    clock.t += WINDOW_S + 60
    meter.observe("q", 100)
    clock.t += 10
    drain = meter.observe("q", 90)
    assert drain is not None and drain.per_s == pytest.approx(1.0) and drain.span_s == 10
