"""The jobs table, its one sparse index, and the sweeper's reads of it (sans-I/O).

The happy path writes no index (docs/scale.md): a job enqueued, claimed and finished touches only
its own item, keyed by a random or hashed id, so table writes spread over every partition. Only
records that need attention get the two attributes the ``attention`` index is keyed on::

    attn = "<kind>#<shard>"   kind: held | pending | dead      shard: 00..31 from the job id
    due  = epoch seconds       held: run_at   pending: when to re-send   dead: finished_at

- ``held``: runnable, but no SQS message was sent (``run_at`` beyond the 15 min delay cap, or a retry
  beyond the 12 h visibility cap). The sweeper sends it when it is within 15 minutes of due.
- ``pending``: a hint was sent by an operator's replay or by the sweeper; if no claim took the job by
  ``due`` (the hint was lost), the sweeper sends another. The claim removes the marker. A run about
  to outlive its message gets one too, due when its lease would lapse (``store/outlived.py``).
- ``dead``: listed by ``sqsjobs jobs list --status dead``, newest first.

Shards keep any one index partition far below DynamoDB's 1,000 writes/s per partition key value:
the arithmetic for 10,000 jobs/s is in docs/lifecycle.md. The index projects only the small
attributes a listing shows (``LISTED``), never the payload or the error: an entry then costs one
write unit where a full copy of a dead record would cost three, and the sweeper reads the few
records it sends (read units are five times cheaper than write units).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqsjobs.store.codec import WRITE_ID, av_n, av_s, nonce
from sqsjobs.store.conditions import All, eq
from sqsjobs.store.write import Write

if TYPE_CHECKING:
    from collections.abc import Mapping

    from sqsjobs.store.codec import Item

ATTENTION_INDEX = "attention"
#: Partitions per kind: 10,000 jobs/s all held would put 313 writes/s on each (31 % of a partition).
ATTENTION_SHARDS = 32
HELD = "held"
PENDING = "pending"
DEAD = "dead"
#: A batch record sealed but not complete (``sqsjobs.batches``): the sweeper re-checks it when due, so a
#: crash between an item's finish and its completion check (or a drain and the sealing of the
#: children) is repaired within a sweep.
BATCH = "batch"
ATTENTION_KINDS = (HELD, PENDING, DEAD, BATCH)
#: The sparse index of batch items: keyed on ``batch_key`` = ``<batch id>#<shard>`` (write-sharded,
#: immutable: one index write unit when an item is created, none after), keys only. Plain jobs
#: have no ``batch_key`` and write nothing to it.
BATCH_ITEMS_INDEX = "batch_items"
BATCH_KEY = "batch_key"
#: The sparse, keys-only index of tag items (``store/tags.py``): ``tag`` = ``<name>=<value>``, ``tagged_at``
#: = the job's ``created_at``. Only tag items carry them: a job with no tags writes nothing to it.
TAGS_INDEX = "tags"
TAG = "tag"
TAGGED_AT = "tagged_at"
#: Finished records carry their deletion time (epoch seconds) here; the table's TTL attribute.
TTL_ATTRIBUTE = "expires_at"
#: What the attention index carries besides its keys: the columns of ``sqsjobs jobs list``.
LISTED = (
    "type",
    "queue",
    "status",
    "tenant",
    "attempt",
    "max_attempts",
    "created_at",
    "updated_at",
    "finished_at",
    "run_at",
    "reason",
)
#: Indexes of the first table layout (sqsjobs 0.1): every job wrote them (13 write units per job).
LEGACY_INDEXES = frozenset({"by_status", "by_type", "by_queue", "by_tenant"})


def shard(job_id: str) -> int:
    """The job's attention shard: stable, and uniform over ids (uuid4 hex or hashed keys alike)."""
    return int.from_bytes(hashlib.blake2b(job_id.encode(), digest_size=4).digest(), "big") % ATTENTION_SHARDS


def attention_key(kind: str, job_id: str) -> str:
    """``held#07``: the index partition a record of ``kind`` lives in."""
    return f"{kind}#{shard(job_id):02d}"


def attention_partitions(kind: str) -> list[str]:
    """Every partition of ``kind``, for a query that fans out over the shards."""
    return [f"{kind}#{n:02d}" for n in range(ATTENTION_SHARDS)]


# ── sweeper ──────────────────────────────────────────────────────────────────────────────────
def query_due(
    table: str, partition: str, *, due_before: float, limit: int = 100, start_key: Item | None = None
) -> dict[str, Any]:
    """Records in attention partition ``partition`` whose ``due`` is at or before ``due_before``, oldest first."""
    params: dict[str, Any] = {
        "TableName": table,
        "IndexName": ATTENTION_INDEX,
        "KeyConditionExpression": "attn = :attn AND due <= :before",
        "ExpressionAttributeValues": {":attn": av_s(partition), ":before": av_n(due_before)},
        "Limit": limit,
    }
    if start_key:
        params["ExclusiveStartKey"] = start_key
    return params


@dataclass(frozen=True)
class DueRecord:
    """An attention entry the sweeper acts on (its keys and ``LISTED`` attributes)."""

    id: str
    #: ``held#07`` or ``pending#07``.
    attn: str
    due: float
    run_at: float
    #: ``due`` exactly as stored, for the unchanged-entry condition.
    due_raw: str


def due_records(response: Mapping[str, Any]) -> list[DueRecord]:
    """Decode a ``query_due`` page."""
    return [
        DueRecord(
            id=i["id"]["S"],
            attn=i["attn"]["S"],
            due=float(i["due"]["N"]),
            run_at=float(i.get("run_at", i["due"])["N"]),
            due_raw=i["due"]["N"],
        )
        for i in response.get("Items", [])
    ]


#: The attention entry is still the one the sweeper read.
UNCHANGED_ENTRY = All((eq("attn", ":attn"), eq("due", ":due")))


def mark_dispatched(table: str, record: DueRecord, *, now: float, recheck_at: float) -> Write:
    """Before the sweeper sends a hint: the entry becomes ``pending`` until ``recheck_at``.

    Conditional on the entry being unchanged, so two sweepers never both send; if the hint is lost,
    the next sweep after ``recheck_at`` sends another, and the claim the hint brings removes it. A
    refusal that shows this write's own ``wid`` is its own earlier try (``store/apply.py`` reads it as landed).
    """
    sets: tuple[tuple[str, str], ...] = (
        ("attn", ":pending"),
        ("due", ":next"),
        ("updated_at", ":now"),
        (WRITE_ID, ":wid"),
    )
    values = {
        ":pending": av_s(attention_key(PENDING, record.id)),
        ":next": av_n(recheck_at),
        ":now": av_n(now),
        ":wid": av_s(nonce()),
    }
    entry = {":attn": av_s(record.attn), ":due": {"N": record.due_raw}}
    return Write(table, {"id": av_s(record.id)}, sets, values=values).guard(
        "unchanged_entry", UNCHANGED_ENTRY, entry
    )


def table_definition(table: str) -> dict[str, Any]:
    """CreateTable: on-demand, keyed by id, with the sparse ``attention``, ``batch_items`` and ``tags`` indexes."""
    return {
        "TableName": table,
        "BillingMode": "PAY_PER_REQUEST",
        "KeySchema": [{"AttributeName": "id", "KeyType": "HASH"}],
        "AttributeDefinitions": [
            {"AttributeName": "id", "AttributeType": "S"},
            {"AttributeName": "attn", "AttributeType": "S"},
            {"AttributeName": "due", "AttributeType": "N"},
            {"AttributeName": BATCH_KEY, "AttributeType": "S"},
            {"AttributeName": TAG, "AttributeType": "S"},
            {"AttributeName": TAGGED_AT, "AttributeType": "N"},
        ],
        "GlobalSecondaryIndexes": [
            {
                "IndexName": ATTENTION_INDEX,
                "KeySchema": [
                    {"AttributeName": "attn", "KeyType": "HASH"},
                    {"AttributeName": "due", "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "INCLUDE", "NonKeyAttributes": list(LISTED)},
            },
            {
                "IndexName": BATCH_ITEMS_INDEX,
                "KeySchema": [{"AttributeName": BATCH_KEY, "KeyType": "HASH"}],
                "Projection": {"ProjectionType": "KEYS_ONLY"},
            },
            {
                "IndexName": TAGS_INDEX,
                "KeySchema": [
                    {"AttributeName": TAG, "KeyType": "HASH"},
                    {"AttributeName": TAGGED_AT, "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "KEYS_ONLY"},
            },
        ],
    }
