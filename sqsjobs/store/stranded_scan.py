"""The requests of the stranded-record audit (``sqsjobs doctor --stranded``): one parallel Scan, sans-I/O.

The audit looks for records that break the witness rule (``sqsjobs.job.WITNESSES``): not terminal,
no ``attention`` entry, and nothing else that will bring them back. Only a Scan can see every
record (the one index holds only records that need attention), so one Scan segment per worker
thread reads the table, eventually consistent (half the read units of a strong read), and a filter
keeps only unfinished records without an entry; the time bounds are applied by the caller
(``sqsjobs.ops.stranded``), which knows the settings. A filter does not lower what a Scan costs:
DynamoDB bills every item it reads, whole (docs/lifecycle.md, "Finding stranded records").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqsjobs.job import TERMINAL, JobStatus
from sqsjobs.store.codec import av_s, num_attr, str_attr

if TYPE_CHECKING:
    from collections.abc import Mapping

#: Unfinished states: the ones that need a witness.
UNFINISHED = tuple(s for s in JobStatus if s not in TERMINAL)
#: The attributes the audit reads of each record it keeps.
_NAMES = {
    "#id": "id",
    "#s": "status",
    "#t": "type",
    "#q": "queue",
    "#r": "run_at",
    "#l": "lease_expires",
    "#u": "updated_at",
    "#c": "chain_id",
    "#n": "chain_step",
    "#a": "attn",
}


@dataclass(frozen=True)
class Unwitnessed:
    """An unfinished record without an attention entry, as the Scan returned it."""

    id: str
    status: JobStatus
    type: str
    queue: str
    run_at: float | None
    lease_expires: float | None
    updated_at: float | None
    chain_id: str | None
    chain_step: int | None


def scan_request(
    table: str, *, segment: int, segments: int, start: Mapping[str, Any] | None
) -> dict[str, Any]:
    """One page of segment ``segment`` of ``segments``: unfinished records with no ``attention`` entry."""
    statuses = {f":s{i}": av_s(s) for i, s in enumerate(UNFINISHED)}
    request: dict[str, Any] = {
        "TableName": table,
        "Segment": segment,
        "TotalSegments": segments,
        "ConsistentRead": False,
        "ProjectionExpression": "#id, #s, #t, #q, #r, #l, #u, #c, #n",
        "FilterExpression": f"#s IN ({', '.join(statuses)}) AND attribute_not_exists(#a)",
        "ExpressionAttributeNames": _NAMES,
        "ExpressionAttributeValues": statuses,
        "ReturnConsumedCapacity": "TOTAL",
    }
    if start:
        request["ExclusiveStartKey"] = dict(start)
    return request


def unwitnessed(item: Mapping[str, Any]) -> Unwitnessed:
    """Read one item of a page."""
    step = num_attr(item, "chain_step")
    return Unwitnessed(
        id=str_attr(item, "id") or "?",
        status=JobStatus(str_attr(item, "status") or ""),
        type=str_attr(item, "type") or "?",
        queue=str_attr(item, "queue") or "?",
        run_at=num_attr(item, "run_at"),
        lease_expires=num_attr(item, "lease_expires"),
        updated_at=num_attr(item, "updated_at"),
        chain_id=str_attr(item, "chain_id"),
        chain_step=None if step is None else int(step),
    )
