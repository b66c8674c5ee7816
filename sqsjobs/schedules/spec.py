"""Schedule declarations: ``app.schedule(...)`` records a ScheduleSpec, validated on the spot.

(``app.schedules``, the namespace, adds the verbs of schedules made at runtime: ``namespace.py``.)

Recurring and one-time jobs are declared in code next to their handlers; ``sqsjobs schedules
plan/apply`` (``sqsjobs.schedules.sync``) makes EventBridge Scheduler match them, and ``sqsjobs dev``
fires them locally (``sqsjobs.schedules.local``). A declaration that AWS would refuse raises
``ConfigurationError`` naming the schedule when the module declaring it is imported, long before
anything is sent.

Which job a schedule names, and whether its payload fits the handler, is checked when the
declarations are used (plan, apply, dev): handlers may be registered after the schedule. A
schedule without ``payload=`` sends the empty payload its handler accepts (``empty_payload``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqsjobs.errors import ConfigurationError, ExpressionError, PayloadInvalid
from sqsjobs.schedules import expressions

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping
    from zoneinfo import ZoneInfo

    from sqsjobs.registry import HandlerSpec

#: Schedule and group names: 1-64 of ``[0-9a-zA-Z-_.]`` (CreateSchedule API reference).
NAME_PATTERN = re.compile(r"^[0-9a-zA-Z_.-]{1,64}$")
#: ``FlexibleTimeWindow.MaximumWindowInMinutes`` range.
MIN_FLEXIBLE_WINDOW_MIN, MAX_FLEXIBLE_WINDOW_MIN = 1, 1440
#: What a fire does while the job of the schedule's previous fire has not ended (queued, running,
#: waiting to retry): make its job anyway; make none (counted ``skipped``); let one wait until the
#: previous ended (later ones skipped); cancel the previous (its cancel path), then make its own.
ALLOW_ALL, SKIP, BUFFER_ONE, CANCEL_PREVIOUS = "allow_all", "skip", "buffer_one", "cancel_previous"
OVERLAPS = (ALLOW_ALL, SKIP, BUFFER_ONE, CANCEL_PREVIOUS)
#: A fire older than its schedule's catch-up window when it is handled (an outage of the workers,
#: Scheduler retrying) or missed while paused is not made (counted ``missed``). None, the default: no
#: window, every fire delivered is made (as before windows existed; Scheduler retries one for a day).
DEFAULT_CATCHUP_S: float | None = None
#: Temporal's smallest catch-up window: a fire is never older than a few seconds when handled.
MIN_CATCHUP_S = 10.0


def check_policy(name: str, overlap: str, catchup_window: timedelta | float | None) -> float | None:
    """The catch-up window in seconds; ``ExpressionError`` for an unknown overlap or a too short window."""
    if overlap not in OVERLAPS:
        raise ExpressionError(
            f"schedule {name!r}: overlap must be one of {', '.join(OVERLAPS)}, got {overlap!r}"
        )
    if catchup_window is None:
        return None
    seconds = (
        catchup_window.total_seconds() if isinstance(catchup_window, timedelta) else float(catchup_window)
    )
    if not seconds >= MIN_CATCHUP_S:
        raise ExpressionError(
            f"schedule {name!r}: catchup_window must be at least {MIN_CATCHUP_S:g} s, got {seconds:g}"
        )
    return seconds


@dataclass(frozen=True)
class ScheduleSpec:
    """One declared schedule: when it fires and which job each fire enqueues."""

    #: Unique in the app; the Scheduler schedule's name and half of each fire's idempotency key.
    name: str
    #: ``cron(...)``, ``rate(...)`` or ``at(...)``, exactly as sent to Scheduler.
    expression: str
    #: The registered job type each fire enqueues.
    job: str
    #: ``expression`` parsed.
    parsed: expressions.Expression = field(compare=False, repr=False)
    #: JSON-serialisable payload of every job this schedule enqueues; None: the empty payload
    #: the handler accepts (``empty_payload``).
    payload: Any = None
    #: IANA time zone that cron and at() are evaluated in.
    timezone: str = "UTC"
    #: Scheduler may delay each fire by up to this many minutes to spread load; None means on time.
    flexible_window_minutes: int | None = None
    #: What a fire does while the previous fire's job has not ended (``OVERLAPS``).
    overlap: str = ALLOW_ALL
    #: Fires older than this (seconds) when handled, or missed while paused, are not made (None: no window).
    catchup_s: float | None = DEFAULT_CATCHUP_S

    @property
    def kind(self) -> str:
        """``cron``, ``rate`` or ``at``."""
        return self.expression.partition("(")[0]

    @property
    def tz(self) -> ZoneInfo:
        """The time zone object."""
        return expressions.timezone(self.timezone)

    def next_fire(self, after: float, *, anchor: float) -> float | None:
        """The first fire strictly after ``after``; ``anchor`` is where a rate starts counting."""
        p = self.parsed
        if isinstance(p, expressions.Rate):
            return p.next_after(after, anchor)
        if isinstance(p, expressions.At):
            instant = p.instant(self.tz)
            return instant if instant > after else None
        return p.next_after(after, self.tz)

    def slot_at_or_before(self, when: float, *, anchor: float = 0.0) -> float | None:
        """The occurrence a fire sent at ``when`` belongs to: the last one at or before it."""
        p = self.parsed
        if isinstance(p, expressions.Rate):
            return p.latest_at_or_before(when, anchor)
        if isinstance(p, expressions.At):
            return p.instant(self.tz)
        return p.latest_at_or_before(when, self.tz)


class Declarations:
    """The app's schedule declarations, by name (``app.schedule`` is ``app.schedules.add``)."""

    def __init__(self) -> None:
        self._specs: dict[str, ScheduleSpec] = {}

    def add(
        self,
        name: str,
        *,
        job: str,
        cron: str | None = None,
        rate: str | None = None,
        at: str | datetime | None = None,
        timezone: str = "UTC",
        payload: Any = None,
        flexible_window_minutes: int | None = None,
        overlap: str = ALLOW_ALL,
        catchup_window: timedelta | float | None = DEFAULT_CATCHUP_S,
    ) -> ScheduleSpec:
        """Declare a schedule that enqueues ``job`` with ``payload`` at each fire.

        Give exactly one of ``cron`` (``"cron(0 2 * * ? *)"``), ``rate`` (``"rate(10 minutes)"``)
        or ``at`` (``"2026-12-01T09:00:00"`` or a datetime: one time). The wrapper may be left out
        (``cron="0 2 * * ? *"``). ``timezone`` applies to cron and at. Every fire becomes one job
        whose idempotency key is (schedule, scheduled time), so repeated deliveries of a fire never
        make a second job. ``overlap`` says what a fire does while the previous fire's job has not
        ended (``allow_all``, ``skip``, ``buffer_one``, ``cancel_previous``); a fire handled more than
        ``catchup_window`` after its time (workers down) is not made (docs/schedules.md).

        Raises:
            ConfigurationError: the name, expression, time zone or window would be refused by AWS,
                or the name is already declared.
        """
        if name in self._specs:
            raise ConfigurationError(f"schedule {name!r} is declared twice")
        spec = build_spec(
            name,
            job=job,
            when={"cron": cron, "rate": rate, "at": at},
            timezone=timezone,
            payload=payload,
            flexible_window_minutes=flexible_window_minutes,
            overlap=overlap,
            catchup_window=catchup_window,
        )
        self._specs[name] = spec
        return spec

    def get(self, name: str) -> ScheduleSpec | None:
        """The declaration named ``name``, if any."""
        return self._specs.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def __iter__(self) -> Iterator[ScheduleSpec]:
        return iter(self._specs.values())

    def __len__(self) -> int:
        return len(self._specs)


def build_spec(
    name: str,
    *,
    job: str,
    when: Mapping[str, str | datetime | None],
    timezone: str = "UTC",
    payload: Any = None,
    flexible_window_minutes: int | None = None,
    overlap: str = ALLOW_ALL,
    catchup_window: timedelta | float | None = DEFAULT_CATCHUP_S,
) -> ScheduleSpec:
    """A checked ``ScheduleSpec`` (``when``: the ``cron``, ``rate`` and ``at`` given, one not None).

    Raises:
        ConfigurationError: naming the schedule and what AWS (or sqsjobs) would refuse.
    """
    cron, rate, at = when.get("cron"), when.get("rate"), when.get("at")
    if not NAME_PATTERN.match(name):
        raise ConfigurationError(
            f"schedule name {name!r} must be 1-64 characters of letters, digits, '-', '_' or '.'"
        )
    given = [(k, v) for k, v in (("cron", cron), ("rate", rate), ("at", at)) if v is not None]
    if len(given) != 1:
        raise ConfigurationError(
            f"schedule {name!r}: give exactly one of cron=, rate= or at= (got {len(given)})"
        )
    try:
        expression = _expression(*given[0])
        parsed = expressions.parse(expression)
        expressions.timezone(timezone)
        catchup_s = check_policy(name, overlap, catchup_window)
    except ExpressionError as exc:
        raise ConfigurationError(
            str(exc) if str(exc).startswith("schedule ") else f"schedule {name!r}: {exc}"
        ) from None
    if flexible_window_minutes is not None and not (
        MIN_FLEXIBLE_WINDOW_MIN <= flexible_window_minutes <= MAX_FLEXIBLE_WINDOW_MIN
    ):
        raise ConfigurationError(
            f"schedule {name!r}: flexible_window_minutes must be "
            f"{MIN_FLEXIBLE_WINDOW_MIN}..{MAX_FLEXIBLE_WINDOW_MIN}, got {flexible_window_minutes}"
        )
    if not job:
        raise ConfigurationError(f"schedule {name!r}: job= must name a registered job type")
    return ScheduleSpec(
        name=name,
        expression=expression,
        job=job,
        payload=payload,
        timezone=timezone,
        flexible_window_minutes=flexible_window_minutes,
        parsed=parsed,
        overlap=overlap,
        catchup_s=catchup_s,
    )


def empty_payload(handler: HandlerSpec) -> Any:
    """What a schedule without ``payload=`` sends: the first of ``None`` and ``{}`` the handler validates.

    The handler's own validation decides, so ``{}`` serves a dict or a model whose fields all have
    defaults (stored with those defaults), and ``None``, tried first, keeps what Optional, Any and
    unannotated handlers always got, so schedules applied before show no change in a plan.

    Raises:
        PayloadInvalid: no empty payload validates (a model with required fields), naming the job
            type and what it expects; the caller adds the schedule's name.
    """
    error: PayloadInvalid | None = None
    candidates: tuple[Any, ...] = (None, {})
    for candidate in candidates:
        try:
            return handler.dump(candidate)
        except PayloadInvalid as exc:
            error = exc
    expected = handler.payload_type
    shown = expected.__qualname__ if isinstance(expected, type) else repr(expected)
    raise PayloadInvalid(
        f"no payload given, and job type {handler.name!r} expects {shown}, "
        f"which an empty payload does not fit ({error}); pass payload= to app.schedule"
    )


def _expression(kind: str, value: str | datetime) -> str:
    """The AWS expression for a declaration, wrapping a bare value (``0 2 * * ? *`` → ``cron(...)``)."""
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            raise ExpressionError(
                "at= takes a naive datetime (wall-clock time in the schedule's timezone=), "
                f"got {value.isoformat()}"
            )
        value = value.strftime("%Y-%m-%dT%H:%M:%S")
    text = value.strip()
    return text if text.startswith(f"{kind}(") else f"{kind}({text})"
