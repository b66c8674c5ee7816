"""The flow-control items in the jobs table, and one builder per write (sans-I/O).

Like the worker registry (``store/presence_items.py``) they live in the jobs table under ids with ``#``,
which no job id contains. None carries ``attn``, ``status`` or ``updated_at``: no index entry is
ever written for them (0 index write units), and job listings and ``stats`` never count them.
Every item is far under 1 KB, so each write below is one write unit, and each eventually
consistent read half a read unit::

    pause#<type>                       type, reason, paused_at        Put by pause, Delete by resume
    limit#<name>#<slot>[#<key value>]  holder, token, lease_until     a concurrency slot: Put to take
                                                                      (free or lease expired), Update
                                                                      to renew, Delete to give back
    rate#<name>#<shard>                starts (the last N start times), v    one Update per start
    breaker#<name>                     state, failures, until, probe, probe_until, v

Every write is conditional on what the writer read (a version ``v``, a slot's token, a probe's
job id) and asks for the item back when refused (``ALL_OLD``), so a refusal is also the fresh read.
Slot items carry ``expires_at`` (the table's TTL): slots of partition keys no longer used vanish.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqsjobs.store import batched
from sqsjobs.store.codec import av_n, av_s, num_attr, str_attr
from sqsjobs.store.conditions import AnyOf, Compare, Fragment, IfNotExists, ListAppend, Missing, Plus, eq
from sqsjobs.store.schema import TTL_ATTRIBUTE
from sqsjobs.store.write import Delete, Put, Write

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from sqsjobs._aws import Flow
    from sqsjobs.store.codec import Item
    from sqsjobs.store.conditions import Expr

#: A slot item outlives its lease by this much before TTL may delete it (AWS deletes within days).
SLOT_TTL_S = 3600

CLOSED, OPEN, HALF_OPEN = "closed", "open", "half_open"


def pause_id(job_type: str) -> str:
    """The pause item of ``job_type``."""
    return f"pause#{job_type}"


def slot_id(limit: str, slot: int, key: str | None) -> str:
    """Concurrency slot ``slot`` of ``limit`` (in the partition of ``key``, if partitioned)."""
    return f"limit#{limit}#{slot}" if key is None else f"limit#{limit}#{slot}#{key}"


def rate_id(limit: str, shard: int, key: str | None = None) -> str:
    """Start log shard ``shard`` of ``limit`` (of the partition of ``key``, if partitioned: its own item)."""
    return f"rate#{limit}#{shard}" if key is None else f"rate#{limit}#{shard}#{key}"


def breaker_id(limit: str) -> str:
    """The breaker item of ``limit``."""
    return f"breaker#{limit}"


def _key(item_id: str) -> dict[str, Any]:
    return {"id": av_s(item_id)}


def get(table: str, item_id: str) -> dict[str, Any]:
    """GetItem, eventually consistent (half a read unit): every read here goes through a short cache."""
    return {"TableName": table, "Key": _key(item_id)}


def batch_get(table: str, ids: Sequence[str]) -> Flow[dict[str, Item]]:
    """The items with these ids, by id (a missing id: no item), eventually consistent."""
    items = yield from batched.get_items(table, [_key(i) for i in ids])
    return {i["id"]["S"]: dict(i) for i in items}


# ── pause ─────────────────────────────────────────────────────────────────────────────────
def pause(table: str, job_type: str, *, reason: str | None, now: float) -> Put:
    """PutItem: the type is paused (again: the reason and time are replaced)."""
    item = {"id": av_s(pause_id(job_type)), "type": av_s(job_type), "paused_at": av_n(now)}
    if reason:
        item["reason"] = av_s(reason[:500])
    return Put(table, item)


def resume(table: str, job_type: str) -> Delete:
    """DeleteItem: the type runs again (a type that was not paused stays so)."""
    return Delete(table, _key(pause_id(job_type)), returns="ALL_OLD")


# ── concurrency slots ─────────────────────────────────────────────────────────────────────
def slot_is_free(item: Mapping[str, Any] | None, now: float) -> bool:
    """True for a slot no one holds: no item, or a lease that ran out (its holder died or stalled)."""
    return item is None or (num_attr(item, "lease_until") or 0.0) < now


def take_slot(table: str, item_id: str, *, job_id: str, token: str, now: float, lease_s: float) -> Put:
    """PutItem: take a free slot for ``job_id`` until ``now + lease_s``."""
    until = now + lease_s
    item = {
        "id": av_s(item_id),
        "holder": av_s(job_id),
        "token": av_s(token),
        "taken_at": av_n(now),
        "lease_until": av_n(until),
        TTL_ATTRIBUTE: av_n(int(until) + SLOT_TTL_S),
    }
    free = Fragment("free", _FREE, {":now": av_n(now)})
    return Put(table, item, (free,), old_on_refusal=True)


#: A slot no one holds: no item yet, or its lease ran out.
_FREE = AnyOf((Missing("id"), Compare("lease_until", "<", ":now")))
#: Still this holder's slot (or probe).
_HOLDER = eq("token", ":t")
_PROBE = eq("probe", ":p")


def renew_slot(table: str, item_id: str, *, token: str, now: float, lease_s: float) -> Write:
    """UpdateItem: extend a slot this holder (``token``) still has."""
    until = now + lease_s
    values = {":t": av_s(token), ":u": av_n(until), ":x": av_n(int(until) + SLOT_TTL_S)}
    return Write(
        table,
        _key(item_id),
        (("lease_until", ":u"), (TTL_ATTRIBUTE, ":x")),
        guards=(Fragment("holder", _HOLDER, values),),
        values=values,
        old_on_refusal=False,
    )


def give_back_slot(table: str, item_id: str, *, token: str) -> Delete:
    """DeleteItem: free a slot this holder still has (a slot taken over since is left alone)."""
    return Delete(table, _key(item_id), (Fragment("holder", _HOLDER, {":t": av_s(token)}),))


# ── rate: a log of the last N start times ─────────────────────────────────────────────────
def starts_of(item: Mapping[str, Any] | None) -> list[float]:
    """The start times a rate item holds, oldest first."""
    if not item or "starts" not in item:
        return []
    return sorted(float(v["N"]) for v in item["starts"]["L"])


def version_of(item: Mapping[str, Any] | None) -> int:
    """An item's write version (0: no item yet)."""
    return int(num_attr(item, "v") or 0) if item else 0


def next_start(starts: Sequence[float], *, allowed: int, window_s: float) -> float:
    """The earliest time one more start keeps ``allowed`` starts in any ``window_s`` window.

    With the log sorted and at most ``allowed`` long, that is when its oldest entry leaves the
    window — or now, while it has room; never before its newest entry (the log stays in order).
    """
    if not starts:
        return 0.0
    opens = starts[-allowed] + window_s if len(starts) >= allowed else 0.0
    return max(opens, starts[-1])


def record_start(
    table: str, item_id: str, *, starts: Sequence[float], version: int, now: float, allowed: int, wid: str
) -> Write:
    """UpdateItem: append ``now`` to the log read at ``version`` (dropping what it no longer needs)."""
    kept = [*starts, now][-allowed:]
    values: dict[str, Any] = {
        ":s": {"L": [av_n(round(t, 6)) for t in kept]},
        ":n": av_n(version + 1),
        ":w": av_s(wid),
    }
    return Write(
        table,
        _key(item_id),
        (("starts", ":s"), ("v", ":n"), ("wid", ":w")),
        guards=(_at_version(version),),
        values=values,
    )


def _at_version(version: int) -> Fragment:
    """The item as read at ``version`` (0: not created yet)."""
    if version == 0:
        return Fragment("unwritten", _UNWRITTEN)
    return Fragment("at_version", _AT_VERSION, {":v": av_n(version)})


_UNWRITTEN = Missing("v")
_AT_VERSION = eq("v", ":v")


# ── breaker ───────────────────────────────────────────────────────────────────────────────
def breaker_state(item: Mapping[str, Any] | None) -> str:
    """``closed`` (also: no item), ``open`` or ``half_open``."""
    return (str_attr(item, "state") if item else None) or CLOSED


def _versioned(
    table: str,
    item_id: str,
    version: int,
    sets: tuple[tuple[str, Expr], ...],
    values: dict[str, Any],
    removes: tuple[str, ...] = (),
) -> Write:
    """An UpdateItem that lands only on the item as read at ``version`` (0: not created yet)."""
    return Write(
        table,
        _key(item_id),
        (*sets, ("v", ":n")),
        removes,
        guards=(_at_version(version),),
        values={**values, ":n": av_n(version + 1)},
    )


def become_probe(table: str, item_id: str, *, version: int, job_id: str, now: float, lease_s: float) -> Write:
    """UpdateItem: the open breaker (read at ``version``, cooldown over) lets this one job try."""
    return _versioned(
        table,
        item_id,
        version,
        (("state", ":h"), ("probe", ":p"), ("probe_until", ":u")),
        {":h": av_s(HALF_OPEN), ":p": av_s(job_id), ":u": av_n(now + lease_s)},
    )


def record_failure(table: str, item_id: str, *, now: float) -> Write:
    """UpdateItem: append one failure time (unconditional: failures only add); returns the item."""
    return Write(
        table,
        _key(item_id),
        (
            ("failures", ListAppend(IfNotExists("failures", ":e"), ":f")),
            ("v", Plus(IfNotExists("v", ":z"), "+", ":one")),
        ),
        values={":e": {"L": []}, ":f": {"L": [av_n(round(now, 3))]}, ":z": av_n(0), ":one": av_n(1)},
        returns="ALL_NEW",
        old_on_refusal=False,
    )


def failures_of(item: Mapping[str, Any] | None) -> list[float]:
    """The failure times a breaker item holds."""
    if not item or "failures" not in item:
        return []
    return [float(v["N"]) for v in item["failures"]["L"]]


def open_breaker(table: str, item_id: str, *, version: int, now: float, cooldown_s: float) -> Write:
    """UpdateItem: open (from closed, or from half-open when its probe failed) until ``now + cooldown_s``."""
    return _versioned(
        table,
        item_id,
        version,
        (("state", ":o"), ("until", ":u"), ("failures", ":e"), ("opened_at", ":now")),
        {":o": av_s(OPEN), ":u": av_n(now + cooldown_s), ":e": {"L": []}, ":now": av_n(now)},
        _PROBING,
    )


def close_breaker(table: str, item_id: str, *, version: int) -> Write:
    """UpdateItem: the probe succeeded: closed, failures forgotten."""
    return _versioned(
        table,
        item_id,
        version,
        (("state", ":c"), ("failures", ":e")),
        {":c": av_s(CLOSED), ":e": {"L": []}},
        _PROBING,
    )


def end_probe(table: str, item_id: str, *, job_id: str) -> Write:
    """UpdateItem: the probe ended without a verdict (released, cancelled): the next job may probe."""
    values = {":p": av_s(job_id), ":z": av_n(0)}
    return Write(
        table,
        _key(item_id),
        (("probe_until", ":z"),),
        guards=(Fragment("probe", _PROBE, values),),
        values=values,
        old_on_refusal=False,
    )


def renew_probe(table: str, item_id: str, *, job_id: str, now: float, lease_s: float) -> Write:
    """UpdateItem: the probe still runs: keep others from probing."""
    values = {":p": av_s(job_id), ":u": av_n(now + lease_s)}
    return Write(
        table,
        _key(item_id),
        (("probe_until", ":u"),),
        guards=(Fragment("probe", _PROBE, values),),
        values=values,
        old_on_refusal=False,
    )


#: What a breaker's verdict removes: the probe it let through.
_PROBING = ("probe", "probe_until")


def trim_failures(table: str, item_id: str, *, version: int, keep: Sequence[float]) -> Write:
    """UpdateItem: drop failure times that left the window (the list stays short)."""
    return _versioned(table, item_id, version, (("failures", ":f"),), {":f": {"L": [av_n(t) for t in keep]}})
