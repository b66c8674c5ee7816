"""What a user declares: ``app.limit(name, concurrency=, rate=, key=, breaker=)`` and its ``Breaker``.

Pure data, no I/O: the gate (``limits/plugin.py``) reads these, the store (``limits/records.py``) names
the items they live in. A limit is *named* so several job types can share it (``@app.job(...,
limits=["stripe"])``): the dependency is limited, not one type. Names are checked when declared;
the job types' references to them when a worker starts (``Limits.check``), because ``app.limit``
may come after the ``@app.job`` that names it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqsjobs.errors import ConfigurationError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping

    from sqsjobs.registry import Registry

#: Limit names become part of DynamoDB item ids (``limit#<name>#...``): no ``#``, nothing exotic.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$")
_RATE = re.compile(r"^\s*(\d+)\s*/\s*(s|sec|second|m|min|minute)\s*$")
#: A rate log item keeps one start time per allowed start; past this many it is sharded (~10 bytes
#: a time: 100 starts keep the item under 1 KB, one write unit per start).
MAX_STARTS_PER_ITEM = 100
#: ``key=`` values: the job's tenant, or a top-level field of its payload.
TENANT_KEY = "tenant"
PAYLOAD_KEY_PREFIX = "payload."
#: The partition of jobs that have no value for a limit's key (no tenant, no such payload field).
NO_KEY = "~"


@dataclass(frozen=True)
class Breaker:
    """Open after ``failures`` failed runs within ``window_s``; after ``cooldown_s`` one probe job decides."""

    failures: int = 5
    window_s: float = 60.0
    cooldown_s: float = 30.0

    def __post_init__(self) -> None:
        if self.failures < 1 or self.window_s <= 0 or self.cooldown_s <= 0:
            raise ConfigurationError(
                f"Breaker needs failures >= 1 and positive window_s and cooldown_s, got {self}"
            )


@dataclass(frozen=True)
class Rate:
    """At most ``starts`` starts in any ``window_s`` window, fleet-wide."""

    starts: int
    window_s: float

    @property
    def shards(self) -> int:
        """Items the start log is spread over (one takes ``MAX_STARTS_PER_ITEM`` starts per window)."""
        return math.ceil(self.starts / MAX_STARTS_PER_ITEM)

    def shard_starts(self, shard: int) -> int:
        """Starts shard ``shard`` allows per window: the shares add up to ``starts`` exactly."""
        base, extra = divmod(self.starts, self.shards)
        return base + (1 if shard < extra else 0)

    def __str__(self) -> str:
        return f"{self.starts}/{'s' if self.window_s == 1 else 'min'}"


def parse_rate(text: str) -> Rate:
    """``"20/s"`` or ``"600/min"`` → ``Rate``; ``ConfigurationError`` says what is accepted."""
    match = _RATE.match(text)
    if not match or int(match.group(1)) < 1:
        raise ConfigurationError(f"rate {text!r} is not a rate: write it like '20/s' or '600/min'")
    return Rate(int(match.group(1)), 1.0 if match.group(2).startswith("s") else 60.0)


@dataclass(frozen=True)
class Limit:
    """One named, fleet-wide limit (see ``Limits.add``)."""

    name: str
    concurrency: int | None = None
    rate: Rate | None = None
    #: None: one limit for all its jobs; ``tenant``, ``payload.<field>`` or a function of the
    #: payload: one concurrency and one rate per value (each value's items are its own partitions).
    key: str | Callable[[Any], object] | None = None
    breaker: Breaker | None = None
    #: Concurrency weight of a key value: its jobs get ``concurrency * weight`` slots (default 1).
    weights: Mapping[str, int] = field(default_factory=dict, hash=False, compare=False)

    @property
    def key_name(self) -> str | None:
        """The key as the CLI shows it: its text, or ``fn:<name>`` for a function."""
        if self.key is None or isinstance(self.key, str):
            return self.key
        return f"fn:{getattr(self.key, '__name__', 'key')}"

    def slots(self, key: str | None) -> int:
        """The concurrency slots of ``key``'s partition (its weight times ``concurrency``)."""
        return (self.concurrency or 0) * (self.weights.get(key, 1) if key is not None else 1)

    def key_of(self, tenant: str | None, payload: Any) -> str | None:
        """The partition a job falls in (None for an unpartitioned limit); ``NO_KEY`` when it has no value."""
        if self.key is None:
            return None
        if callable(self.key):
            value: Any = self.key(payload)
        elif self.key == TENANT_KEY:
            value = tenant
        else:
            field = self.key[len(PAYLOAD_KEY_PREFIX) :]
            value = payload.get(field) if isinstance(payload, dict) else None
        return NO_KEY if value is None or value == "" else str(value)


class Limits:
    """The App's named limits (``app.limit`` is ``add``)."""

    def __init__(self) -> None:
        self._limits: dict[str, Limit] = {}

    def add(
        self,
        name: str,
        *,
        concurrency: int | None = None,
        rate: str | None = None,
        key: str | Callable[[Any], object] | None = None,
        breaker: Breaker | None = None,
        weights: Mapping[str, int] | None = None,
    ) -> Limit:
        """Declare a fleet-wide limit that ``@app.job(..., limits=[name])`` puts job types under.

        Args:
            name: how job types name it (``@app.job(..., limits=[name])``) and the CLI shows it.
            concurrency: at most this many of its jobs run at once, fleet-wide (per key value).
            rate: at most this many starts per second or minute (``"20/s"``, ``"600/min"``).
            key: ``"tenant"`` (the job's tenant), ``"payload.<field>"`` (a top-level field of its
                payload, which must then travel inline, not in S3) or a function of the payload:
                the concurrency and the rate are then per value of the key, each value in items of
                its own (a hot key is its own partition, not everyone's). Jobs without a value share
                one partition.
            breaker: open after repeated failures of its jobs (``Breaker``).
            weights: ``{key value: n}``: that value's jobs get ``n * concurrency`` slots (a premium
                tenant); the other values get ``concurrency``.
        """
        if not _NAME.match(name):
            raise ConfigurationError(
                f"limit name {name!r}: use letters, digits and . _ : - (up to 64, no '#')"
            )
        if name in self._limits:
            raise ConfigurationError(f"limit {name!r} is declared twice")
        if concurrency is not None and concurrency < 1:
            raise ConfigurationError(f"limit {name!r}: concurrency must be at least 1, got {concurrency}")
        if concurrency is None and rate is None and breaker is None:
            raise ConfigurationError(f"limit {name!r} limits nothing: give concurrency=, rate= or breaker=")
        if (
            key is not None
            and not callable(key)
            and key != TENANT_KEY
            and not (key.startswith(PAYLOAD_KEY_PREFIX) and len(key) > len(PAYLOAD_KEY_PREFIX))
        ):
            raise ConfigurationError(
                f"limit {name!r}: key must be 'tenant' or 'payload.<field>', got {key!r}"
            )
        if key is not None and concurrency is None and rate is None:
            raise ConfigurationError(
                f"limit {name!r}: key= partitions the concurrency and the rate; give concurrency= or rate="
            )
        if weights and (key is None or concurrency is None or min(weights.values()) < 1):
            raise ConfigurationError(
                f"limit {name!r}: weights= multiply a key's concurrency: give key=, concurrency= and weights >= 1"
            )
        limit = Limit(
            name, concurrency, parse_rate(rate) if rate else None, key, breaker, dict(weights or {})
        )
        self._limits[name] = limit
        return limit

    def include(self, other: Limits) -> None:
        """Declare every limit of ``other`` here too (an App composed of others, as ``Registry.include``)."""
        for lim in other:
            if lim.name in self._limits:
                raise ConfigurationError(f"limit {lim.name!r} is declared twice")
            self._limits[lim.name] = lim

    def get(self, name: str) -> Limit:
        """The limit named ``name``; ``ConfigurationError`` lists the declared ones."""
        try:
            return self._limits[name]
        except KeyError:
            known = ", ".join(sorted(self._limits)) or "none"
            raise ConfigurationError(f"no limit named {name!r} (declared: {known})") from None

    def __iter__(self) -> Iterator[Limit]:
        return iter(self._limits.values())

    def __bool__(self) -> bool:
        return bool(self._limits)

    def check(self, registry: Registry) -> None:
        """Every ``@app.job(limits=...)`` names a declared limit: ``ConfigurationError`` at startup if not."""
        for spec in registry:
            for name in spec.limits:
                if name not in self._limits:
                    known = ", ".join(sorted(self._limits)) or "none"
                    raise ConfigurationError(
                        f"job {spec.name!r} names limit {name!r}, which is not declared "
                        f"(declared: {known}); add app.limit({name!r}, ...) before starting workers"
                    )

    def of(self, registry: Registry, job_type: str) -> list[Limit]:
        """The limits a job type is under, in declaration order of ``@app.job(limits=...)``."""
        return [self.get(n) for n in registry.get(job_type).limits]
