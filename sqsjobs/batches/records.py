"""Sans-I/O DynamoDB requests of batches: the batch record, its counter shards, and how to read them.

A batch lives in the jobs table as items whose ids hold ``#`` (the table's own items, never job ids)::

    batch#<id>          the record: callback, parent/root, children counts, status, times, shard count
    batch#<id>#<kk>     counter shard kk (00..shards-1): added, succeeded, failed, sealed

An item counts on the shard its id hashes to (``item_shard``), so the writes of a large batch spread
over ``shards`` partition keys and never funnel through one item (no partition over half its
write rate; the arithmetic is in docs/workflows-batches.md). Nothing an item does writes the record: only creation, seal, drain and
completion do, once per batch.

Items carry ``batch_key = <id>#<kk>``, the key of the sparse, keys-only ``batch_items`` index
(``store/schema.py``): written once when the item is created, never changed, so it costs one index
write unit per item and nothing after; listing a batch's items fans out over its ``shards`` keys.
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqsjobs.store.codec import (
    av_n,
    av_s,
    canonical_json,
    notify_of,
    num_attr,
    place_fields,
    str_attr,
    tags_attr,
    tags_of,
    to_datetime,
)
from sqsjobs.store.conditions import All, Compare, Exists, Fragment, Missing, eq
from sqsjobs.store.schema import BATCH, BATCH_ITEMS_INDEX, attention_key
from sqsjobs.store.write import Check, Write, new_id_only

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from datetime import datetime

    from sqsjobs.job import Notify
    from sqsjobs.store.conditions import Expr

#: Counter shards of a batch unless ``shards=`` says otherwise, and the most it may have: creation
#: and seal write every shard in one TransactWriteItems (at most 100 items, 3 of them not shards).
DEFAULT_SHARDS = 16
MAX_SHARDS = 64
#: The record's status values (``BatchStatus.status``).
OPEN = "open"
SEALED = "sealed"
COMPLETE = "complete"
#: The record's ``kind``: what tells a batch record from the table's other ``#`` items.
KIND = "batch"


def new_batch_id(dedupe_key: str | None) -> str:
    """A random id, or the one a dedupe key always names (the same key → the same batch)."""
    if dedupe_key is None:
        return uuid.uuid4().hex
    return "b" + hashlib.sha256(f"batch\0{dedupe_key}".encode()).hexdigest()[:31]


def record_id(batch_id: str) -> str:
    """The batch record's key."""
    return f"batch#{batch_id}"


def shard_id(batch_id: str, n: int) -> str:
    """Counter shard ``n``'s key."""
    return f"batch#{batch_id}#{n:02d}"


def item_shard(item_id: str, shards: int) -> int:
    """The shard an item counts on: stable, uniform over ids."""
    return int.from_bytes(hashlib.blake2b(item_id.encode(), digest_size=4).digest(), "big") % shards


def item_key(batch_id: str, item_id: str, shards: int) -> str:
    """``<batch id>#<kk>``: the item's ``batch_key`` (its shard and its index partition)."""
    return f"{batch_id}#{item_shard(item_id, shards):02d}"


def shard_of_key(batch_key: str) -> tuple[str, str]:
    """``(batch id, shard item id)`` of an item's ``batch_key``."""
    batch_id, _, kk = batch_key.rpartition("#")
    return batch_id, f"batch#{batch_id}#{kk}"


# ── the record ──────────────────────────────────────────────────────────────────────────────
@dataclass(frozen=True)
class BatchSpec:
    """What ``app.batches.create`` asks for; ``create_entries`` turns it into the creating transaction."""

    id: str
    on_complete: str
    #: The callback's queue and payload version, resolved from the registry at creation, so the
    #: completion (a worker of any type, or the sweeper) needs no handler to enqueue it.
    callback_queue: str
    callback_version: int
    final_stage: bool
    shards: int
    parent_id: str | None
    root_id: str
    max_item_failures: int | None
    dedupe_key: str | None
    now: float
    #: Told when the batch ends: its callback job carries it (``notify.plugin``).
    notify: Notify | None = None
    #: Every item added inherits them (an item's own win); not part of the configuration's identity.
    tags: Mapping[str, str] | None = None

    @property
    def config_hash(self) -> str:
        """The identity of a deduplicated batch: the same key with another configuration conflicts."""
        fields = [self.on_complete, self.final_stage, self.parent_id, self.max_item_failures, self.shards]
        return hashlib.sha256(canonical_json(fields).encode()).hexdigest()[:32]


@dataclass(frozen=True)
class BatchRecord:
    """A batch record as read (``read_record``)."""

    id: str
    status: str
    on_complete: str
    callback_queue: str
    callback_version: int
    final_stage: bool
    shards: int
    parent_id: str | None
    root_id: str
    children: int
    children_done: int
    kids: tuple[str, ...]
    max_item_failures: int | None
    created_at: datetime | None
    sealed_at: datetime | None
    drained_at: datetime | None
    completed_at: datetime | None
    failed: bool
    reason: str | None
    config_hash: str
    dedupe_key: str | None
    callback_id: str | None
    #: Counts frozen at completion (None before).
    final_counts: dict[str, int] | None
    #: Told when the batch ends: its callback job carries it.
    notify: Notify | None = None
    #: What its items inherit (``sqsjobs.store.tags``).
    tags: dict[str, str] = field(default_factory=dict)
    #: The repair entry (``attn``/``due``) while sealed and not complete.
    attn: str | None = None
    due_raw: str | None = None
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False)


def read_record(item: Mapping[str, Any]) -> BatchRecord:
    """Decode a batch record."""
    counts = item.get("counts", {}).get("M")
    max_fail = num_attr(item, "max_fail")
    return BatchRecord(
        id=item["id"]["S"].removeprefix("batch#"),
        status=item["status"]["S"],
        on_complete=item["on_complete"]["S"],
        callback_queue=item["cb_queue"]["S"],
        callback_version=int(num_attr(item, "cb_version") or 1),
        final_stage=bool(item.get("final_stage", {}).get("BOOL", False)),
        shards=int(num_attr(item, "shards") or DEFAULT_SHARDS),
        parent_id=str_attr(item, "parent"),
        root_id=item["root"]["S"],
        children=int(num_attr(item, "children") or 0),
        children_done=int(num_attr(item, "children_done") or 0),
        kids=tuple(sorted(item.get("kids", {}).get("SS", []))),
        max_item_failures=None if max_fail is None else int(max_fail),
        created_at=to_datetime(num_attr(item, "created_at")),
        sealed_at=to_datetime(num_attr(item, "sealed_at")),
        drained_at=to_datetime(num_attr(item, "drained_at")),
        completed_at=to_datetime(num_attr(item, "completed_at")),
        failed=bool(item.get("failed", {}).get("BOOL", False)),
        reason=str_attr(item, "reason"),
        config_hash=item["cfg"]["S"],
        dedupe_key=str_attr(item, "dedupe_key"),
        callback_id=str_attr(item, "callback_id"),
        final_counts=None if counts is None else {k: int(v["N"]) for k, v in counts.items()},
        notify=notify_of(item),
        tags=tags_of(item),
        attn=str_attr(item, "attn"),
        due_raw=item.get("due", {}).get("N"),
        raw=item,
    )


def create_entries(table: str, spec: BatchSpec) -> list[dict[str, Any]]:
    """The creating transaction: the record, every shard, and the parent's children count.

    The parent takes a child only while it has not drained (a drained parent has sealed its
    children already and would never seal this one): the refusal raises ``BatchSealed``.
    """
    record: dict[str, Any] = {
        "id": av_s(record_id(spec.id)),
        "kind": av_s(KIND),
        "status": av_s(OPEN),
        "on_complete": av_s(spec.on_complete),
        "cb_queue": av_s(spec.callback_queue),
        "cb_version": av_n(spec.callback_version),
        "final_stage": {"BOOL": spec.final_stage},
        "shards": av_n(spec.shards),
        "root": av_s(spec.root_id),
        "children": av_n(0),
        "children_done": av_n(0),
        "created_at": av_n(spec.now),
        "updated_at": av_n(spec.now),
        "cfg": av_s(spec.config_hash),
    }
    if spec.parent_id is not None:
        record["parent"] = av_s(spec.parent_id)
    if spec.max_item_failures is not None:
        record["max_fail"] = av_n(spec.max_item_failures)
    record |= place_fields(None, None, spec.notify)
    if spec.tags:
        record["tags"] = tags_attr(spec.tags)
    if spec.dedupe_key is not None:
        record["dedupe_key"] = av_s(spec.dedupe_key)
    entries: list[dict[str, Any]] = [{"Put": _put_new(table, record)}]
    for n in range(spec.shards):
        shard = {
            "id": av_s(shard_id(spec.id, n)),
            "kind": av_s("batch_shard"),
            "added": av_n(0),
            "succeeded": av_n(0),
            "failed": av_n(0),
            "sealed": {"BOOL": False},
        }
        entries.append({"Put": _put_new(table, shard)})
    if spec.parent_id is not None:
        values: dict[str, Any] = {":complete": av_s(COMPLETE), ":one": av_n(1), ":kid": {"SS": [spec.id]}}
        adopt = Write(
            table,
            {"id": av_s(record_id(spec.parent_id))},
            adds=(("children", ":one"), ("kids", ":kid")),
            guards=(Fragment("open_parent", _UNDRAINED, values),),
            values=values,
        )
        entries.append({"Update": adopt.update_item()})
    return entries


def _put_new(table: str, item: dict[str, Any]) -> dict[str, Any]:
    return new_id_only(table, item).put_item()


#: A batch record not complete yet; ``_UNDRAINED``: nor drained (its children may still be added).
_NOT_COMPLETE = All((Exists("id"), Compare("status", "<>", ":complete")))
_UNDRAINED = All((*_NOT_COMPLETE.parts, Missing("drained_at")))


def get_record(table: str, batch_id: str) -> dict[str, Any]:
    """GetItem of the record, strongly consistent (the completion check reads after its own write)."""
    return {"TableName": table, "Key": {"id": av_s(record_id(batch_id))}, "ConsistentRead": True}


# ── counters ────────────────────────────────────────────────────────────────────────────────
@dataclass(frozen=True)
class Counts:
    """Summed shards: what was added, what finished, and whether every shard is sealed."""

    added: int = 0
    succeeded: int = 0
    failed: int = 0
    sealed: bool = True

    @property
    def done(self) -> int:
        """Items finished (succeeded or failed)."""
        return self.succeeded + self.failed

    @property
    def pending(self) -> int:
        """Items added and not finished."""
        return max(0, self.added - self.done)

    @property
    def drained(self) -> bool:
        """Sealed everywhere and nothing pending: no item will be added or counted again."""
        return self.sealed and self.done >= self.added

    def as_dict(self) -> dict[str, int]:
        """``{"pending", "succeeded", "failed"}``: what ``BatchStatus.counts`` and the callback show."""
        return {"pending": self.pending, "succeeded": self.succeeded, "failed": self.failed}


def read_counts(items: Sequence[Mapping[str, Any]]) -> Counts:
    """Sum shard items (a shard that is missing counts as unsealed: the batch cannot be drained)."""
    return Counts(
        added=sum(int(num_attr(i, "added") or 0) for i in items),
        succeeded=sum(int(num_attr(i, "succeeded") or 0) for i in items),
        failed=sum(int(num_attr(i, "failed") or 0) for i in items),
        sealed=bool(items) and all(i.get("sealed", {}).get("BOOL", False) for i in items),
    )


def get_shard(table: str, shard: str) -> dict[str, Any]:
    """GetItem of one shard, strongly consistent: the finisher's read after its own write."""
    return {"TableName": table, "Key": {"id": av_s(shard)}, "ConsistentRead": True}


def shard_keys(batch_id: str, shards: int) -> list[dict[str, Any]]:
    """The keys of every shard of the batch (at most 64: one BatchGetItem)."""
    return [{"id": av_s(shard_id(batch_id, n))} for n in range(shards)]


def add_entry(table: str, batch_key: str) -> dict[str, Any]:
    """``ADD added 1`` on the item's shard, while the shard is not sealed (else ``BatchSealed``)."""
    _, shard = shard_of_key(batch_key)
    values: dict[str, Any] = {":false": {"BOOL": False}, ":one": av_n(1)}
    write = Write(
        table,
        {"id": av_s(shard)},
        adds=(("added", ":one"),),
        guards=(Fragment("unsealed", eq("sealed", ":false"), values),),
        values=values,
    )
    return {"Update": write.update_item()}


def count_entry(table: str, batch_key: str, field_name: str, by: int = 1) -> dict[str, Any]:
    """``count_write`` as a ``TransactWriteItems`` entry."""
    return {"Update": count_write(table, batch_key, field_name, by).update_item()}


def count_write(table: str, batch_key: str, field_name: str, by: int = 1) -> Write:
    """``ADD succeeded|failed <by>`` on the item's shard: the write a terminal write commits with."""
    _, shard = shard_of_key(batch_key)
    return Write(
        table,
        {"id": av_s(shard)},
        adds=((field_name, ":by"),),
        guards=(Fragment("shard", _EXISTS),),
        values={":by": av_n(by)},
        old_on_refusal=False,
    )


_EXISTS = Exists("id")


def seal_entries(table: str, record: BatchRecord, *, now: float, repair_at: float) -> list[dict[str, Any]]:
    """Open → sealed, and every shard sealed, in one transaction (so no shard is left taking adds).

    The record gets its repair entry (``batch`` attention, due ``repair_at``): until it completes,
    the sweeper re-checks it when due.
    """
    values = {
        ":open": av_s(OPEN),
        ":sealed": av_s(SEALED),
        ":now": av_n(now),
        ":attn": av_s(attention_key(BATCH, record_id(record.id))),
        ":due": av_n(repair_at),
    }
    sets: tuple[tuple[str, Expr], ...] = (
        ("status", ":sealed"),
        ("sealed_at", ":now"),
        ("updated_at", ":now"),
        ("attn", ":attn"),
        ("due", ":due"),
    )
    seal = Write(
        table,
        {"id": av_s(record_id(record.id))},
        sets,
        guards=(Fragment("open", eq("status", ":open"), values),),
        values=values,
    )
    entries: list[dict[str, Any]] = [{"Update": seal.update_item()}]
    entries += [_seal_shard(table, record.id, n) for n in range(record.shards)]
    return entries


def _seal_shard(table: str, batch_id: str, n: int) -> dict[str, Any]:
    write = Write(
        table,
        {"id": av_s(shard_id(batch_id, n))},
        (("sealed", ":true"),),
        values={":true": {"BOOL": True}},
        old_on_refusal=False,
    )
    return {"Update": write.update_item()}


def drain(table: str, batch_id: str, *, now: float) -> Write:
    """Mark the batch drained (its children are sealed next); once, so no child is added after."""
    return Write(
        table,
        {"id": av_s(record_id(batch_id))},
        (("drained_at", ":now"), ("updated_at", ":now")),
        guards=(Fragment("undrained", Missing("drained_at")),),
        values={":now": av_n(now)},
        old_on_refusal=False,
    )


def complete_entries(
    table: str,
    record: BatchRecord,
    counts: Counts,
    shard_items: Sequence[Mapping[str, Any]],
    *,
    callback: Mapping[str, Any],
    callback_id: str,
    now: float,
    failed: bool,
    reason: str | None,
) -> list[dict[str, Any]]:
    """The completion, exactly once: the record → complete, the callback job, the parent's count.

    Conditional on the record not being complete yet (two workers that both detect completion:
    one transaction wins, the other is cancelled whole, so one callback). A regular completion
    also requires every shard unchanged since it was read (a replay that moved an item back to
    pending in between cancels it); an early one (failed, cancelled) seals every shard instead.
    """
    values: dict[str, Any] = {
        ":complete": av_s(COMPLETE),
        ":now": av_n(now),
        ":failed": {"BOOL": failed},
        ":counts": {"M": {k: av_n(v) for k, v in counts.as_dict().items()}},
        ":cb": av_s(callback_id),
    }
    sets: tuple[tuple[str, Expr], ...] = (
        ("status", ":complete"),
        ("completed_at", ":now"),
        ("updated_at", ":now"),
        ("failed", ":failed"),
        ("counts", ":counts"),
        ("callback_id", ":cb"),
    )
    if reason:
        sets += (("reason", ":reason"),)
        values[":reason"] = av_s(reason)
    completion = Write(
        table,
        {"id": av_s(record_id(record.id))},
        sets,
        ("attn", "due"),
        guards=(Fragment("not_complete", _NOT_COMPLETE, values),),
        values=values,
    )
    entries: list[dict[str, Any]] = [{"Update": completion.update_item()}, {"Put": dict(callback)}]
    if failed:
        entries += [_seal_shard(table, record.id, n) for n in range(record.shards)]
    else:
        for item in shard_items:
            unchanged = {
                ":true": {"BOOL": True},
                ":a": item["added"],
                ":s": item["succeeded"],
                ":f": item["failed"],
            }
            check = Check(table, {"id": item["id"]}, (Fragment("unchanged", _SHARD_UNCHANGED, unchanged),))
            entries.append({"ConditionCheck": check.transact_item()})
    if record.parent_id is not None:
        done = Write(
            table,
            {"id": av_s(record_id(record.parent_id))},
            adds=(("children_done", ":one"),),
            values={":one": av_n(1)},
            old_on_refusal=False,
        )
        entries.append({"Update": done.update_item()})
    return entries


#: A sealed shard with the counts the completion read.
_SHARD_UNCHANGED = All((eq("sealed", ":true"), eq("added", ":a"), eq("succeeded", ":s"), eq("failed", ":f")))


def push_repair(table: str, record: BatchRecord, *, next_due: float) -> Write:
    """The sweeper checked a batch that is not complete yet: its entry is due again later (unchanged-entry condition)."""
    values = {":attn": av_s(record.attn or ""), ":due": {"N": record.due_raw or "0"}, ":next": av_n(next_due)}
    return Write(
        table,
        {"id": av_s(record_id(record.id))},
        (("due", ":next"),),
        guards=(Fragment("same_entry", _SAME_ENTRY, values),),
        values=values,
        old_on_refusal=False,
    )


_SAME_ENTRY = All((eq("attn", ":attn"), eq("due", ":due")))


def query_items(table: str, batch_key: str, start_key: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The item ids in one partition of the ``batch_items`` index (keys only)."""
    params: dict[str, Any] = {
        "TableName": table,
        "IndexName": BATCH_ITEMS_INDEX,
        "KeyConditionExpression": "batch_key = :k",
        "ExpressionAttributeValues": {":k": av_s(batch_key)},
    }
    if start_key:
        params["ExclusiveStartKey"] = dict(start_key)
    return params


#: Where ``batches list`` finds batch records: their own partitions of the ``batch_items`` index.
LIST_SHARDS = 8


def list_key(batch_id: str) -> str:
    """The ``batch_key`` a batch record carries, so ``batches list`` can find it (``list#kk``)."""
    return f"list#{item_shard(batch_id, LIST_SHARDS):02d}"
