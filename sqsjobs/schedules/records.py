"""A schedule's item in the jobs table, and one builder per write (sans-I/O).

Every schedule, declared or made at runtime, has one small control item that says what it last did.
Like the other control items it lives under an id with ``#`` (no job id has one) and carries no
``type``, ``status`` or ``attn``: no attention entry, and job listings and ``stats`` never count it::

    schedule#<fire key>   kind, name, tenant, expression, timezone, job, payload, overlap, catchup_s,
                          state, created_at, paused_at, resumed_at          (a runtime schedule's)
                          last_slot, last_job, last_fired_at, buffered, fires, skipped, missed, v

The fire key is what a fire's ``fire`` field names: a declared schedule's name, or ``~<tenant>.<name>``
for one made at runtime (``~`` is not a schedule-name character, so the two never meet). A runtime
schedule's item also carries ``tag`` = ``schedule#<tenant>`` and ``tagged_at``: it is found by a Query
of the keys-only ``tags`` index, per tenant, without a scan (1 index write unit when it is made;
later writes change neither key, so they write no index entry).

Every item is far under 1 KB: each write below is one write unit, each strongly consistent read one
read unit. A fire's turn is taken with a write conditional on the version read (``v``), so two fires
racing for one schedule decide one after the other.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from sqsjobs.store import batched
from sqsjobs.store.codec import av_n, av_s, num_attr, str_attr
from sqsjobs.store.conditions import AnyOf, Compare, Exists, Fragment, IfNotExists, Missing, Plus, eq
from sqsjobs.store.schema import TAG, TAGGED_AT, TAGS_INDEX
from sqsjobs.store.write import Delete, Put, Write, new_id_only

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from sqsjobs._aws import Flow
    from sqsjobs.store.codec import Item

PREFIX = "schedule#"
#: Marks a runtime schedule's fire key (not one of Scheduler's name characters).
RUNTIME_MARK = "~"
ACTIVE, PAUSED = "active", "paused"


def item_id(fire_key: str) -> str:
    """The item of the schedule whose fires name ``fire_key``."""
    return f"{PREFIX}{fire_key}"


def runtime_name(tenant: str | None, name: str) -> str:
    """The Scheduler schedule's name: ``<tenant>.<name>`` (``.<name>`` without a tenant)."""
    return f"{tenant or ''}.{name}"


def runtime_key(tenant: str | None, name: str) -> str:
    """A runtime schedule's fire key: ``~<tenant>.<name>``."""
    return RUNTIME_MARK + runtime_name(tenant, name)


def is_runtime(fire_key: str) -> bool:
    """True for a runtime schedule's fire key."""
    return fire_key.startswith(RUNTIME_MARK)


def split_key(fire_key: str) -> tuple[str | None, str]:
    """``(tenant, name)`` of a runtime fire key (or of its Scheduler name)."""
    tenant, _, name = fire_key.removeprefix(RUNTIME_MARK).partition(".")
    return tenant or None, name


def tenant_tag(tenant: str | None) -> str:
    """The ``tags`` index partition of a tenant's runtime schedules."""
    return f"{PREFIX}{tenant or ''}"


def _key(fire_key: str) -> dict[str, Any]:
    return {"id": av_s(item_id(fire_key))}


def get(table: str, fire_key: str) -> dict[str, Any]:
    """GetItem, strongly consistent (a fire decides on what the last fire wrote)."""
    return {"TableName": table, "Key": _key(fire_key), "ConsistentRead": True}


def batch_get(table: str, fire_keys: Sequence[str]) -> Flow[dict[str, Item]]:
    """The items of these schedules, by fire key (a missing one: no item)."""
    items = yield from batched.get_items(table, [_key(k) for k in fire_keys])
    return {i["id"]["S"].removeprefix(PREFIX): dict(i) for i in items}


def query_tenant(table: str, tenant: str | None, start: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A Query of one tenant's runtime schedules in the keys-only ``tags`` index, oldest first."""
    params: dict[str, Any] = {
        "TableName": table,
        "IndexName": TAGS_INDEX,
        "KeyConditionExpression": "#t = :t",
        "ExpressionAttributeNames": {"#t": TAG},
        "ExpressionAttributeValues": {":t": av_s(tenant_tag(tenant))},
    }
    if start:
        params["ExclusiveStartKey"] = dict(start)
    return params


# ── definition ─────────────────────────────────────────────────────────────────────────────
def definition(
    *,
    expression: str,
    timezone: str,
    job: str,
    payload: Any,
    overlap: str,
    catchup_s: float | None,
) -> dict[str, Any]:
    """The attributes a runtime schedule's definition is kept in (no ``catchup_s``: no window)."""
    attrs = {
        "expression": av_s(expression),
        "timezone": av_s(timezone),
        "job": av_s(job),
        "payload": av_s(json.dumps(payload, separators=(",", ":"), sort_keys=True)),
        "overlap": av_s(overlap),
    }
    if catchup_s is not None:
        attrs["catchup_s"] = av_n(catchup_s)
    return attrs


def create(
    table: str, tenant: str | None, name: str, attrs: Mapping[str, Any], *, paused: bool, now: float
) -> Put:
    """PutItem: a new runtime schedule's item (refused if one of that tenant and name exists)."""
    item: dict[str, Any] = {
        "id": av_s(item_id(runtime_key(tenant, name))),
        "kind": av_s("runtime"),
        "name": av_s(name),
        **attrs,
        "state": av_s(PAUSED if paused else ACTIVE),
        "created_at": av_n(now),
        "fires": av_n(0),
        "skipped": av_n(0),
        "missed": av_n(0),
        "v": av_n(1),
        TAG: av_s(tenant_tag(tenant)),
        TAGGED_AT: av_n(now),
    }
    if tenant:
        item["tenant"] = av_s(tenant)
    if paused:
        item["paused_at"] = av_n(now)
    return new_id_only(table, item)


_EXISTS = Fragment("exists", Exists("id"))


def redefine(table: str, fire_key: str, attrs: Mapping[str, Any]) -> Write:
    """UpdateItem: a runtime schedule's new definition (its history is kept)."""
    names = tuple(sorted(attrs))
    values = {f":{n}": attrs[n] for n in names}
    return Write(
        table,
        _key(fire_key),
        tuple((n, f":{n}") for n in names),
        () if "catchup_s" in attrs else ("catchup_s",),
        guards=(_EXISTS,),
        values=values,
        returns="ALL_NEW",
    )


def set_state(table: str, fire_key: str, *, paused: bool, now: float) -> Write:
    """UpdateItem: pause (``paused_at``) or resume (``resumed_at``); the item as it was on refusal."""
    values = {":s": av_s(PAUSED if paused else ACTIVE), ":now": av_n(now)}
    when = "paused_at" if paused else "resumed_at"
    return Write(table, _key(fire_key), (("state", ":s"), (when, ":now")), guards=(_EXISTS,), values=values)


def delete(table: str, fire_key: str) -> Delete:
    """DeleteItem: the schedule's item, returned as it was."""
    return Delete(table, _key(fire_key), returns="ALL_OLD")


# ── fires ──────────────────────────────────────────────────────────────────────────────────
def version_of(item: Mapping[str, Any] | None) -> int:
    """The item's version (0: no item yet)."""
    return int(num_attr(item, "v") or 0) if item else 0


_UNWRITTEN = Fragment("unwritten", Missing("v"))
_AT_VERSION = eq("v", ":v")
_OLDER = AnyOf((Missing("last_slot"), Compare("last_slot", "<", ":slot")))
_FIRES = (("fires", ":one"),)


def _at(version: int) -> Fragment:
    return _UNWRITTEN if version == 0 else Fragment("at_version", _AT_VERSION, {":v": av_n(version)})


def take_turn(
    table: str, fire_key: str, *, version: int, slot: float, job_id: str, now: float, name: str
) -> Write:
    """UpdateItem: the occurrence ``slot`` made ``job_id``; lands only on the item as read at ``version``.

    A declared schedule's first fire makes its item (version 0: none yet); a runtime schedule's item
    exists from its creation, so a version of 0 there is never read for a schedule still defined.
    """
    values = {
        ":slot": av_n(slot),
        ":job": av_s(job_id),
        ":now": av_n(now),
        ":nv": av_n(version + 1),
        ":one": av_n(1),
        ":name": av_s(name),
    }
    return Write(
        table,
        _key(fire_key),
        (
            ("last_slot", ":slot"),
            ("last_job", ":job"),
            ("last_fired_at", ":now"),
            ("v", ":nv"),
            ("name", IfNotExists("name", ":name")),
        ),
        ("buffered",),
        _FIRES,
        guards=(_at(version),),
        values=values,
    )


def record_fire(table: str, fire_key: str, *, slot: float, job_id: str, now: float, name: str) -> Write:
    """UpdateItem: an ``allow_all`` fire made ``job_id`` (no read before; an older slot does not go back)."""
    values = {
        ":slot": av_n(slot),
        ":job": av_s(job_id),
        ":now": av_n(now),
        ":one": av_n(1),
        ":zero": av_n(0),
        ":name": av_s(name),
    }
    return Write(
        table,
        _key(fire_key),
        (
            ("last_slot", ":slot"),
            ("last_job", ":job"),
            ("last_fired_at", ":now"),
            ("v", Plus(IfNotExists("v", ":zero"), "+", ":one")),
            ("name", IfNotExists("name", ":name")),
        ),
        adds=_FIRES,
        guards=(Fragment("older", _OLDER, {":slot": av_n(slot)}),),
        values=values,
    )


def buffer(table: str, fire_key: str, *, version: int, slot: float) -> Write:
    """UpdateItem: occurrence ``slot`` waits behind the running job (``buffer_one``)."""
    values = {":b": av_n(slot), ":nv": av_n(version + 1)}
    return Write(
        table, _key(fire_key), (("buffered", ":b"), ("v", ":nv")), guards=(_at(version),), values=values
    )


def count(table: str, fire_key: str, what: str, n: int, *, runtime: bool) -> Write:
    """UpdateItem: ``n`` more occurrences ``skipped`` (overlap) or ``missed`` (past the catch-up window).

    A runtime schedule's count lands only on its item (a schedule deleted meanwhile stays deleted).
    """
    values = {":n": av_n(n)}
    return Write(
        table, _key(fire_key), adds=((what, ":n"),), guards=(_EXISTS,) if runtime else (), values=values
    )


# ── reading ────────────────────────────────────────────────────────────────────────────────
def payload_of(item: Mapping[str, Any]) -> Any:
    """A runtime schedule's payload."""
    text = str_attr(item, "payload")
    return json.loads(text) if text else None


def last_slot(item: Mapping[str, Any] | None) -> float | None:
    """The latest occurrence that made a job."""
    return num_attr(item, "last_slot") if item else None
