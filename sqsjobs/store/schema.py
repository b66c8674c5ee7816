"""The jobs table, its indexes, and the sweeper's reads of them (sans-I/O).

``st``/``due`` feed the ``by_status`` index the sweeper and operators query: ``st`` is the status,
or ``held`` for a runnable record whose SQS message has not been sent yet (far-future jobs, retries
beyond the 12 h visibility cap); ``due`` is ``run_at`` for runnable jobs, ``lease_expires`` for
running ones and ``finished_at`` for finished ones. ``by_type``, ``by_queue`` and ``by_tenant``
list jobs newest first for operators.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqsjobs.store.codec import WRITE_ID, av_n, av_s, nonce, shows_own_write

if TYPE_CHECKING:
    from collections.abc import Mapping

    from sqsjobs.errors import StoreError
    from sqsjobs.store.codec import Item

STATUS_INDEX = "by_status"
#: Operator listing indexes (``sqsjobs jobs list --type/--queue/--tenant``), newest ``created_at`` first.
#: Their keys and projected attributes never change after the PutItem, so each costs one index
#: write per job at enqueue and none per transition; ``by_tenant`` is sparse (only jobs with a tenant).
TYPE_INDEX = "by_type"
QUEUE_INDEX = "by_queue"
TENANT_INDEX = "by_tenant"
#: Attributes the ``by_status`` entries carry besides their keys. Each one changes only together with
#: ``st`` or ``due`` (both index keys, so the entry is rewritten anyway), so listing by status needs
#: no read of the table and the projection adds no write units.
STATUS_PROJECTION = (
    "type", "queue", "run_at", "tenant", "status", "created_at", "attempt", "max_attempts", "reason",
)  # fmt: skip
#: Immutable attributes the listing indexes carry, so ``--type T --queue Q`` filters in the index.
_DIMENSIONS = ("type", "queue", "tenant")
HELD = "held"
#: Finished records carry their deletion time (epoch seconds) here; the table's TTL attribute.
TTL_ATTRIBUTE = "expires_at"


# ── sweeper ──────────────────────────────────────────────────────────────────────────────────
def query_due(
    table: str, st: str, *, due_before: float, limit: int = 100, start_key: Item | None = None
) -> dict[str, Any]:
    """Records in index partition ``st`` whose ``due`` is at or before ``due_before``, oldest first."""
    params: dict[str, Any] = {
        "TableName": table,
        "IndexName": STATUS_INDEX,
        "KeyConditionExpression": "st = :st AND due <= :before",
        "ExpressionAttributeValues": {":st": av_s(st), ":before": av_n(due_before)},
        "Limit": limit,
    }
    if start_key:
        params["ExclusiveStartKey"] = start_key
    return params


@dataclass(frozen=True)
class DueRecord:
    """An index entry the sweeper acts on."""

    id: str
    type: str
    queue: str
    st: str
    due: float
    run_at: float
    #: ``due`` exactly as stored, for the unchanged-entry condition.
    due_raw: str


def due_records(response: Mapping[str, Any]) -> list[DueRecord]:
    """Decode a ``query_due`` page."""
    return [
        DueRecord(
            id=i["id"]["S"],
            type=i["type"]["S"],
            queue=i["queue"]["S"],
            st=i["st"]["S"],
            due=float(i["due"]["N"]),
            run_at=float(i.get("run_at", i["due"])["N"]),
            due_raw=i["due"]["N"],
        )
        for i in response.get("Items", [])
    ]


def mark_dispatched(table: str, record: DueRecord, *, now: float, next_check: float) -> dict[str, Any]:
    """Before the sweeper sends a hint: move ``due`` on (and ``held`` → runnable) so no sweep repeats it.

    Conditional on the index entry being unchanged, so two sweepers never both send.
    """
    values: dict[str, Any] = {
        ":st": av_s(record.st),
        ":due": {"N": record.due_raw},
        ":next": av_n(next_check),
        ":now": av_n(now),
        ":wid": av_s(nonce()),
    }
    set_expr = f"due = :next, updated_at = :now, {WRITE_ID} = :wid"
    names: dict[str, str] = {}
    if record.st == HELD:
        # A held record becomes visible to the normal re-dispatch check under its real status.
        set_expr += ", st = #status"
        names["#status"] = "status"
    params: dict[str, Any] = {
        "TableName": table,
        "Key": {"id": av_s(record.id)},
        "ConditionExpression": "st = :st AND due = :due",
        "UpdateExpression": f"SET {set_expr}",
        "ExpressionAttributeValues": values,
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }
    if names:
        params["ExpressionAttributeNames"] = names
    return params


def dispatch_landed(params: Mapping[str, Any], error: StoreError) -> bool:
    """True when a refused ``mark_dispatched`` met its own earlier try (a retry after a lost answer)."""
    return shows_own_write(params, error)


def _listing_index(name: str, hash_key: str) -> dict[str, Any]:
    return {
        "IndexName": name,
        "KeySchema": [
            {"AttributeName": hash_key, "KeyType": "HASH"},
            {"AttributeName": "created_at", "KeyType": "RANGE"},
        ],
        "Projection": {
            "ProjectionType": "INCLUDE",
            "NonKeyAttributes": [a for a in _DIMENSIONS if a != hash_key],
        },
    }


def table_definition(table: str) -> dict[str, Any]:
    """CreateTable: on-demand, keyed by id, with the ``by_status`` index and the listing indexes."""
    return {
        "TableName": table,
        "BillingMode": "PAY_PER_REQUEST",
        "KeySchema": [{"AttributeName": "id", "KeyType": "HASH"}],
        "AttributeDefinitions": [
            {"AttributeName": "id", "AttributeType": "S"},
            {"AttributeName": "st", "AttributeType": "S"},
            {"AttributeName": "due", "AttributeType": "N"},
            {"AttributeName": "type", "AttributeType": "S"},
            {"AttributeName": "queue", "AttributeType": "S"},
            {"AttributeName": "tenant", "AttributeType": "S"},
            {"AttributeName": "created_at", "AttributeType": "N"},
        ],
        "GlobalSecondaryIndexes": [
            {
                "IndexName": STATUS_INDEX,
                "KeySchema": [
                    {"AttributeName": "st", "KeyType": "HASH"},
                    {"AttributeName": "due", "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "INCLUDE", "NonKeyAttributes": list(STATUS_PROJECTION)},
            },
            _listing_index(TYPE_INDEX, "type"),
            _listing_index(QUEUE_INDEX, "queue"),
            _listing_index(TENANT_INDEX, "tenant"),
        ],
    }
