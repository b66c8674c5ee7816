"""The dedup modes of an idempotency key: how long a key names one job (docs/dedupe.md).

The default key is one job for the record's whole retention. The modes narrow it; a job type
(``@app.job(dedupe=...)``) or an enqueue (``dedupe=``) names one as a typed value: ``DedupeFor``,
``Throttle``, ``WhileActive`` or ``Debounce``. Each is a ``KeyPolicy`` (``sqsjobs.options``), the
producer's seam: the producer asks it for the job's id, and lets the two that write before the job
(``KeySettler``, ``sqsjobs.store.enqueue``) settle it. The HTTP API and foreign messages carry the
same modes as flat JSON fields (``of_options`` reads them).

- ``DedupeFor`` / ``Throttle`` (a window): the window's slot is part of the key, so the job id
  still comes from the key alone and the enqueue stays the one conditional put it always was. The
  windows are aligned (slot = ``floor(now / window)``): two enqueues either side of a boundary
  are two jobs. ``dedupe_for`` keeps ``IdempotencyConflict`` for another payload; ``throttle``
  does not (the first enqueue of the window wins, later ones get its id whatever their payload).
- ``WhileActive``: the key maps to the live job through a key item (``sqsjobs.dedupe.records``).
- ``Replace``: the same key item, taken by the newest enqueue, which stops the job it named: a
  waiting one is cancelled, a running one cancelled under its handler, which never commits.
- ``Debounce``: the last payload of a quiet period wins (``sqsjobs.dedupe.debounce``).
"""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

from sqsjobs.config import to_seconds
from sqsjobs.dedupe import debounce
from sqsjobs.dedupe.records import claim_key_flow, replace_key_flow
from sqsjobs.errors import DedupeInvalid
from sqsjobs.store.codec import idempotent_job_id
from sqsjobs.store.enqueue import Settled

if TYPE_CHECKING:
    from datetime import timedelta

    from sqsjobs._aws import Flow
    from sqsjobs.store.enqueue import KeyEnv, NewJob

#: The modes a job type or an enqueue may name.
Mode = Literal["window", "throttle", "while_active", "debounce", "replace"]
#: The modes whose job takes a key item before anything else is written.
KEYED = frozenset({"while_active", "debounce", "replace"})


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

    # ── the producer's seam (``sqsjobs.options.KeyPolicy``) ──
    @property
    def first_wins(self) -> bool:
        """``throttle``: the first enqueue of the window wins, whatever the payload."""
        return self.mode == "throttle"

    def job_id(self, job_type: str, key: str, tenant: str | None, at: float) -> str:
        """A window's slot is part of the key; a keyed mode's job id is new each time (the key item names it)."""
        if self.mode in KEYED:
            return uuid.uuid4().hex
        assert self.window_s is not None
        window_ms = round(self.window_s * 1000)
        slot = int(at * 1000) // window_ms
        return idempotent_job_id(job_type, f"{key}\0{self.mode}/{window_ms}ms@{slot}", tenant)


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

    def settle_flow(self, job: NewJob, env: KeyEnv) -> Flow[Settled]:
        """Take the key item, or return the live job that holds it (then nothing more is written)."""
        got = yield from claim_key_flow(env.table, job, retention_s=env.retention_s)
        return Settled(got, write=not got.deduplicated)


class Replace(Dedupe):
    """The newest enqueue of the key runs: the job the key named is stopped (cancelled, even mid-run).

    "Re-index this document" enqueued again stops the stale run rather than queue behind it
    (Inngest's singleton ``cancel``, Hatchet's ``CANCEL_IN_PROGRESS``). A waiting job is cancelled; a
    running one is cancelled under its handler, which its next heartbeat tells (``ctx.cancelled``)
    and whose success can no longer land.
    """

    def __init__(self) -> None:
        super().__init__("replace")

    def settle_flow(self, job: NewJob, env: KeyEnv) -> Flow[Settled]:
        """Take the key item from whoever holds it, and stop that job; the new job is then written."""
        taken = yield from replace_key_flow(env.table, job, retention_s=env.retention_s)
        return Settled(taken, write=True)


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

    def settle_flow(self, job: NewJob, env: KeyEnv) -> Flow[Settled]:
        """Gather ``job`` into the key's waiting job, or start one: it writes and sends the job itself."""
        assert self.window_s is not None and self.max_wait_s is not None
        gathered = yield from debounce.enqueue_flow(
            env.table,
            job,
            quiet_s=self.window_s,
            max_wait_s=self.max_wait_s,
            retention_s=env.retention_s,
            queue_url=env.queue_url,
        )
        return Settled(gathered, write=False)


class FlatModes(Protocol):
    """An object carrying the modes as flat JSON fields (``POST /jobs``'s body, a foreign message)."""

    @property
    def unique(self) -> str | None:
        """``"while_active"``, ``"replace"`` or None."""
        ...

    @property
    def dedupe_for(self) -> float | None:
        """A ``DedupeFor`` window (s)."""
        ...

    @property
    def throttle(self) -> float | None:
        """A ``Throttle`` window (s)."""
        ...

    @property
    def debounce(self) -> float | None:
        """A ``Debounce`` quiet period (s)."""
        ...

    @property
    def debounce_max(self) -> float | None:
        """A ``Debounce``'s longest wait (s)."""
        ...


def of_fields(source: FlatModes) -> Dedupe | None:
    """The one mode ``source``'s flat fields name, or None (``of_options`` over its fields)."""
    return of_options(
        source.unique,
        source.dedupe_for,
        source.throttle,
        debounce_s=source.debounce,
        debounce_max_s=source.debounce_max,
    )


def of_options(
    unique: str | None,
    dedupe_for_s: float | None,
    throttle_s: float | None,
    *,
    debounce_s: float | None = None,
    debounce_max_s: float | None = None,
) -> Dedupe | None:
    """The one mode flat options name (the HTTP API's and a foreign message's JSON fields), or None.

    Raises ``DedupeInvalid`` (a ``ValueError``) for two modes, or a window outside
    ``MIN_WINDOW_S``..``MAX_WINDOW_S``.
    """
    if unique is not None and unique not in ("while_active", "replace"):
        raise DedupeInvalid(
            f"unique={unique!r}: the unique modes are 'while_active' and 'replace'", field="unique"
        )
    if debounce_s is None and debounce_max_s is not None:
        raise DedupeInvalid("debounce_max needs debounce (the quiet period)", field="debounce_max")
    named = [
        (Replace() if unique == "replace" else WhileActive()) if unique is not None else None,
        DedupeFor(dedupe_for_s) if dedupe_for_s is not None else None,
        Throttle(throttle_s) if throttle_s is not None else None,
        Debounce(debounce_s, max=debounce_max_s) if debounce_s is not None else None,
    ]
    chosen = [d for d in named if d is not None]
    if len(chosen) > 1:
        raise DedupeInvalid("give one of unique, dedupe_for, throttle and debounce", field="idempotency_key")
    return chosen[0] if chosen else None
