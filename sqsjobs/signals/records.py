"""Where signals meet their waiters: one item per (signal name, matched values), found by its key (sans-I/O).

A *signal item* is keyed by what a send and a wait agree on before they meet: the signal's name
and the values of its declared keys (``sig#<digest>``, the digest of ``[name, [[key, value]...]]``
in canonical JSON). It is a control item of the jobs table (no type, no status), and holds::

    w:<token id>   N   a job waiting (``ctx.signals.wait``): its wait token, and the token's timeout
    c:<job id>     N   a job of a ``cancel_on`` type: cancelled by a matching signal (when it registered)
    e:<signal id>  M   {"d": data JSON, "at": sent at}: a signal kept for a lookback (types that keep any)
    last_at        N   when the last signal of this key was sent (a claim's canceller reads it)
    expires_at     N   the table's TTL: ``KEPT_S`` after its last write

So a send is one ``UpdateItem`` that returns the item as it made it (``ALL_NEW``): the waiters and
cancellers registered before it are in that answer, in the same write that records the signal.
A wait's registration is the same kind of write on the same item, so of a signal and a wait that
race, one write is first: either the signal's answer lists the waiter, or the wait's lists the
signal (``last_at``, and ``e:`` entries when kept). No Scan, no index, no eventual consistency.

Entries are removed by the send that used them (``forget``): answered or timed-out waiters,
cancellers told, kept signals past their window. An item nobody writes for ``KEPT_S`` is deleted
by the TTL.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any, Literal

from sqsjobs.store.codec import av_n, av_s, canonical_json, num_attr
from sqsjobs.store.conditions import Exists, Fragment
from sqsjobs.store.schema import TTL_ATTRIBUTE
from sqsjobs.store.write import Write

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

#: The prefix of a signal item's id (a job id is hex, so the two never meet).
PREFIX = "sig#"
WAITER, CANCELLER, KEPT = "w:", "c:", "e:"
#: How long a signal item outlives its last write (the TTL). A wait's timeout is at most
#: ``MAX_WAIT_S``, so a waiter's item is never deleted under it; a canceller registered at a claim
#: is kept as long (a job queued longer than that without being claimed again is not cancelled).
MAX_WAIT_S = 30 * 86400.0
KEPT_S = MAX_WAIT_S + 86400.0
#: The largest signal data (canonical JSON): it becomes the waiting job's token answer, in its record.
MAX_DATA_BYTES = 16 * 1024
#: The longest a signal is kept for a lookback: kept signals live in the item, which must stay small.
MAX_KEEP_S = 86400.0


def values_key(name: str, values: Mapping[str, Any]) -> str:
    """The id of the signal item of ``name`` with these key values (equal JSON values, equal ids)."""
    pairs = [[k, _normal(values[k])] for k in sorted(values)]
    digest = hashlib.sha256(canonical_json([name, pairs]).encode()).hexdigest()[:40]
    return PREFIX + digest


def _normal(value: Any) -> Any:
    """7 and 7.0 are one value (JSON does not tell them apart); anything else is compared as given."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def described(name: str, values: Mapping[str, Any]) -> str:
    """``order.paid order_id=7``: how logs and cancel reasons name a key."""
    shown = " ".join(f"{k}={json.dumps(values[k])}" for k in sorted(values))
    return f"{name} {shown}".strip()


def _register(
    table: str,
    key: str,
    entry: str,
    value: float,
    *,
    name: str,
    now: float,
    returns: Literal["NONE", "ALL_NEW"],
) -> Write:
    return Write(
        table,
        {"id": av_s(key)},
        sets=((entry, ":v"), ("signal", ":name"), (TTL_ATTRIBUTE, ":ttl")),
        values={":v": av_n(value), ":name": av_s(name), ":ttl": av_n(int(now + KEPT_S))},
        returns=returns,
        old_on_refusal=False,
    )


def wait_on(
    table: str, key: str, token_id: str, timeout_at: float, *, name: str, now: float, lookback: bool
) -> Write:
    """Register a waiting job's token on the item (``ALL_NEW`` when the wait looks back at kept signals)."""
    return _register(
        table,
        key,
        WAITER + token_id,
        timeout_at,
        name=name,
        now=now,
        returns="ALL_NEW" if lookback else "NONE",
    )


def cancel_on(table: str, key: str, job_id: str, *, name: str, now: float) -> Write:
    """Register a job to cancel: the item as made (``last_at`` says whether a signal came since its enqueue)."""
    return _register(table, key, CANCELLER + job_id, now, name=name, now=now, returns="ALL_NEW")


def signalled(table: str, key: str, *, name: str, now: float, signal_id: str, data: str | None) -> Write:
    """Record a signal on its item, and return the item (its waiters and cancellers) as it made it.

    ``data``: the signal's JSON when its name keeps signals for a lookback (``e:<signal id>``).
    """
    sets: list[tuple[str, Any]] = [("last_at", ":now"), ("signal", ":name"), (TTL_ATTRIBUTE, ":ttl")]
    values: dict[str, Any] = {":now": av_n(now), ":name": av_s(name), ":ttl": av_n(int(now + KEPT_S))}
    if data is not None:
        sets.append((KEPT + signal_id, ":kept"))
        values[":kept"] = {"M": {"d": av_s(data), "at": av_n(now)}}
    return Write(
        table, {"id": av_s(key)}, sets=tuple(sets), values=values, returns="ALL_NEW", old_on_refusal=False
    )


def forget(table: str, key: str, entries: Sequence[str]) -> Write:
    """Remove ``entries`` (used or past) from the item; never creates one (a TTL may have deleted it)."""
    return Write(
        table,
        {"id": av_s(key)},
        removes=tuple(entries),
        guards=(Fragment("exists", Exists("id")),),
        old_on_refusal=False,
    )


def waiters(item: Mapping[str, Any]) -> list[tuple[str, float]]:
    """(token id, timeout at) of every waiter on the item, oldest token first."""
    found = [(k[len(WAITER) :], float(v["N"])) for k, v in item.items() if k.startswith(WAITER) and "N" in v]
    return sorted(found)


def cancellers(item: Mapping[str, Any]) -> list[str]:
    """The job ids of every canceller on the item."""
    return sorted(k[len(CANCELLER) :] for k in item if k.startswith(CANCELLER))


def kept(item: Mapping[str, Any]) -> list[tuple[float, str, Any]]:
    """(sent at, entry name, data) of every signal kept on the item, in the order they were sent."""
    found = []
    for k, v in item.items():
        if k.startswith(KEPT) and "M" in v:
            m = v["M"]
            found.append((float(m["at"]["N"]), k, json.loads(m["d"]["S"])))
    return sorted(found, key=lambda e: (e[0], e[1]))


def last_at(item: Mapping[str, Any]) -> float | None:
    """When the item's last signal was sent (None: none yet)."""
    return num_attr(item, "last_at")


def stale_kept(item: Mapping[str, Any], before: float) -> Iterable[str]:
    """The kept signals sent before ``before``: past every lookback."""
    return [name for at, name, _ in kept(item) if at < before]
