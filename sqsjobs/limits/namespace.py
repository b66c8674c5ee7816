"""Operator flows of flow control (sans-I/O): pause, resume, and the state of every limit.

``pause``/``resume`` write one item each (a PutItem, a DeleteItem: 1 write unit); ``close_breaker_flow``
reads the breaker item (1 read unit) and closes it with one conditional write. ``state_flow``
reads what ``sqsjobs limits`` and ``sqsjobs stats`` show: the pause items of the pausable types and,
per limit, its slots (unpartitioned, or of the key values asked for), its start log and its
breaker — one BatchGetItem per 100 items, half a read unit each. It never scans the table: the
running count of a partitioned limit is shown per key value asked for (``--key``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqsjobs._aws import Call, Flow, async_verb, sync_verb
from sqsjobs.errors import ConfigurationError, InvalidTransition, RecordChanged
from sqsjobs.limits import records as limit_records
from sqsjobs.limits.declarations import Limits
from sqsjobs.runtime.kernel import Namespace
from sqsjobs.store.apply import Landed, Refused, apply
from sqsjobs.store.codec import num_attr, str_attr

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from sqsjobs.limits.declarations import Limit
    from sqsjobs.registry import Registry
    from sqsjobs.runtime.kernel import Kernel


def pausable(registry: Registry, job_type: str) -> None:
    """Raise unless ``job_type`` is registered and pausable (its workers read the pause item)."""
    spec = registry.get(job_type)  # HandlerNotFound names the registered types
    if not spec.pausable:
        raise ConfigurationError(
            f"job type {job_type!r} is not pausable: its workers never read a pause (that read is a cost "
            f"only flow-controlled types pay); declare it @app.job({job_type!r}, ..., pausable=True) "
            "or put it under a limit, and deploy the workers"
        )


def pause_flow(
    table: str, registry: Registry, job_type: str, *, reason: str | None, now: float
) -> Flow[None]:
    """Pause ``job_type`` fleet-wide: its workers stop starting it within ``PAUSE_CACHE_S``."""
    pausable(registry, job_type)
    yield from apply(limit_records.pause(table, job_type, reason=reason, now=now))


def resume_flow(table: str, registry: Registry, job_type: str) -> Flow[bool]:
    """Resume ``job_type``; True if it was paused."""
    pausable(registry, job_type)
    removed = yield from apply(limit_records.resume(table, job_type))
    return isinstance(removed, Landed) and bool(removed.attributes)


class FlowControl(Limits, Namespace):
    """``app.limits``: the App's named limits (``app.limit`` is ``add``), and pausing a job type."""

    def __init__(self, kernel: Callable[[], Kernel]) -> None:
        Limits.__init__(self)
        Namespace.__init__(self, kernel)

    def _pause(self, job_type: str, reason: str | None = None) -> Flow[None]:
        """Stop starting ``job_type`` fleet-wide (within seconds); its jobs wait, attempts untouched."""
        k = self.kernel
        return pause_flow(k.settings.table_name, k.registry, job_type, reason=reason, now=k.clock.now())

    def _resume(self, job_type: str) -> Flow[bool]:
        """Start ``job_type`` again; True if it was paused."""
        return resume_flow(self.kernel.settings.table_name, self.kernel.registry, job_type)

    pause, apause = sync_verb(_pause), async_verb(_pause)
    resume, aresume = sync_verb(_resume), async_verb(_resume)


@dataclass
class LimitState:
    """One limit as ``sqsjobs limits`` shows it."""

    name: str
    job_types: list[str]
    concurrency: int | None
    key: str | None
    #: Slots held now (unpartitioned), or by key value for the keys asked for.
    running: int | None
    running_by_key: dict[str, int] = field(default_factory=dict)
    rate: str | None = None
    #: Starts logged in the last rate window (all shards).
    recent_starts: int | None = None
    breaker: str | None = None
    breaker_until: float | None = None
    breaker_failures: int | None = None
    #: Jobs of its types waiting to start (queued or retry scheduled), when counted (``waiting``).
    waiting: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return dict(self.__dict__)


@dataclass
class FlowState:
    """What flow control holds now: paused types and every limit."""

    paused: dict[str, dict[str, Any]]
    limits: list[LimitState]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {"paused": self.paused, "limits": [lim.to_dict() for lim in self.limits]}


def _ids(lim: Limit, keys: Sequence[str]) -> list[str]:
    ids: list[str] = []
    if lim.concurrency:
        for key in [None] if lim.key is None else list(keys):
            ids += [limit_records.slot_id(lim.name, n, key) for n in range(lim.slots(key))]
    if lim.rate:
        for key in [None] if lim.key is None else list(keys):
            ids += [limit_records.rate_id(lim.name, s, key) for s in range(lim.rate.shards)]
    if lim.breaker:
        ids.append(limit_records.breaker_id(lim.name))
    return ids


def state_flow(
    table: str, registry: Registry, limits: Limits, *, now: float, keys: Sequence[str] = ()
) -> Flow[FlowState]:
    """Read the pause items and every limit's items (``keys``: partition values to show)."""
    types = [s.name for s in registry if s.pausable]
    ids = [limit_records.pause_id(t) for t in types] + [i for lim in limits for i in _ids(lim, keys)]
    items = yield from limit_records.batch_get(table, ids)
    paused = {
        t: {"reason": str_attr(item, "reason"), "paused_at": num_attr(item, "paused_at")}
        for t in types
        if (item := items.get(limit_records.pause_id(t))) is not None
    }
    states = []
    for lim in limits:
        users = [s.name for s in registry if lim.name in s.limits]
        state = LimitState(lim.name, users, lim.concurrency, lim.key_name, running=None)
        if lim.concurrency:

            def held(key: str | None, lim: Limit = lim) -> int:
                return sum(
                    not limit_records.slot_is_free(items.get(limit_records.slot_id(lim.name, n, key)), now)
                    for n in range(lim.slots(key))
                )

            if lim.key is None:
                state.running = held(None)
            else:
                state.running_by_key = {k: held(k) for k in keys}
        if lim.rate:
            state.rate = str(lim.rate)
            starts = [
                t
                for key in ([None] if lim.key is None else keys)
                for s in range(lim.rate.shards)
                for t in limit_records.starts_of(items.get(limit_records.rate_id(lim.name, s, key)))
            ]
            state.recent_starts = sum(t > now - lim.rate.window_s for t in starts)
        if lim.breaker:
            item = items.get(limit_records.breaker_id(lim.name))
            state.breaker = limit_records.breaker_state(item)
            state.breaker_until = (
                num_attr(item, "until") if item and state.breaker == limit_records.OPEN else None
            )
            state.breaker_failures = sum(
                t >= now - lim.breaker.window_s for t in limit_records.failures_of(item)
            )
        states.append(state)
    return FlowState(paused, states)


def count_waiting(state: FlowState, waiting_by_type: dict[str, int]) -> None:
    """Fill each limit's ``waiting`` from per-type counts of queued and retry-scheduled jobs."""
    for lim in state.limits:
        lim.waiting = sum(waiting_by_type.get(t, 0) for t in lim.job_types)


def close_breaker_flow(table: str, limits: Limits, name: str) -> Flow[str]:
    """Close the breaker of limit ``name`` by hand (the dependency is back); returns the state it left.

    The same conditional write a probe that succeeded makes (``limits.store.close_breaker``, at the
    version read): the failures are forgotten and any probe ends, so the next job starts at once.
    ``InvalidTransition`` when it is already closed, ``RecordChanged`` when a worker moved it between
    the read and the write (read again and decide again), ``ConfigurationError`` for a limit that is
    not declared or has no breaker.
    """
    lim = limits.get(name)
    if lim.breaker is None:
        raise ConfigurationError(f"limit {name!r} has no breaker (declare it with breaker=Breaker(...))")
    item_id = limit_records.breaker_id(name)
    found = yield Call("dynamodb", "get_item", limit_records.get(table, item_id) | {"ConsistentRead": True})
    item = found.get("Item")
    state = limit_records.breaker_state(item)
    if state == limit_records.CLOSED:
        raise InvalidTransition(f"the breaker of limit {name!r} is already closed")
    closed = yield from apply(
        limit_records.close_breaker(table, item_id, version=limit_records.version_of(item))
    )
    if isinstance(closed, Refused):
        raise RecordChanged(
            f"the breaker of limit {name!r} changed meanwhile; read it and try again"
        ) from closed.error
    return state
