"""What ``@app.job`` takes beside the handler: dedup modes, hooks and events, the payload's version, batch handlers.

Plain values, checked when they are made (``DedupeInvalid``, ``ConfigurationError`` at import), that
``sqsjobs.registry`` puts on a type's ``HandlerSpec`` and the runtime reads there; the batch
handler's item and outcome types are what such a handler takes and returns.
"""

from __future__ import annotations

import math
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeAlias, TypeVar

from sqsjobs.config import to_seconds
from sqsjobs.errors import ConfigurationError, DedupeInvalid

if typing.TYPE_CHECKING:
    from datetime import timedelta

    from sqsjobs.context import JobContext

#: The payload type of a handler (its first parameter's annotation).
P = TypeVar("P")
#: One upcast step: a payload of version n (JSON data as stored) → the same payload at version n + 1.
Upcast = Callable[[Any], Any]


# ── dedup modes: ``@app.job(dedupe=...)`` and an enqueue's ``dedupe=`` (``sqsjobs.store.dedupe``) ──
#: The modes a job type or an enqueue may name (``NewJob.dedupe``).
Mode = Literal["window", "throttle", "while_active", "debounce"]


@dataclass(frozen=True, eq=False)
class Dedupe:
    """A dedup mode with its window (seconds; None for ``while_active``): one of the four below."""

    mode: Mode
    window_s: float | None = None
    #: ``debounce``: the longest a key's first enqueue waits for a quiet period.
    max_wait_s: float | None = None

    def _fields(self) -> tuple[str, float | None, float | None]:
        return (self.mode, self.window_s, self.max_wait_s)

    def __eq__(self, other: object) -> bool:
        """The same mode and windows, whichever constructor made it (``Throttle(9)`` is ``Dedupe("throttle", 9)``)."""
        return isinstance(other, Dedupe) and self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())


#: The shortest window, quiet period or ``debounce_max``: a window's slot counts whole milliseconds.
MIN_WINDOW_S = 0.001
#: The longest: ten years, as ``delay`` (a longer one is a mistake, and past it the clock arithmetic
#: of a slot or a deadline overflows, in Python or in DynamoDB's numbers).
MAX_WINDOW_S = 10 * 365 * 86_400.0


def _bounded(name: str, seconds: float | None) -> float | None:
    """``seconds`` if it is within the bounds (``DedupeInvalid`` naming the option if not)."""
    if seconds is not None and not (math.isfinite(seconds) and MIN_WINDOW_S <= seconds <= MAX_WINDOW_S):
        raise DedupeInvalid(
            f"{name} must be between {MIN_WINDOW_S}s and {MAX_WINDOW_S:.0f}s (ten years), not {seconds}s",
            field=name,
        )
    return seconds


#: What a ``dedupe=`` that is not one of the four modes is told (``@app.job`` and an enqueue alike).
DEDUPE_MODES = "give DedupeFor(window), Throttle(window), WhileActive() or Debounce(quiet)"
#: A debounce without ``max`` runs at the latest this many quiet periods after its first enqueue.
DEFAULT_MAX_QUIETS = 10


class DedupeFor(Dedupe):
    """The key names one job within this window (aligned); another payload in it is ``IdempotencyConflict``."""

    def __init__(self, window: timedelta | float) -> None:
        super().__init__("window", _bounded("dedupe_for", to_seconds(window)))


class Throttle(Dedupe):
    """The first enqueue of the key in this window (aligned) wins; later ones, any payload, get its id."""

    def __init__(self, window: timedelta | float) -> None:
        super().__init__("throttle", _bounded("throttle", to_seconds(window)))


class WhileActive(Dedupe):
    """The key names the live job only: once it has finished, the next enqueue makes a new job."""

    def __init__(self) -> None:
        super().__init__("while_active")


class Debounce(Dedupe):
    """The last payload of a quiet period this long wins; ``max`` (default ten quiet periods) bounds the wait."""

    def __init__(self, quiet: timedelta | float, *, max: timedelta | float | None = None) -> None:
        quiet_s = _bounded("debounce", to_seconds(quiet))
        assert quiet_s is not None
        max_s = _bounded("debounce_max", to_seconds(max)) if max is not None else None
        max_wait = max_s if max_s is not None else min(quiet_s * DEFAULT_MAX_QUIETS, MAX_WINDOW_S)
        if max_wait < quiet_s:
            raise DedupeInvalid(
                f"debounce max ({max_wait}s) must be at least the quiet period ({quiet_s}s)",
                field="debounce_max",
            )
        super().__init__("debounce", quiet_s, max_wait)


@dataclass(frozen=True)
class Hooks:
    """``@app.job(hooks=Hooks(...))``: what the end of a job of this type sets off.

    Hook job types (``sqsjobs.hooks``) are enqueued with the ended job's summary in the finish's own
    transaction, so a worker killed right after the finish cannot lose them; a name no handler
    registers is a ``ConfigurationError`` when a worker starts. Events go to the App's
    ``event_bus`` (docs/events.md).
    """

    #: Run when a job of the type dies (its attempts spent, a permanent error, rejected).
    on_dead: str | None = None
    #: Run when a job of the type succeeds.
    on_succeeded: str | None = None
    #: The events its jobs publish when they end: True (all of ``JOB_EVENTS``), False (none), or
    #: names from it; None leaves it to the App's ``events`` setting.
    events: bool | Iterable[str] | None = None


@dataclass(frozen=True)
class PayloadVersion:
    """``@job(version=PayloadVersion(3, upcast={1: v1_to_v2, 2: v2_to_v3}))``: the payload schema's version.

    ``upcast[n]`` turns a version-n payload (JSON data as stored) into a version n + 1 one, so a
    worker runs jobs enqueued before the schema changed; a payload older than the first step is
    refused, which is how a version is retired. A plain ``version=3`` has no steps: an older payload
    is validated as it is.
    """

    number: int
    upcast: Mapping[int, Upcast] = field(default_factory=dict)


@dataclass(frozen=True)
class BatchOptions:
    """``@job(batch=BatchOptions(max_size=50, max_wait_s=2))``: one handler call runs many jobs (docs/batch-handlers.md).

    Embedding APIs, bulk sends and bulk writes take many items per request. Each job still has its
    own record, claim, attempts and DLQ path; only the handler call is shared. A call starts when
    ``max_size`` claimed jobs wait, or ``max_wait_s`` after the first of them arrived (on Lambda:
    once every record of the invocation has been claimed or turned away).
    """

    max_size: int = 10
    max_wait_s: float = 1.0

    def __post_init__(self) -> None:
        if isinstance(self.max_size, bool) or not isinstance(self.max_size, int) or self.max_size < 1:
            raise ConfigurationError(
                f"BatchOptions.max_size must be an int of at least 1, got {self.max_size!r}"
            )
        if not self.max_wait_s >= 0:
            raise ConfigurationError(f"BatchOptions.max_wait_s must be 0 or more, got {self.max_wait_s!r}")


@dataclass(frozen=True)
class BatchItem(Generic[P]):
    """One job of a batch handler's call: its payload (validated as a single handler's) and its context."""

    payload: P
    ctx: JobContext

    @property
    def job_id(self) -> str:
        """The job's id: the key of a mapping of outcomes."""
        return self.ctx.job_id


@dataclass(frozen=True)
class BatchSuccess:
    """A batch handler's outcome for one job: it succeeded, with ``result`` (JSON, as a handler's return)."""

    result: Any = None


@dataclass(frozen=True)
class BatchRetry:
    """A batch handler's outcome for one job: retry it (after ``delay_s``, else the type's backoff).

    An attempt like any failed one: past the type's ``max_attempts`` the job is dead.
    """

    reason: str = "the batch handler asked for a retry"
    delay_s: float | None = None


@dataclass(frozen=True)
class BatchDead:
    """A batch handler's outcome for one job: it cannot succeed; dead at once, to the DLQ with ``reason``."""

    reason: str


#: What a batch handler returns for each job (an exception instance is recorded as if raised for it).
BatchOutcome: TypeAlias = BatchSuccess | BatchRetry | BatchDead | Exception


#: The events a job's end publishes, by the status it ended in (docs/events.md).
JOB_EVENTS = {
    "succeeded": "JobSucceeded",
    "dead": "JobDead",
    "expired": "JobExpired",
    "cancelled": "JobCancelled",
}


def checked_events(name: str, events: bool | Iterable[str] | None) -> frozenset[str] | None:
    """``Hooks(events=...)`` as names; an unknown name is a ``ConfigurationError`` at import."""
    if events is None:
        return None
    if isinstance(events, bool):
        return frozenset(JOB_EVENTS.values()) if events else frozenset()
    chosen = frozenset([events] if isinstance(events, str) else events)
    unknown = chosen - set(JOB_EVENTS.values())
    if unknown:
        raise ConfigurationError(
            f"job {name!r}: unknown events {sorted(unknown)}; choose from {sorted(JOB_EVENTS.values())}"
        )
    return chosen
