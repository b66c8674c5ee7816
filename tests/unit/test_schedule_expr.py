"""Schedule expressions: what AWS accepts is accepted, what it refuses is refused with a reason."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from sqsjobs.errors import ExpressionError
from sqsjobs.schedules import expressions as sx


def ts(*args: int) -> float:
    return datetime(*args, tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    "expression",
    [
        "cron(0 2 * * ? *)",
        "cron(0/15 * * * ? *)",
        "cron(*/5 8-17 ? * MON-FRI *)",
        "cron(15 10 ? * 6L 2026-2030)",
        "cron(0 8 1W * ? *)",
        "cron(0 8 LW * ? *)",
        "cron(0 8 L * ? *)",
        "cron(0 9 ? * 2#1 *)",
        "cron(0 18 ? * L *)",
        "cron(0,30 0 1,15 JAN,jul ? 2199)",
        "rate(1 minute)",
        "rate(5 minutes)",
        "rate(1 hour)",
        "rate(12 hours)",
        "rate(1 day)",
        "rate(7 days)",
        "at(2026-12-01T09:00:00)",
    ],
)
def test_valid_expressions_parse(expression):
    assert sx.parse(expression) is not None


@pytest.mark.parametrize(
    ("expression", "reason"),
    [
        ("cron(bogus)", "expected 6 fields"),
        ("cron(0 2 * * *)", "got 5"),
        ("cron(* * * * * *)", "exactly one of day-of-month and day-of-week must be '?'"),
        ("cron(0 2 ? * ? *)", "exactly one of day-of-month and day-of-week must be '?'"),
        ("cron(60 * * * ? *)", "minutes: 60 is outside 0-59"),
        ("cron(0 24 * * ? *)", "hours: 24 is outside 0-23"),
        ("cron(0 0 32 * ? *)", "day-of-month: 32 is outside 1-31"),
        ("cron(0 0 ? 13 MON *)", "month: 13 is outside 1-12"),
        ("cron(0 0 ? * 8 *)", "day-of-week: 8 is outside 1-7"),
        ("cron(0 0 ? * FUNDAY *)", "day-of-week: 'FUNDAY' is not a number or a name"),
        ("cron(0 0 * * ? 1969)", "year: 1969 is outside 1970-2199"),
        ("cron(? 0 * * ? *)", "'?' is only allowed in day-of-month or day-of-week"),
        ("cron(5-1 * * * ? *)", "runs backwards"),
        ("cron(*/0 * * * ? *)", "minutes"),
        ("cron(0 0 ? * 2#6 *)", "6 is outside 1-5"),
        ("rate(0 fortnights)", "positive whole number"),
        ("rate(-1 minutes)", "expected rate(<value> <unit>)"),
        ("rate(1 minutes)", "a value of 1 takes the singular unit: rate(1 minute)"),
        ("rate(5 minute)", "a value above 1 takes the plural unit: rate(5 minutes)"),
        ("rate(2 weeks)", "the unit must be minute(s), hour(s) or day(s)"),
        ("rate(1.5 hours)", "expected rate(<value> <unit>)"),
        ("at(not-a-date)", "expected at(yyyy-mm-ddThh:mm:ss)"),
        ("at(2026-12-01T09:00:00Z)", "expected at(yyyy-mm-ddThh:mm:ss)"),
        ("at(2026-12-01 09:00:00)", "expected at(yyyy-mm-ddThh:mm:ss)"),
        ("at(2026-2-01T09:00:00)", "zero-padded"),
        ("cron(0 2 * * ? *) ", "is not cron(...), rate(...) or at(...)"),
        ("every(5 minutes)", "is not cron(...), rate(...) or at(...)"),
    ],
)
def test_invalid_expressions_say_why(expression, reason):
    with pytest.raises(ExpressionError) as info:
        sx.parse(expression)
    assert reason in str(info.value)


def test_unknown_time_zone_is_refused():
    with pytest.raises(ExpressionError, match="unknown time zone 'Mars/Olympus'"):
        sx.timezone("Mars/Olympus")


def test_cron_follows_dst_in_its_time_zone():
    # GIVEN 02:30 every day in Berlin, where 2026-03-29 02:00 jumps to 03:00 and 2026-10-25 03:00 falls back to 02:00
    cron, berlin = sx.parse("cron(30 2 * * ? *)"), sx.timezone("Europe/Berlin")
    assert isinstance(cron, sx.Cron)
    fires, t = [], ts(2026, 3, 27, 12)
    for _ in range(3):
        t = cron.next_after(t, berlin)
        fires.append(sx.iso_utc(t))
    # THEN the day 02:30 does not exist is skipped, and the offset changes from +1 to +2
    assert fires == ["2026-03-28T01:30:00Z", "2026-03-30T00:30:00Z", "2026-03-31T00:30:00Z"]
    # AND on the fall-back day the repeated 02:30 fires once (the first one, still in summer time)
    t = cron.next_after(ts(2026, 10, 24, 12), berlin)
    assert sx.iso_utc(t) == "2026-10-25T00:30:00Z"
    assert sx.iso_utc(cron.next_after(t, berlin)) == "2026-10-26T01:30:00Z"


def test_cron_steps_and_special_days():
    utc = sx.timezone("UTC")
    after = ts(2026, 10, 25, 23)

    def first(expression: str) -> str:
        parsed = sx.parse(expression)
        assert isinstance(parsed, sx.Cron)
        nxt = parsed.next_after(after, utc)
        assert nxt is not None
        return sx.iso_utc(nxt)

    assert first("cron(0/20 * * * ? *)") == "2026-10-25T23:20:00Z"
    assert first("cron(0 10 ? * 6#3 *)") == "2026-11-20T10:00:00Z"  # third Friday
    assert first("cron(0 10 ? * 2L *)") == "2026-10-26T10:00:00Z"  # last Monday
    assert first("cron(0 10 LW * ? *)") == "2026-10-30T10:00:00Z"  # the 31st is a Saturday
    assert first("cron(0 10 1W * ? *)") == "2026-11-02T10:00:00Z"  # 1 November is a Sunday
    assert first("cron(0 10 L 2 ? *)") == "2027-02-28T10:00:00Z"
    assert sx.parse("cron(0 0 30 2 ? *)").next_after(after, utc) is None  # type: ignore[union-attr]


def test_latest_occurrence_at_or_before():
    cron, berlin = sx.parse("cron(30 2 * * ? *)"), sx.timezone("Europe/Berlin")
    assert isinstance(cron, sx.Cron)
    assert cron.latest_at_or_before(ts(2026, 3, 30, 5), berlin) == ts(2026, 3, 30, 0, 30)
    assert cron.latest_at_or_before(ts(2026, 3, 30, 0, 30), berlin) == ts(2026, 3, 30, 0, 30)
    rate = sx.Rate(600)
    assert rate.latest_at_or_before(1_000_000 + 1_799, anchor=1_000_000) == 1_001_200
    assert rate.latest_at_or_before(999_999, anchor=1_000_000) is None
    assert rate.next_after(999_000, anchor=1_000_000) == 1_000_000
    assert rate.next_after(1_000_000, anchor=1_000_000) == 1_000_600


def test_at_is_wall_clock_time_in_the_zone():
    at = sx.parse("at(2026-12-01T09:00:00)")
    assert isinstance(at, sx.At)
    assert at.instant(sx.timezone("Europe/Berlin")) == ts(2026, 12, 1, 8)
    assert sx.parse_instant("2026-12-01T08:00:00Z") == ts(2026, 12, 1, 8)
    with pytest.raises(ValueError, match="no UTC offset"):
        sx.parse_instant("2026-12-01T08:00:00")
