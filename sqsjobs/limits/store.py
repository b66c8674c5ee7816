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

from sqsjobs.store.codec import av_n, av_s, num_attr, str_attr
from sqsjobs.store.schema import TTL_ATTRIBUTE

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from sqsjobs.store.codec import Item

#: A slot item outlives its lease by this much before TTL may delete it (AWS deletes within days).
SLOT_TTL_S = 3600
#: BatchGetItem takes at most this many keys.
MAX_BATCH_GET = 100

CLOSED, OPEN, HALF_OPEN = "closed", "open", "half_open"


def pause_id(job_type: str) -> str:
    """The pause item of ``job_type``."""
    return f"pause#{job_type}"


def slot_id(limit: str, slot: int, key: str | None) -> str:
    """Concurrency slot ``slot`` of ``limit`` (in the partition of ``key``, if partitioned)."""
    return f"limit#{limit}#{slot}" if key is None else f"limit#{limit}#{slot}#{key}"


def rate_id(limit: str, shard: int) -> str:
    """Start log shard ``shard`` of ``limit``."""
    return f"rate#{limit}#{shard}"


def breaker_id(limit: str) -> str:
    """The breaker item of ``limit``."""
    return f"breaker#{limit}"


def _key(item_id: str) -> dict[str, Any]:
    return {"id": av_s(item_id)}


def get(table: str, item_id: str) -> dict[str, Any]:
    """GetItem, eventually consistent (half a read unit): every read here goes through a short cache."""
    return {"TableName": table, "Key": _key(item_id)}


def batch_get(table: str, ids: Sequence[str]) -> dict[str, Any]:
    """BatchGetItem of up to ``MAX_BATCH_GET`` ids, eventually consistent."""
    return {"RequestItems": {table: {"Keys": [_key(i) for i in ids]}}}


def batch_items(table: str, response: Mapping[str, Any]) -> dict[str, Item]:
    """The items a ``batch_get`` found, by id (a missing id: no item)."""
    return {i["id"]["S"]: dict(i) for i in response.get("Responses", {}).get(table, [])}


# ── pause ─────────────────────────────────────────────────────────────────────────────────
def pause(table: str, job_type: str, *, reason: str | None, now: float) -> dict[str, Any]:
    """PutItem: the type is paused (again: the reason and time are replaced)."""
    item = {"id": av_s(pause_id(job_type)), "type": av_s(job_type), "paused_at": av_n(now)}
    if reason:
        item["reason"] = av_s(reason[:500])
    return {"TableName": table, "Item": item}


def resume(table: str, job_type: str) -> dict[str, Any]:
    """DeleteItem: the type runs again (a type that was not paused stays so)."""
    return {"TableName": table, "Key": _key(pause_id(job_type)), "ReturnValues": "ALL_OLD"}


# ── concurrency slots ─────────────────────────────────────────────────────────────────────
def slot_is_free(item: Mapping[str, Any] | None, now: float) -> bool:
    """True for a slot no one holds: no item, or a lease that ran out (its holder died or stalled)."""
    return item is None or (num_attr(item, "lease_until") or 0.0) < now


def take_slot(
    table: str, item_id: str, *, job_id: str, token: str, now: float, lease_s: float
) -> dict[str, Any]:
    """PutItem: take a free slot for ``job_id`` until ``now + lease_s``."""
    until = now + lease_s
    return {
        "TableName": table,
        "Item": {
            "id": av_s(item_id),
            "holder": av_s(job_id),
            "token": av_s(token),
            "taken_at": av_n(now),
            "lease_until": av_n(until),
            TTL_ATTRIBUTE: av_n(int(until) + SLOT_TTL_S),
        },
        "ConditionExpression": "attribute_not_exists(id) OR lease_until < :now",
        "ExpressionAttributeValues": {":now": av_n(now)},
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }


def renew_slot(table: str, item_id: str, *, token: str, now: float, lease_s: float) -> dict[str, Any]:
    """UpdateItem: extend a slot this holder (``token``) still has."""
    until = now + lease_s
    return {
        "TableName": table,
        "Key": _key(item_id),
        "ConditionExpression": "#t = :t",
        "UpdateExpression": "SET lease_until = :u, #x = :x",
        "ExpressionAttributeNames": {"#t": "token", "#x": TTL_ATTRIBUTE},
        "ExpressionAttributeValues": {
            ":t": av_s(token),
            ":u": av_n(until),
            ":x": av_n(int(until) + SLOT_TTL_S),
        },
    }


def give_back_slot(table: str, item_id: str, *, token: str) -> dict[str, Any]:
    """DeleteItem: free a slot this holder still has (a slot taken over since is left alone)."""
    return {
        "TableName": table,
        "Key": _key(item_id),
        "ConditionExpression": "#t = :t",
        "ExpressionAttributeNames": {"#t": "token"},
        "ExpressionAttributeValues": {":t": av_s(token)},
    }


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
) -> dict[str, Any]:
    """UpdateItem: append ``now`` to the log read at ``version`` (dropping what it no longer needs)."""
    kept = [*starts, now][-allowed:]
    condition = "attribute_not_exists(v)" if version == 0 else "v = :v"
    values = {":s": {"L": [av_n(round(t, 6)) for t in kept]}, ":n": av_n(version + 1), ":w": av_s(wid)}
    if version:
        values[":v"] = av_n(version)
    return {
        "TableName": table,
        "Key": _key(item_id),
        "ConditionExpression": condition,
        "UpdateExpression": "SET starts = :s, v = :n, wid = :w",
        "ExpressionAttributeValues": values,
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }


# ── breaker ───────────────────────────────────────────────────────────────────────────────
def breaker_state(item: Mapping[str, Any] | None) -> str:
    """``closed`` (also: no item), ``open`` or ``half_open``."""
    return (str_attr(item, "state") if item else None) or CLOSED


def _versioned(
    table: str, item_id: str, version: int, update: str, values: dict[str, Any], names: dict[str, str]
) -> dict[str, Any]:
    """An UpdateItem that lands only on the item as read at ``version`` (0: not created yet)."""
    condition = "attribute_not_exists(v)" if version == 0 else "v = :v"
    if version:
        values = {**values, ":v": av_n(version)}
    sets, _, removes = update.partition(" REMOVE ")
    params: dict[str, Any] = {
        "TableName": table,
        "Key": _key(item_id),
        "ConditionExpression": condition,
        "UpdateExpression": f"{sets}, v = :n" + (f" REMOVE {removes}" if removes else ""),
        "ExpressionAttributeValues": {**values, ":n": av_n(version + 1)},
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }
    if names:
        params["ExpressionAttributeNames"] = names
    return params


def become_probe(
    table: str, item_id: str, *, version: int, job_id: str, now: float, lease_s: float
) -> dict[str, Any]:
    """UpdateItem: the open breaker (read at ``version``, cooldown over) lets this one job try."""
    return _versioned(
        table, item_id, version, "SET #s = :h, probe = :p, probe_until = :u",
        {":h": av_s(HALF_OPEN), ":p": av_s(job_id), ":u": av_n(now + lease_s)}, {"#s": "state"},
    )  # fmt: skip


def record_failure(table: str, item_id: str, *, now: float) -> dict[str, Any]:
    """UpdateItem: append one failure time (unconditional: failures only add); returns the item."""
    return {
        "TableName": table,
        "Key": _key(item_id),
        "UpdateExpression": "SET failures = list_append(if_not_exists(failures, :e), :f), "
        "v = if_not_exists(v, :z) + :one",
        "ExpressionAttributeValues": {":e": {"L": []}, ":f": {"L": [av_n(round(now, 3))]}, ":z": av_n(0)}
        | {":one": av_n(1)},
        "ReturnValues": "ALL_NEW",
    }


def failures_of(item: Mapping[str, Any] | None) -> list[float]:
    """The failure times a breaker item holds."""
    if not item or "failures" not in item:
        return []
    return [float(v["N"]) for v in item["failures"]["L"]]


def open_breaker(table: str, item_id: str, *, version: int, now: float, cooldown_s: float) -> dict[str, Any]:
    """UpdateItem: open (from closed, or from half-open when its probe failed) until ``now + cooldown_s``."""
    return _versioned(
        table, item_id, version, "SET #s = :o, #u = :u, failures = :e, opened_at = :now REMOVE probe, probe_until",
        {":o": av_s(OPEN), ":u": av_n(now + cooldown_s), ":e": {"L": []}, ":now": av_n(now)},
        {"#s": "state", "#u": "until"},
    )  # fmt: skip


def close_breaker(table: str, item_id: str, *, version: int) -> dict[str, Any]:
    """UpdateItem: the probe succeeded: closed, failures forgotten."""
    return _versioned(
        table, item_id, version, "SET #s = :c, failures = :e REMOVE probe, probe_until",
        {":c": av_s(CLOSED), ":e": {"L": []}}, {"#s": "state"},
    )  # fmt: skip


def end_probe(table: str, item_id: str, *, job_id: str) -> dict[str, Any]:
    """UpdateItem: the probe ended without a verdict (released, cancelled): the next job may probe."""
    return {
        "TableName": table,
        "Key": _key(item_id),
        "ConditionExpression": "probe = :p",
        "UpdateExpression": "SET probe_until = :z",
        "ExpressionAttributeValues": {":p": av_s(job_id), ":z": av_n(0)},
    }


def renew_probe(table: str, item_id: str, *, job_id: str, now: float, lease_s: float) -> dict[str, Any]:
    """UpdateItem: the probe still runs: keep others from probing."""
    return {
        "TableName": table,
        "Key": _key(item_id),
        "ConditionExpression": "probe = :p",
        "UpdateExpression": "SET probe_until = :u",
        "ExpressionAttributeValues": {":p": av_s(job_id), ":u": av_n(now + lease_s)},
    }


def trim_failures(table: str, item_id: str, *, version: int, keep: Sequence[float]) -> dict[str, Any]:
    """UpdateItem: drop failure times that left the window (the list stays short)."""
    return _versioned(
        table, item_id, version, "SET failures = :f", {":f": {"L": [av_n(t) for t in keep]}}, {}
    )
