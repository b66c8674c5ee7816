"""Find jobs: one record by id, and listings served by indexes, never by a table scan.

Which index serves a listing::

    --status S (+ any filter)   by_status, partition S (and ``held`` for queued/retry_scheduled),
                                newest ``due`` first: finished_at for finished jobs, run_at for
                                waiting ones, lease expiry for running ones; other filters are
                                FilterExpressions on projected attributes, so no table read.
    --tenant X                  by_tenant (sparse), newest created_at first
    --type T                    by_type, newest created_at first
    --queue Q                   by_queue, newest created_at first
    (no filter)                 by_queue, every queue of the App, merged

The listing indexes carry only immutable attributes (no write per transition), so their rows are
completed with one BatchGetItem per page. Several index partitions are merged newest first with
a per-partition position; the cursor is that set of positions, so a page never repeats or skips
a job that stays put. GSIs are eventually consistent on AWS: a job that just changed may show its
previous status for a moment.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn

import tenacity

from sqsjobs._aws import Call, Flow, retrying
from sqsjobs.errors import CursorError as CursorError  # re-exported: its old home
from sqsjobs.errors import StoreError
from sqsjobs.job import JobStatus
from sqsjobs.ops._common import app_queues, iso
from sqsjobs.store import requests as rq

if TYPE_CHECKING:
    from collections.abc import Mapping

    from sqsjobs.config import Settings
    from sqsjobs.job import Job
    from sqsjobs.registry import Registry

#: BatchGetItem takes at most 100 keys.
#: https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_BatchGetItem.html
MAX_BATCH_GET = 100
#: Rows per page when the caller does not say.
DEFAULT_LIMIT = 50
#: A page holds at most this many rows (one BatchGetItem).
MAX_LIMIT = MAX_BATCH_GET
#: Attempts at the keys a BatchGetItem left unprocessed (throttling) before giving up.
UNPROCESSED_RETRIES = 5
_CURSOR_VERSION = 1
_DONE = "done"
_ROW_ATTRS = (
    "id", "type", "queue", "status", "tenant", "attempt", "max_attempts", "created_at", "updated_at",
    "finished_at", "run_at", "reason",
)  # fmt: skip


@dataclass(frozen=True)
class ListQuery:
    """Filters of ``jobs list``; ``since_s`` limits to jobs whose listing time is that recent."""

    status: JobStatus | None = None
    type: str | None = None
    queue: str | None = None
    tenant: str | None = None
    since_s: float | None = None
    limit: int = DEFAULT_LIMIT
    cursor: str | None = None


@dataclass(frozen=True)
class JobRow:
    """One line of a listing."""

    id: str
    status: str
    type: str
    queue: str
    tenant: str | None
    attempt: int | None
    max_attempts: int | None
    created_at: float | None
    #: The time the listing is ordered by: ``due`` for status listings, else the last update.
    at: float | None
    reason: str | None

    def to_dict(self) -> dict[str, Any]:
        """JSON form (ISO timestamps)."""
        return {
            "id": self.id,
            "status": self.status,
            "type": self.type,
            "queue": self.queue,
            "tenant": self.tenant,
            "attempt": self.attempt,
            "max_attempts": self.max_attempts,
            "created_at": iso(self.created_at),
            "at": iso(self.at),
            "reason": self.reason,
        }


@dataclass
class JobPage:
    """A page of rows and the cursor of the next one (None at the end)."""

    rows: list[JobRow]
    next_cursor: str | None
    #: The index that served it, e.g. ``by_status``.
    index: str
    partitions: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Plan:
    index: str
    hash_attr: str
    range_attr: str
    #: Partition key values to merge.
    partitions: list[str]
    filters: dict[str, str]
    since: float | None


def plan(registry: Registry, query: ListQuery, now: float) -> _Plan:
    """Pick the index that serves ``query``; the other filters become FilterExpressions."""
    since = now - query.since_s if query.since_s is not None else None
    dims = {"type": query.type, "queue": query.queue, "tenant": query.tenant}
    if query.status is not None:
        parts = [query.status.value]
        filters = {k: v for k, v in dims.items() if v}
        if query.status in (JobStatus.QUEUED, JobStatus.RETRY_SCHEDULED):
            # Held records (far-future jobs, long retries) keep their status but sit under ``held``.
            parts.append(rq.HELD)
            filters["status"] = query.status.value
        return _Plan(rq.STATUS_INDEX, "st", "due", parts, filters, since)
    for index, attr in ((rq.TENANT_INDEX, "tenant"), (rq.TYPE_INDEX, "type"), (rq.QUEUE_INDEX, "queue")):
        value = dims[attr]
        if value:
            filters = {k: v for k, v in dims.items() if v and k != attr}
            return _Plan(index, attr, "created_at", [value], filters, since)
    return _Plan(rq.QUEUE_INDEX, "queue", "created_at", app_queues(registry), {}, since)


def _query_params(table: str, p: _Plan, partition: str, limit: int, start: Any) -> dict[str, Any]:
    names = {"#h": p.hash_attr}
    values: dict[str, Any] = {":h": {"S": partition}}
    key = "#h = :h"
    if p.since is not None:
        key += " AND #r >= :since"
        names["#r"] = p.range_attr
        values[":since"] = {"N": str(round(p.since, 3))}
    params: dict[str, Any] = {
        "TableName": table,
        "IndexName": p.index,
        "KeyConditionExpression": key,
        "ScanIndexForward": False,  # newest first
        "Limit": limit,
    }
    if p.filters:
        clauses = []
        for i, (attr, value) in enumerate(sorted(p.filters.items())):
            names[f"#f{i}"] = attr
            values[f":f{i}"] = {"S": value}
            clauses.append(f"#f{i} = :f{i}")
        params["FilterExpression"] = " AND ".join(clauses)
    params["ExpressionAttributeNames"] = names
    params["ExpressionAttributeValues"] = values
    if start is not None:
        params["ExclusiveStartKey"] = start
    return params


def encode_cursor(index: str, positions: list[Any]) -> str:
    """Opaque page token: the index and, per partition, the last key read (or ``done``)."""
    raw = json.dumps({"v": _CURSOR_VERSION, "i": index, "p": positions}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(cursor: str, index: str, partitions: int) -> list[Any]:
    """Positions from a cursor; ``CursorError`` when it belongs to other filters."""
    try:
        data = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        positions = data["p"]
        valid = data["v"] == _CURSOR_VERSION and data["i"] == index and len(positions) == partitions
    except (ValueError, KeyError, TypeError, binascii.Error):
        valid = False
    if not valid:
        raise CursorError(
            "--cursor does not belong to this listing; repeat the same filters or drop --cursor"
        )
    return list(positions)


def _key_of(item: Mapping[str, Any], p: _Plan) -> dict[str, Any]:
    return {a: item[a] for a in ("id", p.hash_attr, p.range_attr)}


def _order(item: Mapping[str, Any], p: _Plan) -> tuple[float, str]:
    return float(item[p.range_attr]["N"]), str(item["id"]["S"])


def merge_flow(table: str, p: _Plan, limit: int, starts: list[Any]) -> Flow[tuple[list[Any], list[Any]]]:
    """Take the ``limit`` newest entries over every partition; return them and the new positions."""
    n = len(p.partitions)
    buffers: list[list[Any]] = [[] for _ in range(n)]
    page_next: list[Any] = list(starts)
    exhausted = [s == _DONE for s in starts]
    consumed: list[Any] = [None] * n
    out: list[Any] = []
    while len(out) < limit:
        for i in range(n):
            # A partition whose buffer ran dry must be read on before we can tell who is newest.
            while not buffers[i] and not exhausted[i]:
                page = yield Call(
                    "dynamodb", "query", _query_params(table, p, p.partitions[i], limit, page_next[i])
                )
                buffers[i] = list(page.get("Items", []))
                page_next[i] = page.get("LastEvaluatedKey")
                exhausted[i] = page_next[i] is None
        live = [i for i in range(n) if buffers[i]]
        if not live:
            break
        best = max(live, key=lambda i: _order(buffers[i][0], p))
        item = buffers[best].pop(0)
        out.append(item)
        consumed[best] = _key_of(item, p)
    positions: list[Any] = []
    for i in range(n):
        if starts[i] == _DONE or (exhausted[i] and not buffers[i]):
            positions.append(_DONE)
        else:
            positions.append(consumed[i] if consumed[i] is not None else starts[i])
    return out, positions


def _still_unprocessed(state: tenacity.RetryCallState) -> NoReturn:
    left = state.outcome.result() if state.outcome else {}
    raise StoreError(f"BatchGetItem left {sum(len(t['Keys']) for t in left.values())} keys unprocessed")


#: Asks again for the keys a BatchGetItem left unprocessed (the result is what is left): after
#: 0.05 s, doubling, up to UNPROCESSED_RETRIES times, then StoreError.
_UNPROCESSED = tenacity.Retrying(
    stop=tenacity.stop_after_attempt(UNPROCESSED_RETRIES + 1),
    wait=tenacity.wait_exponential(multiplier=0.05),
    retry=tenacity.retry_if_result(bool),
    retry_error_callback=_still_unprocessed,
)


def batch_get_flow(table: str, ids: list[str], attrs: tuple[str, ...] = _ROW_ATTRS) -> Flow[dict[str, Any]]:
    """Items by id (absent ids are simply missing, e.g. deleted by TTL); retries unprocessed keys."""
    found: dict[str, Any] = {}
    names = {f"#a{i}": a for i, a in enumerate(attrs)}
    unique = list(dict.fromkeys(ids))
    for start in range(0, len(unique), MAX_BATCH_GET):
        request: dict[str, Any] = {
            "Keys": [{"id": {"S": i}} for i in unique[start : start + MAX_BATCH_GET]],
            "ProjectionExpression": ", ".join(names),
            "ExpressionAttributeNames": names,
        }
        yield from _batch_get(table, request, found)
    return found


def _batch_get(table: str, request: dict[str, Any], found: dict[str, Any]) -> Flow[None]:
    """One BatchGetItem (up to 100 keys) into ``found``, then again for whatever it left unprocessed."""
    pending: dict[str, Any] = {table: request}

    def attempt() -> Flow[dict[str, Any]]:
        nonlocal pending
        response = yield Call("dynamodb", "batch_get_item", {"RequestItems": pending})
        for item in response.get("Responses", {}).get(table, []):
            found[item["id"]["S"]] = item
        pending = response.get("UnprocessedKeys") or {}
        return pending

    yield from retrying(attempt, _UNPROCESSED)


def _int(item: Mapping[str, Any], name: str) -> int | None:
    av = item.get(name)
    return int(float(av["N"])) if av else None


def _num(item: Mapping[str, Any], name: str) -> float | None:
    av = item.get(name)
    return float(av["N"]) if av else None


def _str(item: Mapping[str, Any], name: str) -> str | None:
    av = item.get(name)
    return str(av["S"]) if av else None


def _row(item: Mapping[str, Any], at: float | None) -> JobRow:
    return JobRow(
        id=item["id"]["S"],
        status=_str(item, "status") or "?",
        type=_str(item, "type") or "?",
        queue=_str(item, "queue") or "?",
        tenant=_str(item, "tenant"),
        attempt=_int(item, "attempt"),
        max_attempts=_int(item, "max_attempts"),
        created_at=_num(item, "created_at"),
        at=at,
        reason=_str(item, "reason"),
    )


def list_flow(settings: Settings, registry: Registry, query: ListQuery, now: float) -> Flow[JobPage]:
    """One page of ``query``, newest first."""
    if not 1 <= query.limit <= MAX_LIMIT:
        raise ValueError(f"--limit must be 1..{MAX_LIMIT}, got {query.limit}")
    table = settings.table_name
    p = plan(registry, query, now)
    starts = (
        decode_cursor(query.cursor, p.index, len(p.partitions))
        if query.cursor
        else [None] * len(p.partitions)
    )
    entries, positions = yield from merge_flow(table, p, query.limit, starts)
    if p.index == rq.STATUS_INDEX:
        rows = [_row(e, _num(e, "due")) for e in entries]
    else:
        items = yield from batch_get_flow(table, [e["id"]["S"] for e in entries])
        rows = [
            _row(items[i], _num(items[i], "updated_at"))
            for i in (e["id"]["S"] for e in entries)
            if i in items
        ]
    more = any(pos != _DONE for pos in positions)
    return JobPage(
        rows=rows,
        next_cursor=encode_cursor(p.index, positions) if more else None,
        index=p.index,
        partitions=p.partitions,
    )


def job_to_dict(job: Job) -> dict[str, Any]:
    """Everything ``jobs get`` shows, JSON-ready."""
    error = job.last_error
    return {
        "id": job.id,
        "type": job.type,
        "queue": job.queue,
        "status": job.status.value,
        "attempt": job.attempt,
        "max_attempts": job.max_attempts,
        "run_at": iso(job.run_at),
        "created_at": iso(job.created_at),
        "updated_at": iso(job.updated_at),
        "started_at": iso(job.started_at),
        "finished_at": iso(job.finished_at),
        "lease_owner": job.lease_owner,
        "lease_epoch": job.lease_epoch,
        "lease_expires": iso(job.lease_expires),
        "cancel_requested": job.cancel_requested,
        "reason": job.reason,
        "payload": job.payload,
        "payload_version": job.payload_version,
        "result": job.result,
        "last_error": (
            {"class": error.error_class, "message": error.message, "traceback": error.traceback}
            if error
            else None
        ),
        "history": [
            {
                "attempt": h.attempt,
                "outcome": h.outcome,
                "started_at": iso(h.started_at),
                "finished_at": iso(h.finished_at),
                "worker": h.worker,
                "error": h.error or None,
            }
            for h in job.history
        ],
        "audit": [
            {**entry, "at": iso(entry["at"]) if isinstance(entry.get("at"), float) else entry.get("at")}
            for entry in rq.audit_entries(job)
        ],
        "idempotency_key": job.idempotency_key,
        "tenant": job.tenant,
        "parent_id": job.parent_id,
        "root_id": job.root_id,
        "trace": job.trace,
    }
