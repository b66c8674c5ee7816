"""EventBridge Scheduler expressions: ``cron(...)``, ``rate(...)``, ``at(...)``, parsed and evaluated.

Pure and clock-free. sqsjobs validates every expression itself before anything is sent, because
the emulators accept garbage that AWS would refuse (``cron(bogus)``, ``rate(0 fortnights)``) and
then silently never fire it; and it computes fire instants itself (``schedules list``, the local
firing loop of ``sqsjobs dev``, the fallback slot of an unsubstituted fire), because MiniStack
ignores time zones.

The rules are those of EventBridge Scheduler
(https://docs.aws.amazon.com/scheduler/latest/UserGuide/schedule-types.html):

- ``cron(minutes hours day-of-month month day-of-week year)``: six fields; exactly one of
  day-of-month and day-of-week is ``?``. Minutes ``0-59``, hours ``0-23``, day-of-month ``1-31``
  (also ``L``, ``LW``, ``<n>W``), month ``1-12`` or ``JAN-DEC``, day-of-week ``1-7`` (1 = Sunday) or
  ``SUN-SAT`` (also ``L``, ``<d>L``, ``<d>#<n>``), year ``1970-2199``; ``,`` lists, ``-`` ranges,
  ``*`` and ``/`` steps in every field. Evaluated in the schedule's time zone. Daylight saving
  time: a local time that does not exist (clocks jump forward) is skipped; a local time that
  happens twice (clocks fall back) fires once, at its first occurrence.
- ``rate(<n> minute|minutes|hour|hours|day|days)``: a positive whole number; the unit is singular
  for 1 and plural otherwise. A fixed duration (a day is 24 h whatever the clocks do), counted
  from the schedule's start.
- ``at(yyyy-mm-ddThh:mm:ss)``: one time, in the schedule's time zone.
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from sqsjobs.errors import ExpressionError

if TYPE_CHECKING:
    from collections.abc import Iterator

#: Scheduler's smallest interval; every fire lands on a whole minute.
MIN_PERIOD_S = 60
#: Year range of the cron year field.
MIN_YEAR, MAX_YEAR = 1970, 2199
#: ``ScheduleExpression`` is at most 256 characters (CreateSchedule API reference).
MAX_EXPRESSION_CHARS = 256

_UNIT_S = {"minute": 60, "hour": 3600, "day": 86_400}
_MONTHS = {m.upper(): i for i, m in enumerate(calendar.month_abbr) if m}
_WEEKDAYS = {"SUN": 1, "MON": 2, "TUE": 3, "WED": 4, "THU": 5, "FRI": 6, "SAT": 7}
_AT_FORMAT = "%Y-%m-%dT%H:%M:%S"
#: Wider than any DST shift (2 h at most), so wall-clock searches start early enough.
_DST_MARGIN = timedelta(hours=3)


def timezone(name: str) -> ZoneInfo:
    """The IANA time zone ``name``; ``ExpressionError`` when there is none by that name."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ExpressionError(f"unknown time zone {name!r} (use an IANA name like 'Europe/Berlin')") from None


# ── the three kinds ──────────────────────────────────────────────────────────────────────────
@dataclass(frozen=True)
class Rate:
    """``rate(n unit)``: every ``seconds``, counted from an anchor (the schedule's start)."""

    seconds: int

    def next_after(self, after: float, anchor: float) -> float | None:
        """The first ``anchor + k * seconds`` (k >= 0) strictly after ``after``."""
        if after < anchor:
            return anchor
        return anchor + (int((after - anchor) // self.seconds) + 1) * self.seconds

    def latest_at_or_before(self, when: float, anchor: float) -> float | None:
        """The last ``anchor + k * seconds`` (k >= 0) at or before ``when``."""
        if when < anchor:
            return None
        return anchor + int((when - anchor) // self.seconds) * self.seconds


@dataclass(frozen=True)
class At:
    """``at(...)``: one local wall-clock time."""

    local: datetime

    def instant(self, tz: ZoneInfo) -> float:
        """The epoch time of ``local`` in ``tz`` (a time skipped by DST resolves as zoneinfo's fold=0)."""
        return self.local.replace(tzinfo=tz).timestamp()


@dataclass(frozen=True)
class DaySpec:
    """A day-of-month or day-of-week field: a set of values, ``?``, or one special form."""

    values: frozenset[int] = frozenset()
    #: ``?`` (no constraint; the other day field decides).
    any: bool = False
    #: ``L`` (day-of-month) or ``<d>L`` (day-of-week: the last such weekday of the month).
    last: bool = False
    #: ``<n>W`` / ``LW``: the weekday nearest to day n (or the last weekday) of the month.
    weekday_nearest: int | None = None
    #: ``<d>#<n>``: the n-th weekday d of the month.
    nth: int | None = None


@dataclass(frozen=True)
class Cron:
    """``cron(...)`` parsed into sets of allowed values."""

    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    day_of_month: DaySpec
    months: frozenset[int]
    day_of_week: DaySpec
    years: frozenset[int]

    def matches(self, day: date) -> bool:
        """True when ``day`` is one of the cron's days (hours and minutes aside)."""
        if day.month not in self.months or day.year not in self.years:
            return False
        if self.day_of_month.any:
            return _dow_matches(self.day_of_week, day)
        return _dom_matches(self.day_of_month, day)

    def days_from(self, start: date) -> Iterator[date]:
        """Matching days on or after ``start``, in order."""
        for year in sorted(y for y in self.years if y >= start.year):
            for month in sorted(self.months):
                if (year, month) < (start.year, start.month):
                    continue
                first = start.day if (year, month) == (start.year, start.month) else 1
                for d in range(first, calendar.monthrange(year, month)[1] + 1):
                    day = date(year, month, d)
                    if self.matches(day):
                        yield day

    def next_after(self, after: float, tz: ZoneInfo) -> float | None:
        """The first fire instant strictly after ``after``; None when the cron never fires again."""
        # Local wall-clock order is not UTC order around a DST change: start a little early.
        floor = _local(after, tz) - _DST_MARGIN
        for day in self.days_from(floor.date()):
            for hour in self.hours:
                if datetime(day.year, day.month, day.day, hour, 59) < floor:
                    continue
                for minute in self.minutes:
                    naive = datetime(day.year, day.month, day.day, hour, minute)
                    instant = resolve_local(naive, tz) if naive >= floor else None
                    if instant is not None and instant > after:
                        return instant
        return None

    def latest_at_or_before(self, when: float, tz: ZoneInfo, *, lookback_days: int = 8) -> float | None:
        """The last fire instant at or before ``when``, looking back ``lookback_days``; None if none."""
        ceiling = _local(when, tz) + _DST_MARGIN
        day = ceiling.date()
        for _ in range(lookback_days + 1):
            if self.matches(day):
                for hour in reversed(self.hours):
                    if datetime(day.year, day.month, day.day, hour) > ceiling:
                        continue
                    for minute in reversed(self.minutes):
                        naive = datetime(day.year, day.month, day.day, hour, minute)
                        instant = resolve_local(naive, tz) if naive <= ceiling else None
                        if instant is not None and instant <= when:
                            return instant
            if day == date.min:
                break
            day -= timedelta(days=1)
        return None


Expression = Cron | Rate | At


def _local(instant: float, tz: ZoneInfo) -> datetime:
    return datetime.fromtimestamp(instant, tz).replace(tzinfo=None)


def resolve_local(naive: datetime, tz: ZoneInfo) -> float | None:
    """Epoch time of a local wall-clock time: None if DST skips it, the first one if it happens twice."""
    instant = naive.replace(tzinfo=tz, fold=0).timestamp()
    if datetime.fromtimestamp(instant, tz).replace(tzinfo=None) != naive:
        return None  # in the gap of a spring-forward change
    return instant


# ── parsing ──────────────────────────────────────────────────────────────────────────────────
_KIND = re.compile(r"^(cron|rate|at)\((.*)\)$", re.DOTALL)
_RATE = re.compile(r"^([0-9]+) +([a-z]+)$")


def kind_of(expression: str) -> str:
    """``cron``, ``rate`` or ``at``; ``ExpressionError`` for anything else."""
    match = _KIND.match(expression.strip())
    if not match:
        raise ExpressionError(f"{expression!r} is not cron(...), rate(...) or at(...)")
    return match.group(1)


def parse(expression: str) -> Expression:
    """Parse an AWS schedule expression; ``ExpressionError`` says what AWS would refuse."""
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ExpressionError(f"expression is longer than {MAX_EXPRESSION_CHARS} characters")
    match = _KIND.match(expression)
    if not match:
        raise ExpressionError(f"{expression!r} is not cron(...), rate(...) or at(...)")
    kind, body = match.groups()
    if kind == "rate":
        return _parse_rate(body)
    if kind == "at":
        return _parse_at(body)
    return _parse_cron(body)


def _parse_rate(body: str) -> Rate:
    match = _RATE.match(body)
    if not match:
        raise ExpressionError(f"rate({body}): expected rate(<value> <unit>), e.g. rate(5 minutes)")
    raw, unit = match.groups()
    value = int(raw)
    if value < 1 or raw.startswith("0"):
        raise ExpressionError(f"rate({body}): the value must be a positive whole number")
    singular = unit.removesuffix("s")
    if singular not in _UNIT_S:
        raise ExpressionError(f"rate({body}): the unit must be minute(s), hour(s) or day(s)")
    if value == 1 and unit != singular:
        raise ExpressionError(f"rate({body}): a value of 1 takes the singular unit: rate(1 {singular})")
    if value > 1 and unit == singular:
        raise ExpressionError(
            f"rate({body}): a value above 1 takes the plural unit: rate({value} {singular}s)"
        )
    return Rate(value * _UNIT_S[singular])


def _parse_at(body: str) -> At:
    try:
        local = datetime.strptime(body, _AT_FORMAT)
    except ValueError:
        raise ExpressionError(
            f"at({body}): expected at(yyyy-mm-ddThh:mm:ss) in the schedule's time zone, no offset"
        ) from None
    if len(body) != 19:  # strptime accepts unpadded fields
        raise ExpressionError(f"at({body}): expected at(yyyy-mm-ddThh:mm:ss) with zero-padded fields")
    return At(local)


def _parse_cron(body: str) -> Cron:
    fields = body.split()
    if len(fields) != 6:
        raise ExpressionError(
            f"cron({body}): expected 6 fields (minutes hours day-of-month month day-of-week year), "
            f"got {len(fields)}"
        )
    minute, hour, dom, month, dow, year = fields
    if (dom == "?") == (dow == "?"):
        raise ExpressionError(
            f"cron({body}): exactly one of day-of-month and day-of-week must be '?', "
            "e.g. cron(0 2 * * ? *) or cron(0 2 ? * MON *)"
        )
    return Cron(
        minutes=tuple(sorted(_values(minute, "minutes", 0, 59))),
        hours=tuple(sorted(_values(hour, "hours", 0, 23))),
        day_of_month=_day_of_month(dom),
        months=frozenset(_values(month, "month", 1, 12, _MONTHS)),
        day_of_week=_day_of_week(dow),
        years=frozenset(_values(year, "year", MIN_YEAR, MAX_YEAR)),
    )


def _number(token: str, field: str, lo: int, hi: int, names: dict[str, int] | None = None) -> int:
    if names and token.upper() in names:
        return names[token.upper()]
    if not token.isdigit():
        raise ExpressionError(f"{field}: {token!r} is not a number{' or a name' if names else ''}")
    value = int(token)
    if not lo <= value <= hi:
        raise ExpressionError(f"{field}: {value} is outside {lo}-{hi}")
    return value


def _values(text: str, field: str, lo: int, hi: int, names: dict[str, int] | None = None) -> set[int]:
    """A field of ``,``-separated items, each ``*``, ``a``, ``a-b``, optionally ``/step``."""
    if text == "?":
        raise ExpressionError(f"{field}: '?' is only allowed in day-of-month or day-of-week")
    out: set[int] = set()
    for item in text.split(","):
        base, slash, step_text = item.partition("/")
        if slash:
            step = _number(step_text, field, 1, hi - lo + 1) if step_text else 0
            if step < 1:
                raise ExpressionError(f"{field}: {item!r} needs a positive step after '/'")
        else:
            step = 1
        if base == "*":
            start, end = lo, hi
        elif "-" in base:
            a, _, b = base.partition("-")
            start, end = _number(a, field, lo, hi, names), _number(b, field, lo, hi, names)
            if start > end:
                raise ExpressionError(f"{field}: range {base!r} runs backwards")
        elif base:
            start = _number(base, field, lo, hi, names)
            end = hi if slash else start
        else:
            raise ExpressionError(f"{field}: empty item in {text!r}")
        out.update(range(start, end + 1, step))
    return out


def _day_of_month(text: str) -> DaySpec:
    if text == "?":
        return DaySpec(any=True)
    if text == "L":
        return DaySpec(last=True)
    if text == "LW":
        return DaySpec(last=True, weekday_nearest=0)
    if text.endswith("W"):
        return DaySpec(weekday_nearest=_number(text[:-1], "day-of-month", 1, 31))
    return DaySpec(values=frozenset(_values(text, "day-of-month", 1, 31)))


def _day_of_week(text: str) -> DaySpec:
    field = "day-of-week"
    if text == "?":
        return DaySpec(any=True)
    if text == "L":
        return DaySpec(values=frozenset({7}))  # the last day of the week: Saturday
    if text.endswith("L"):
        return DaySpec(values=frozenset({_number(text[:-1], field, 1, 7, _WEEKDAYS)}), last=True)
    if "#" in text:
        day, _, nth = text.partition("#")
        return DaySpec(
            values=frozenset({_number(day, field, 1, 7, _WEEKDAYS)}), nth=_number(nth, field, 1, 5)
        )
    return DaySpec(values=frozenset(_values(text, field, 1, 7, _WEEKDAYS)))


# ── matching days ────────────────────────────────────────────────────────────────────────────
def aws_weekday(day: date) -> int:
    """AWS day-of-week numbering: 1 = Sunday ... 7 = Saturday."""
    return (day.weekday() + 1) % 7 + 1


def _dom_matches(spec: DaySpec, day: date) -> bool:
    days_in_month = calendar.monthrange(day.year, day.month)[1]
    if spec.weekday_nearest is not None:
        target = days_in_month if spec.weekday_nearest == 0 else spec.weekday_nearest
        if target > days_in_month:
            return False
        return day.day == _nearest_weekday(date(day.year, day.month, target), days_in_month)
    if spec.last:
        return day.day == days_in_month
    return day.day in spec.values


def _nearest_weekday(target: date, days_in_month: int) -> int:
    """``nW``: the Monday-Friday day closest to ``target``, without leaving the month."""
    wd = target.weekday()  # Monday = 0
    if wd == 5:  # Saturday: Friday before, unless that leaves the month
        return target.day - 1 if target.day > 1 else target.day + 2
    if wd == 6:  # Sunday: Monday after, unless that leaves the month
        return target.day + 1 if target.day < days_in_month else target.day - 2
    return target.day


def _dow_matches(spec: DaySpec, day: date) -> bool:
    if aws_weekday(day) not in spec.values:
        return False
    if spec.last:
        return day.day + 7 > calendar.monthrange(day.year, day.month)[1]
    if spec.nth is not None:
        return (day.day - 1) // 7 + 1 == spec.nth
    return True


# ── helpers shared by callers ────────────────────────────────────────────────────────────────
def iso_utc(instant: float) -> str:
    """``2026-12-01T08:00:00Z``: the format Scheduler substitutes for ``<aws.scheduler.scheduled-time>``."""
    return datetime.fromtimestamp(instant, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_instant(text: str) -> float:
    """Epoch seconds of an ISO 8601 time with an offset (``...Z``); ``ValueError`` otherwise."""
    parsed = datetime.fromisoformat(text)
    if parsed.tzinfo is None:
        raise ValueError(f"{text!r} has no UTC offset")
    return parsed.timestamp()
