"""The worker registry in the jobs table (sans-I/O): one small item per running ECS worker process.

Why in the jobs table: no second table to provision, grant and back up; the one sparse index lists
the items without reading any job record (docs/scale.md). The item is keyed ``worker#<worker id>``:
job ids are hex (uuid4, or ``k`` and a hash of the idempotency key) and never contain ``#``, so the
two cannot collide. Its ``attn``/``due`` put it in the ``attention`` index under its own partition
``workers`` (``due`` = when the worker started); the sweeper and the dead-job listing read only
their own partitions, and job listings and ``stats`` filter on ``updated_at``/``status``, which a
worker item never has. The index projects only its keys and the job columns (``LISTED``), none of
which a worker item carries, so a listing Queries the keys and reads the items by BatchGetItem.

What each write costs (item under 1 KB, on demand; the refresh touches no index key or projected
attribute, so the index is not written)::

    register  PutItem     at start                        1 WU + 1 index WU (the entry is created)
    refresh   UpdateItem  every Settings.registry_interval_s   1 WU
    draining  UpdateItem  on SIGTERM (the refresh, state=draining)  1 WU
    drain     UpdateItem  an operator asks it to drain (``request_drain``); the worker reads the
                          request back from its next refresh (ALL_NEW) and drains as on SIGTERM  1 WU
    exit      DeleteItem  after the drain                 1 WU + 1 index WU

Index partition ``workers`` is written twice per worker process lifetime (start, exit), never per
refresh or per job: a fleet of 1,000 workers redeployed at once writes it 2,000 times over the
minutes the rollout takes, far under a partition's 1,000 writes/s. One partition is enough.

A worker that dies without exiting (``kill -9``, OOM, lost host) stops refreshing: it is *silent*
after ``SILENT_INTERVALS`` and its item carries ``expires_at`` (the table's TTL attribute) =
last refresh + ``TTL_INTERVALS`` intervals, so DynamoDB deletes it for free. AWS deletes expired
items within days, not at once, so readers treat an item past ``expires_at`` as gone::

    last refresh ── +2 intervals ──────────── +6 intervals ────────▶ time
         │ live (or draining)  │ silent             │ expired: not listed; TTL deletes it
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqsjobs.store.codec import av_n, av_s
from sqsjobs.store.conditions import Compare, Exists
from sqsjobs.store.schema import ATTENTION_INDEX, TTL_ATTRIBUTE
from sqsjobs.store.write import Delete, Put, Write

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

#: Registry items' ids start with this; no job id contains ``#``.
WORKER_PREFIX = "worker#"
#: The ``attention`` index partition of every worker item.
WORKERS_PARTITION = "workers"
#: A worker is silent after this many intervals without a refresh.
SILENT_INTERVALS = 2
#: Its item expires (TTL) this many intervals after its last refresh: a dead worker shows as silent
#: for the intervals between, then disappears.
TTL_INTERVALS = 6
#: Running job ids kept in the item (``running_count`` is exact): with the default concurrency of 10
#: every one fits, and the item stays under 1 KB, one write unit per refresh.
MAX_RUNNING_LISTED = 10
#: ``state``: what the worker says it is doing.
RUNNING = "running"
DRAINING = "draining"
#: The attributes a listing reads.
WORKER_ATTRIBUTES = (
    *["id", "host", "pid", "version", "queues", "job_types", "concurrency", "started_at", "last_seen"],
    *["state", "running", "running_count", "interval_s", "refreshes"],
    TTL_ATTRIBUTE,
)


@dataclass(frozen=True)
class WorkerEntry:
    """What a worker process registers: fixed for its lifetime."""

    #: The worker id, as the records' ``lease_owner`` shows it.
    worker_id: str
    host: str
    pid: int
    #: The sqsjobs version it runs.
    version: str
    queues: tuple[str, ...]
    job_types: tuple[str, ...]
    concurrency: int
    #: Epoch seconds.
    started_at: float
    #: ``Settings.registry_interval_s`` of this worker: readers judge its silence by its own interval.
    interval_s: float


def item_id(worker_id: str) -> str:
    """The registry item's id for ``worker_id``."""
    return f"{WORKER_PREFIX}{worker_id}"


def expires_at(entry: WorkerEntry, now: float) -> int:
    """The TTL of an item refreshed at ``now`` (whole epoch seconds, as DynamoDB TTL wants)."""
    return int(now + TTL_INTERVALS * entry.interval_s) + 1


def _strings(values: Sequence[str]) -> dict[str, Any]:
    return {"L": [av_s(v) for v in values]}


def _live_values(entry: WorkerEntry, now: float, state: str, running: Sequence[str]) -> dict[str, Any]:
    return {
        "last_seen": av_n(now),
        "state": av_s(state),
        "running": _strings(list(running)[:MAX_RUNNING_LISTED]),
        "running_count": av_n(len(running)),
        TTL_ATTRIBUTE: av_n(expires_at(entry, now)),
    }


def register(
    table: str, entry: WorkerEntry, *, now: float, state: str = RUNNING, running: Sequence[str] = ()
) -> Put:
    """PutItem: the whole entry, in the ``workers`` index partition; also re-creates an expired one."""
    item = {
        "id": av_s(item_id(entry.worker_id)),
        "attn": av_s(WORKERS_PARTITION),
        "due": av_n(entry.started_at),
        "host": av_s(entry.host),
        "pid": av_n(entry.pid),
        "version": av_s(entry.version),
        "queues": _strings(entry.queues),
        "job_types": _strings(entry.job_types),
        "concurrency": av_n(entry.concurrency),
        "started_at": av_n(entry.started_at),
        "interval_s": av_n(entry.interval_s),
        "refreshes": av_n(0),
        **_live_values(entry, now, state, running),
    }
    return Put(table, item)


def refresh(table: str, entry: WorkerEntry, *, now: float, state: str, running: Sequence[str]) -> Write:
    """UpdateItem: last_seen, state, what runs now, the TTL; ``refreshes`` counts these writes.

    Touches no index key and no projected attribute: no index write. Conditional on the item
    existing, so an item TTL deleted it during a long stall is registered again whole (``register``)
    instead of re-created with only these fields.
    """
    live = _live_values(entry, now, state, running)
    write = Write(
        table,
        {"id": av_s(item_id(entry.worker_id))},
        tuple((name, f":a{i}") for i, name in enumerate(live)),
        adds=(("refreshes", ":one"),),
        values={**{f":a{i}": v for i, v in enumerate(live.values())}, ":one": av_n(1)},
        # The item as written: the worker reads an operator's drain request from it (same write units).
        returns="ALL_NEW",
        old_on_refusal=False,
    )
    return write.guard("registered", Exists("id"))


def request_drain(table: str, worker_id: str, *, now: float, by: str) -> Write:
    """UpdateItem: ask the worker to drain; it sees ``drain_requested`` at its next refresh.

    Conditional on the item existing (a worker that exited, or never ran, cannot be asked) and not
    draining already; the refusal returns the item as it was, so the caller can say which.
    """
    write = Write(
        table,
        {"id": av_s(item_id(worker_id))},
        (("drain_requested", ":at"), ("drain_by", ":by")),
        values={":at": av_n(now), ":by": av_s(by[:200])},
    )
    return write.guard("registered", Exists("id")).guard(
        "not_draining", Compare("state", "<>", ":draining"), {":draining": av_s(DRAINING)}
    )


def deregister(table: str, worker_id: str) -> Delete:
    """DeleteItem: the worker exits cleanly."""
    return Delete(table, {"id": av_s(item_id(worker_id))})


def query_workers(table: str, start_key: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The ids of the registry items: one Query of the ``workers`` partition (keys only, ~100 bytes each)."""
    params: dict[str, Any] = {
        "TableName": table,
        "IndexName": ATTENTION_INDEX,
        "KeyConditionExpression": "attn = :attn",
        "ExpressionAttributeValues": {":attn": av_s(WORKERS_PARTITION)},
        "ProjectionExpression": "id",
    }
    if start_key:
        params["ExclusiveStartKey"] = dict(start_key)
    return params


def worker_ids(response: Mapping[str, Any]) -> list[str]:
    """Item ids of a ``query_workers`` page (only those with the prefix: the partition is the registry's)."""
    ids = (i["id"]["S"] for i in response.get("Items", []))
    return [i for i in ids if i.startswith(WORKER_PREFIX)]
