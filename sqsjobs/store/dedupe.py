"""Dedup modes of an idempotency key: how long a key names one job (docs/dedupe.md).

The default key is one job for the record's whole retention. The modes narrow it; a job type
(``@app.job(dedupe=...)``) or an enqueue (``dedupe=``) names one as a typed value: ``DedupeFor``,
``Throttle``, ``WhileActive`` or ``Debounce``. The HTTP API and foreign messages carry the same
modes as flat JSON fields (``of_options`` reads them).

- ``DedupeFor`` / ``Throttle`` (a window): the window's slot is part of the key, so the job id
  still comes from the key alone and the enqueue stays the one conditional put it always was. The
  windows are aligned (slot = ``floor(now / window)``): two enqueues either side of a boundary
  are two jobs. ``dedupe_for`` keeps ``IdempotencyConflict`` for another payload; ``throttle``
  does not (the first enqueue of the window wins, later ones get its id whatever their payload).
- ``WhileActive``: the key maps to the live job. A *key item* (``unique#<key id>``)
  names the job holding the key; it is written before the job's message (one conditional put on
  the happy path, then the job's own writes). A refused put reads the holder's record: live (or
  not yet written), the enqueue returns the holder; finished, it takes the key over with a put
  conditional on that holder (so 20 racing enqueuers after a finish make one new job).
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol

from sqsjobs._aws import Call, Flow
from sqsjobs.errors import DedupeInvalid, StoreError
from sqsjobs.job import TERMINAL, JobStatus
from sqsjobs.options import (
    Debounce,
    Dedupe,
    DedupeFor,
    Throttle,
    WhileActive,
)
from sqsjobs.store.codec import av_n, av_s, idempotent_job_id, old_item
from sqsjobs.store.conditions import Fragment, eq
from sqsjobs.store.schema import TTL_ATTRIBUTE
from sqsjobs.store.write import Put, new_id_only

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from sqsjobs.store.codec import Item
    from sqsjobs.store.enqueue import NewJob

#: The modes whose job takes a key item before anything else is written.
KEYED = frozenset({"while_active", "debounce"})
#: The prefix of a ``while_active`` key item's id (a job id is hex, so the two never meet).
KEY_PREFIX = "unique#"
#: A key item whose job has no record this long after the item was written is stranded (its
#: enqueuer died before sending the message): the next enqueue takes it over. The bound is past
#: the longest SQS delay, after which a sent message would have created the record.
STRANDED_AFTER_S = 16 * 60.0
#: How many holders one enqueue looks at before it settles on the last one (each takeover it loses
#: names a holder another enqueuer has just made, which is live).
_ROUNDS = 3


class EnqueuedId(str):
    """A job id, with what the dedup mode did (``App.enqueue``'s result is still a plain ``str`` to use).

    ``deduplicated``: the key named a live job, whose id this is (no new job). ``replaced``: the
    id of the finished job the key named before this new one (``while_active``), else None.
    """

    deduplicated: bool = False
    replaced: str | None = None

    @classmethod
    def of(cls, job_id: str, *, deduplicated: bool = False, replaced: str | None = None) -> EnqueuedId:
        """The id ``job_id`` carrying what the enqueue did."""
        out = cls(job_id)
        out.deduplicated = deduplicated
        out.replaced = replaced
        return out


class FlatModes(Protocol):
    """An object carrying the modes as flat JSON fields (``POST /jobs``'s body, a foreign message)."""

    @property
    def unique(self) -> str | None:
        """``"while_active"`` or None."""
        ...

    @property
    def dedupe_for(self) -> float | None:
        """A ``DedupeFor`` window (s)."""
        ...

    @property
    def throttle(self) -> float | None:
        """A ``Throttle`` window (s)."""
        ...

    @property
    def debounce(self) -> float | None:
        """A ``Debounce`` quiet period (s)."""
        ...

    @property
    def debounce_max(self) -> float | None:
        """A ``Debounce``'s longest wait (s)."""
        ...


def of_fields(source: FlatModes) -> Dedupe | None:
    """The one mode ``source``'s flat fields name, or None (``of_options`` over its fields)."""
    return of_options(
        source.unique,
        source.dedupe_for,
        source.throttle,
        debounce_s=source.debounce,
        debounce_max_s=source.debounce_max,
    )


def of_options(
    unique: str | None,
    dedupe_for_s: float | None,
    throttle_s: float | None,
    *,
    debounce_s: float | None = None,
    debounce_max_s: float | None = None,
) -> Dedupe | None:
    """The one mode flat options name (the HTTP API's and a foreign message's JSON fields), or None.

    Raises ``DedupeInvalid`` (a ``ValueError``) for two modes, or a window outside
    ``MIN_WINDOW_S``..``MAX_WINDOW_S``.
    """
    if unique is not None and unique != "while_active":
        raise DedupeInvalid(f"unique={unique!r}: the one unique mode is 'while_active'", field="unique")
    if debounce_s is None and debounce_max_s is not None:
        raise DedupeInvalid("debounce_max needs debounce (the quiet period)", field="debounce_max")
    named = [
        WhileActive() if unique is not None else None,
        DedupeFor(dedupe_for_s) if dedupe_for_s is not None else None,
        Throttle(throttle_s) if throttle_s is not None else None,
        Debounce(debounce_s, max=debounce_max_s) if debounce_s is not None else None,
    ]
    chosen = [d for d in named if d is not None]
    if len(chosen) > 1:
        raise DedupeInvalid("give one of unique, dedupe_for, throttle and debounce", field="idempotency_key")
    return chosen[0] if chosen else None


def job_id(job_type: str, key: str, tenant: str | None, dedupe: Dedupe | None, now: float) -> str:
    """The id an idempotent enqueue writes: the key's own, or its window slot's; a fresh one for ``while_active``.

    A ``while_active`` job's id is new each time: the key item, not the id, says which job holds the key.
    """
    if dedupe is None:
        return idempotent_job_id(job_type, key, tenant)
    if dedupe.mode in KEYED:
        return uuid.uuid4().hex
    assert dedupe.window_s is not None
    window_ms = round(dedupe.window_s * 1000)
    slot = int(now * 1000) // window_ms
    return idempotent_job_id(job_type, f"{key}\0{dedupe.mode}/{window_ms}ms@{slot}", tenant)


def key_id(job: NewJob) -> str:
    """The id of the ``while_active`` key item of ``job``'s key (scoped like an id: type and tenant)."""
    assert job.idempotency_key is not None
    return KEY_PREFIX + idempotent_job_id(job.type, job.idempotency_key, job.tenant)


def take_key(table: str, job: NewJob, *, retention_s: float, holder: str | None = None) -> Put:
    """The put that makes ``job`` the key's holder: if no job holds it, or if ``holder`` still does.

    The item expires (the table's TTL) a retention after the job may start, as a finished record does.
    """
    item: Item = {
        "id": av_s(key_id(job)),
        "job_id": av_s(job.id),
        "created_at": av_n(job.now),
        TTL_ATTRIBUTE: av_n(int(max(job.run_at, job.now) + retention_s)),
    }
    if holder is None:
        return new_id_only(table, item)
    return Put(
        table, item, (Fragment("same_holder", eq("job_id", ":holder"), {":holder": av_s(holder)}),), True
    )


def holder_status(table: str, job_id: str) -> dict[str, object]:
    """The GetItem of the holder's status (strongly consistent: a finish just written counts)."""
    return {
        "TableName": table,
        "Key": {"id": av_s(job_id)},
        "ConsistentRead": True,
        "ProjectionExpression": "#s",
        "ExpressionAttributeNames": {"#s": "status"},
    }


def is_free(status_item: Item | None, key_item: Item, now: float) -> bool:
    """True when the holder no longer holds the key: its job finished, or its record never came."""
    if status_item is None:
        return now - float(key_item["created_at"]["N"]) > STRANDED_AFTER_S
    return JobStatus(status_item["status"]["S"]) in TERMINAL


def claim_key_flow(table: str, job: NewJob, *, retention_s: float) -> Flow[EnqueuedId]:
    """Make ``job`` the key's holder, or find the live job that is: the id to return.

    The result's ``deduplicated`` is True when another job holds the key (``job`` must not be
    enqueued); otherwise ``job`` holds it, and ``replaced`` names the finished job it took it from.
    """
    holder: str | None = None
    replaced: str | None = None
    for _ in range(_ROUNDS):
        try:
            yield Call(
                "dynamodb",
                "put_item",
                take_key(table, job, retention_s=retention_s, holder=holder).put_item(),
            )
        except StoreError as exc:
            key_item = old_item(exc)
            if key_item is None:
                raise
            holder = str(key_item["job_id"]["S"])
            answer = yield Call("dynamodb", "get_item", holder_status(table, holder))
            if not is_free(answer.get("Item"), key_item, job.now):
                return EnqueuedId.of(holder, deduplicated=True)
            replaced = holder
        else:
            return EnqueuedId.of(job.id, replaced=replaced)
    assert holder is not None
    return EnqueuedId.of(holder, deduplicated=True)


def enqueue_flow(
    jobs: Sequence[NewJob],
    enqueue: Callable[[Sequence[NewJob]], Flow[list[str]]],
    *,
    table: str,
    retention_s: float,
    debounced: Callable[[NewJob], Flow[EnqueuedId]] | None = None,
) -> Flow[list[str]]:
    """``enqueue(jobs)``, with each ``while_active`` job first taking its key (or giving the holder's id).

    A ``debounce`` job is ``debounced``'s whole (``sqsjobs.store.debounce``: it writes and sends itself).
    """
    results: list[str | None] = [None] * len(jobs)
    todo: list[tuple[int, NewJob]] = []
    for i, job in enumerate(jobs):
        if job.dedupe == "debounce":
            if debounced is None:
                raise ValueError(f"{job.type!r}: debounce is not supported here; enqueue it with app.enqueue")
            results[i] = yield from debounced(job)
            continue
        if job.dedupe != "while_active":
            todo.append((i, job))
            continue
        got = yield from claim_key_flow(table, job, retention_s=retention_s)
        if got.deduplicated:
            results[i] = got
        else:
            results[i] = got
            todo.append((i, job))
    if todo:
        ids = yield from enqueue([job for _, job in todo])
        for (i, _), new in zip(todo, ids, strict=True):
            results[i] = results[i] or new
    return [r for r in results if r is not None]


def outside_producer(job: NewJob, where: str) -> NewJob:
    """``job``, unless it is ``while_active`` (``ValueError``): not in a transaction, batch or chain.

    Its key item must land before its record, which those write together with others.
    """
    if job.dedupe in KEYED:
        raise ValueError(
            f"{job.type!r}: {job.dedupe} is not supported in {where} (its key item is written "
            "before the job); enqueue it with app.enqueue"
        )
    return job


def with_mode(job: NewJob, dedupe: Dedupe | None) -> NewJob:
    """``job`` marked with its mode (the conflict check and the enqueue read it)."""
    if dedupe is None:
        return job
    if dedupe.mode == "debounce":
        return replace(job, dedupe=dedupe.mode, debounce=(dedupe.window_s or 0.0, dedupe.max_wait_s or 0.0))
    return replace(job, dedupe=dedupe.mode)
