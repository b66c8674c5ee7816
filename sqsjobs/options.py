"""What ``@app.job`` takes beside the handler: hooks and events, the payload's version, batch handlers.

Plain values, checked when they are made (``ConfigurationError`` at import), that
``sqsjobs.registry`` puts on a type's ``HandlerSpec`` and the runtime reads there; the batch
handler's item and outcome types are what such a handler takes and returns.
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeAlias, TypeVar

from sqsjobs.errors import ConfigurationError

if typing.TYPE_CHECKING:
    from sqsjobs.context import JobContext

#: The payload type of a handler (its first parameter's annotation).
P = TypeVar("P")
#: One upcast step: a payload of version n (JSON data as stored) → the same payload at version n + 1.
Upcast = Callable[[Any], Any]


@typing.runtime_checkable
class KeyPolicy(typing.Protocol):
    """How long an idempotency key names one job: a dedup mode, as the producer sees it (its seam).

    A type (``@app.job(dedupe=...)``) or an enqueue (``dedupe=``) names one of ``sqsjobs.dedupe``'s
    modes; the producer asks it for the job's id, and a mode that writes before the job (a
    ``KeySettler``, ``sqsjobs.store.enqueue``) settles its jobs itself. The producer names no mode.
    """

    @property
    def mode(self) -> str:
        """The mode's name (logs, errors)."""
        ...

    @property
    def first_wins(self) -> bool:
        """Another payload under the key gets the key's job instead of ``IdempotencyConflict``."""
        ...

    def job_id(self, job_type: str, key: str, tenant: str | None, at: float) -> str:
        """The id an enqueue with ``key`` at ``at`` (epoch seconds) writes."""
        ...


#: What a ``dedupe=`` that is not a dedup mode is told (``@app.job`` and an enqueue alike).
DEDUPE_MODES = "give DedupeFor(window), Throttle(window), WhileActive(), Replace() or Debounce(quiet)"


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
    #: The KMS key (id, ARN or alias) this type's payloads and results are encrypted with, whatever the
    #: App's ``encrypt`` (docs/encryption.md): how a payload is stored, beside what it looks like.
    encrypt: str | None = None


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
