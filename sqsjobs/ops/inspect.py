"""Find jobs: one record by id, and listings newest first, one page per call, without a happy-path index.

The table has one sparse index, ``attention``, that only records needing attention write (the
happy path writes no index: docs/scale.md; ``sqsjobs.store.schema``). So only dead jobs are listed
through an index; everything else is a Scan, bounded per call::

    --status dead (+ any filter)  Query of the attention index over its 32 ``dead#NN`` shards, merged
                                  newest ``due`` (= finished_at) first with a position per shard;
                                  other filters are FilterExpressions. No default window: the
                                  shards hold only dead records (until TTL), so the listing is cheap.
    --tag name=value (+ any)      Query of the ``tags`` index (one partition per tag), newest
                                  ``created_at`` first, then the records by id (BatchGetItem);
                                  other filters are applied to the records read. No default window.
    anything else                 Scan with a FilterExpression (status, type, queue, tenant) and a
                                  window: ``updated_at >= now - --since`` (default 24 h), paged by
                                  the Scan's position. Rows of one page are sorted newest
                                  ``updated_at`` first; pages follow the table's own order (hash
                                  of the id), so the listing as a whole is not sorted.

The window is on ``updated_at``, not ``created_at``: an operator asks what moved recently, and a
job created last week that is running or just failed has moved. Every transition sets it.

A Scan reads (and bills) every item it passes, whatever the filters: a FilterExpression drops items
after they are read. So one call reads at most ``ListQuery.max_read`` items (``SCAN_BUDGET_ITEMS``)
and may return a short or even empty page with a cursor to read on. Each Scan request evaluates
``limit`` items first, four times more in each next one while matches are sparse; a page that fills
mid-request resumes after its last row (that row's key is a valid scan start). Rows come from the
items themselves: no BatchGetItem. Both paths read eventually consistent (a Query of a GSI always
does; a Scan is asked to), so a job that just changed may show its previous status for a moment;
``jobs get`` reads the record itself, strongly consistent.

What a listing costs (read units, RRU). An item is 0.5-1 KB (the payload stays in the SQS message;
held, dead and cancelled records keep it); the figures take 1 KB, halve them for 0.5 KB. An
eventually consistent read costs 0.5 RRU per 4 KB, summed over the items of one request and rounded
up; $0.125 per million RRU on demand::

    listing        one page (limit 50)                all matches, 1 M records   all matches, 100 M records
    --status dead  32 shard Queries of <= 4 entries,  0.1 % dead = 1,000 jobs:   100,000 dead: 2,000 pages
                   0.5 RRU each: 16-20 RRU, however   20 pages x 20 = 400 RRU    x 20 = 40,000 RRU ($0.005)
                   large the table
    Scan listings  dense matches: 50 items = 50 KB    the whole table, whatever  100 GB / 4 KB x 0.5
                   / 4 KB x 0.5 = 7 RRU; sparse: at   the filters: 1 GB / 4 KB   = 12.5 M RRU ($1.56)
                   most 10,000 items = 10 MB / 4 KB   x 0.5 = 125,000 RRU        in 10,000 calls
                   x 0.5 = 1,250 RRU ($0.00016)       ($0.016) in 100 calls

A Scan listing that matches few items (``--status running`` on a busy table) is therefore cheap per
call but must walk the table to be complete: fine at a million records, not at a hundred million,
where the dead listing (indexed) is the operator's tool, DynamoDB's export to S3 the one for history,
and ``sqsjobs stats`` counts a capped sample (``sqsjobs.ops.stats``).
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import zlib
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from sqsjobs._aws import Call, Flow
from sqsjobs.envelope import read_json
from sqsjobs.errors import CursorError
from sqsjobs.job import JobStatus
from sqsjobs.ops._common import iso
from sqsjobs.store import batched, schema, tags
from sqsjobs.store.conditions import All, eq
from sqsjobs.store.write import render_condition

if TYPE_CHECKING:
    from collections.abc import Mapping

    from sqsjobs.config import Settings

#: Rows per page when the caller does not say.
DEFAULT_LIMIT = 50
#: A page holds at most this many rows.
MAX_LIMIT = 100
#: A Scan listing looks this far back (on ``updated_at``) unless ``--since`` says otherwise.
DEFAULT_SCAN_WINDOW_S = 86_400.0
#: Items one Scan listing call reads at most (10 MB at 1 KB: 1,250 RRU) before it returns its page.
SCAN_BUDGET_ITEMS = 10_000
#: Each next Scan request of one call evaluates this many times more items, while matches are sparse.
SCAN_GROWTH = 4
#: ``JobPage.index`` of the dead listing (the index's name) and of a Scan listing.
ATTENTION = schema.ATTENTION_INDEX
SCAN = "scan"
TAGS = schema.TAGS_INDEX
_CURSOR_VERSION = 2
_DONE = "done"
#: What a listing row reads: the id and the columns the attention index carries.
_ROW_ATTRS = ("id", *schema.LISTED)


@dataclass(frozen=True)
class ListQuery:
    """Filters of ``jobs list``; ``since_s`` limits to jobs whose listing time is that recent."""

    status: JobStatus | None = None
    type: str | None = None
    queue: str | None = None
    tenant: str | None = None
    #: None: every dead job, or the last ``DEFAULT_SCAN_WINDOW_S`` of a Scan listing.
    since_s: float | None = None
    limit: int = DEFAULT_LIMIT
    cursor: str | None = None
    #: Items a Scan listing reads at most per call (the cost bound; see the module docstring).
    max_read: int = SCAN_BUDGET_ITEMS
    #: ``name=value``: only jobs with that tag, from the ``tags`` index (``sqsjobs.store.tags``).
    tag: str | None = None


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
    #: The time the listing is ordered by: ``due`` (finished_at) for dead jobs, else ``updated_at``.
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
    #: What served it: ``attention`` (the index) or ``scan`` (the table).
    index: str
    #: The index partitions merged (``dead#00`` ...); empty for a Scan.
    partitions: list[str] = field(default_factory=list)
    #: Items DynamoDB read for this page (what it bills), filtered out ones included.
    read: int = 0
    #: The window's lower bound (epoch seconds), None when there is none.
    since: float | None = None


@dataclass(frozen=True)
class _Plan:
    #: ``attention`` or ``scan``.
    index: str
    #: Index partition key values to merge; empty for a Scan.
    partitions: list[str]
    #: Attribute -> value, as FilterExpressions.
    filters: dict[str, str]
    since: float | None
    #: What a cursor must have been made for: the listing and its filters.
    key: str

    @property
    def positions(self) -> int:
        """Positions a cursor of this listing holds: one per partition, or one for a Scan."""
        return len(self.partitions) or 1


def plan(query: ListQuery, now: float) -> _Plan:
    """Pick what serves ``query``: the dead shards of the attention index, or a Scan."""
    filters = {k: v for k, v in (("type", query.type), ("queue", query.queue), ("tenant", query.tenant)) if v}
    if query.status is not None:
        filters["status"] = query.status.value
    key = json.dumps([sorted(filters.items()), query.since_s, query.tag], separators=(",", ":"))
    if query.tag is not None:
        tags.parse(query.tag)  # TagsInvalid for a malformed one, before any request
        since = now - query.since_s if query.since_s is not None else None
        return _Plan(TAGS, [], filters, since, f"t{key}")
    if query.status is JobStatus.DEAD:
        # ``status = dead`` stays a filter: a marker left on a record that moved on is not listed.
        since = now - query.since_s if query.since_s is not None else None
        return _Plan(ATTENTION, schema.attention_partitions(schema.DEAD), filters, since, f"a{key}")
    window = query.since_s if query.since_s is not None else DEFAULT_SCAN_WINDOW_S
    return _Plan(SCAN, [], filters, now - window, f"s{key}")


def _filter(p: _Plan, names: dict[str, str], values: dict[str, Any]) -> str:
    """The listing's equality filters, ANDed ("" without any); their names join ``names``."""
    if not p.filters:
        return ""
    parts = []
    for i, (attr, value) in enumerate(sorted(p.filters.items())):
        values[f":f{i}"] = {"S": value}
        parts.append(eq(attr, f":f{i}"))
    return render_condition(All(tuple(parts)), names, [])


def _projection(names: dict[str, str], extra: tuple[str, ...] = ()) -> str:
    attrs = (*_ROW_ATTRS, *extra)
    names.update({f"#p{i}": a for i, a in enumerate(attrs)})
    return ", ".join(f"#p{i}" for i in range(len(attrs)))


def _query_params(table: str, p: _Plan, partition: str, limit: int, start: Any) -> dict[str, Any]:
    """One attention partition, newest ``due`` first, from ``start`` on."""
    names = {"#h": "attn"}
    values: dict[str, Any] = {":h": {"S": partition}}
    key = "#h = :h"
    if p.since is not None:
        key += " AND #r >= :since"
        names["#r"] = "due"
        values[":since"] = {"N": str(round(p.since, 3))}
    params: dict[str, Any] = {
        "TableName": table,
        "IndexName": p.index,
        "KeyConditionExpression": key,
        "ScanIndexForward": False,  # newest first
        "Limit": limit,
        "ProjectionExpression": _projection(names, ("attn", "due")),
    }
    if p.filters:
        params["FilterExpression"] = _filter(p, names, values)
    params["ExpressionAttributeNames"] = names
    params["ExpressionAttributeValues"] = values
    if start is not None:
        params["ExclusiveStartKey"] = start
    return params


def _scan_params(table: str, p: _Plan, limit: int, start: Any) -> dict[str, Any]:
    """One Scan request: ``limit`` items evaluated from ``start`` on, those in the window and filters kept."""
    assert p.since is not None  # a Scan listing always has a window
    names = {"#u": "updated_at"}
    values: dict[str, Any] = {":since": {"N": str(round(p.since, 3))}}
    projection = _projection(names)
    condition = " AND ".join(c for c in ("#u >= :since", _filter(p, names, values)) if c)
    params: dict[str, Any] = {
        "TableName": table,
        "Limit": limit,
        "ProjectionExpression": projection,
        "FilterExpression": condition,
        "ExpressionAttributeNames": names,
        "ExpressionAttributeValues": values,
        "ConsistentRead": False,  # half the price of a strongly consistent read
    }
    if start is not None:
        params["ExclusiveStartKey"] = start
    return params


def encode_cursor(listing: str, positions: list[Any], since: float | None = None) -> str:
    """Opaque page token: the listing, its window and, per partition, the last key read (or ``done``).

    The window's bound is pinned by the first page, so later pages list the same window.
    """
    raw = json.dumps({"v": _CURSOR_VERSION, "l": listing, "s": since, "p": positions}, separators=(",", ":"))
    return base64.urlsafe_b64encode(zlib.compress(raw.encode(), 9)).decode().rstrip("=")


def decode_cursor(cursor: str, listing: str, partitions: int) -> tuple[list[Any], float | None]:
    """Positions and the window's bound from a cursor; ``CursorError`` when it belongs to another listing."""
    try:
        raw = zlib.decompress(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        data = read_json(raw, what="cursor")
        positions, since = data["p"], data["s"]
        valid = (
            data["v"] == _CURSOR_VERSION
            and data["l"] == listing
            and isinstance(positions, list)
            and len(positions) == partitions
            and (since is None or isinstance(since, int | float))
        )
    except (ValueError, KeyError, TypeError, binascii.Error, zlib.error):
        valid = False
    if not valid:
        raise CursorError(
            "--cursor does not belong to this listing; repeat the same filters or drop --cursor"
        )
    return list(positions), since


def _key_of(item: Mapping[str, Any]) -> dict[str, Any]:
    return {a: item[a] for a in ("id", "attn", "due")}


def _order(item: Mapping[str, Any]) -> tuple[float, str]:
    return float(item["due"]["N"]), str(item["id"]["S"])


def _shard_limit(limit: int, partitions: int) -> int:
    """Entries asked of each partition at a time: its share of a page and a little more.

    Shards are uniform over job ids, so the newest ``limit`` entries spread evenly; asking each
    for ``limit`` would read up to 32 pages to show one. A shard that runs dry is asked again.
    """
    return math.ceil(limit / partitions) + 2


def merge_flow(table: str, p: _Plan, limit: int, starts: list[Any]) -> Flow[tuple[list[Any], list[Any], int]]:
    """Take the ``limit`` newest entries over every partition: them, the new positions, the items read."""
    n = len(p.partitions)
    buffers: list[list[Any]] = [[] for _ in range(n)]
    page_next: list[Any] = list(starts)
    exhausted = [s == _DONE for s in starts]
    consumed: list[Any] = [None] * n
    out: list[Any] = []
    read = 0
    ask = _shard_limit(limit, n)
    while len(out) < limit:
        for i in range(n):
            # A partition whose buffer ran dry must be read on before we can tell who is newest.
            while not buffers[i] and not exhausted[i]:
                page = yield Call(
                    "dynamodb", "query", _query_params(table, p, p.partitions[i], ask, page_next[i])
                )
                buffers[i] = list(page.get("Items", []))
                read += int(page.get("ScannedCount", len(buffers[i])))
                page_next[i] = page.get("LastEvaluatedKey")
                exhausted[i] = page_next[i] is None
        live = [i for i in range(n) if buffers[i]]
        if not live:
            break
        best = max(live, key=lambda i: _order(buffers[i][0]))
        item = buffers[best].pop(0)
        out.append(item)
        consumed[best] = _key_of(item)
    positions: list[Any] = []
    for i in range(n):
        if starts[i] == _DONE or (exhausted[i] and not buffers[i]):
            positions.append(_DONE)
        else:
            positions.append(consumed[i] if consumed[i] is not None else starts[i])
    return out, positions, read


def scan_flow(table: str, p: _Plan, limit: int, start: Any, budget: int) -> Flow[tuple[list[Any], Any, int]]:
    """Up to ``limit`` matching items from ``start`` on, reading at most ``budget`` items.

    Returns the items (in table order), the position to go on from (``done`` at the end of the
    table) and the items read.
    """
    found: list[Any] = []
    read = 0
    evaluate = limit
    while len(found) < limit and start != _DONE and read < budget:
        page = yield Call("dynamodb", "scan", _scan_params(table, p, min(evaluate, budget - read), start))
        items = list(page.get("Items", []))
        read += int(page.get("ScannedCount", len(items)))
        taken = items[: limit - len(found)]
        found += taken
        # A page that filled mid-request goes on right after its last row, not after the request's end.
        overflow = len(taken) < len(items)
        start = {"id": taken[-1]["id"]} if overflow else page.get("LastEvaluatedKey") or _DONE
        evaluate *= SCAN_GROWTH
    return found, start, read


# ── records by id (``dlq list`` shows each message's job status) ─────────────────────────────
def batch_get_flow(table: str, ids: list[str], attrs: tuple[str, ...] = _ROW_ATTRS) -> Flow[dict[str, Any]]:
    """Items by id (absent ids are simply missing, e.g. deleted by TTL); retries unprocessed keys."""
    keys = [{"id": {"S": i}} for i in dict.fromkeys(ids)]
    items = yield from batched.get_items(table, keys, attributes=attrs)
    return {item["id"]["S"]: item for item in items}


# ── rows ─────────────────────────────────────────────────────────────────────────────────────


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


def list_flow(settings: Settings, query: ListQuery, now: float) -> Flow[JobPage]:
    """One page of ``query``: dead jobs newest first; other listings sorted newest first within the page."""
    if not 1 <= query.limit <= MAX_LIMIT:
        raise ValueError(f"--limit must be 1..{MAX_LIMIT}, got {query.limit}")
    if query.max_read < 1:
        raise ValueError(f"max_read must be at least 1, got {query.max_read}")
    table = settings.table_name
    p = plan(query, now)
    starts: list[Any] = [None] * p.positions
    if query.cursor:
        starts, since = decode_cursor(query.cursor, p.key, p.positions)
        p = replace(p, since=since)
    if p.index == ATTENTION:
        entries, positions, read = yield from merge_flow(table, p, query.limit, starts)
        rows = [_row(e, _num(e, "due")) for e in entries]
    elif p.index == TAGS:
        assert query.tag is not None
        rows, position, read = yield from tagged_flow(table, p, query.tag, query.limit, starts[0])
        positions = [position]
    else:
        items, position, read = yield from scan_flow(table, p, query.limit, starts[0], query.max_read)
        positions = [position]
        rows = sorted(
            (_row(i, _num(i, "updated_at")) for i in items), key=lambda r: (r.at or 0.0, r.id), reverse=True
        )
    more = any(pos != _DONE for pos in positions)
    return JobPage(
        rows=rows,
        next_cursor=encode_cursor(p.key, positions, p.since) if more else None,
        index=p.index,
        partitions=p.partitions,
        read=read,
        since=p.since,
    )


def tagged_flow(
    table: str, p: _Plan, tag: str, limit: int, start: Any
) -> Flow[tuple[list[JobRow], Any, int]]:
    """One page of the ``tags`` index (``limit`` entries, newest first), as rows of the records it names.

    The other filters are the records': a page may show fewer rows than ``limit`` (the cursor reads
    on). An entry whose record is gone (TTL) is skipped. Returns the rows, the position to go on
    from and the items read (index entries and records).
    """
    if start == _DONE:
        return [], _DONE, 0
    name, value = tags.parse(tag)
    page = yield Call(
        "dynamodb", "query", tags.query(table, name, value, limit=limit, since=p.since, start_key=start)
    )
    ids = tags.job_ids(page)
    records = (yield from batch_get_flow(table, ids)) if ids else {}
    rows = [
        _row(item, _num(item, "updated_at"))
        for job_id in ids
        if (item := records.get(job_id)) is not None
        and all(_str(item, attr) == wanted for attr, wanted in p.filters.items())
    ]
    return rows, page.get("LastEvaluatedKey") or _DONE, len(page.get("Items", [])) + len(records)
