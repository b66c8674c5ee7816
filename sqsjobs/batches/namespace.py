"""Batches: a container of ordinary jobs, told once when every item is done (docs/workflows-batches.md).

::

    b = app.batches.create(on_complete="payroll.report", final_stage=True)
    b.add("payroll.calc", {"employee": 1}, dedupe_key="emp-1")  # one transaction: the job + its count
    child = app.batches.create(on_complete="checks.done", parent=b.id)  # sealed by its parent once it drains
    b.seal()                                                    # no more items; complete when all are done
    app.batches.get(b.id).counts                                # {"pending": .., "succeeded": .., "failed": ..}

An item is written like a transactional enqueue's job (``sqsjobs.transaction``): its record with its
payload and a ``pending`` attention entry, and ``ADD added 1`` on its counter shard conditional on the
shard not being sealed, in one ``TransactWriteItems``; then its hint is sent and the entry cleared.
A crash between the two leaves the entry, and the sweeper sends the hint. The rest of the life of a
batch — counting finishes, sealing, completion, trees, repair — is ``completion`` and ``plugin``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqsjobs._aws import Call, Flow, async_verb, sync_verb
from sqsjobs.batches import records as batch_records
from sqsjobs.batches.completion import (
    BatchEnv,
    fail_flow,
    items_flow,
    read_record_flow,
    read_shards_flow,
    seal_flow,
)
from sqsjobs.config import to_seconds
from sqsjobs.errors import BatchNotFound, BatchSealed, ConfigurationError, IdempotencyConflict
from sqsjobs.job import BatchPlace
from sqsjobs.producer import JobRequest, build_new_job, notify_target, route_of, write_objects
from sqsjobs.runtime.kernel import Namespace
from sqsjobs.store import tags as store_tags
from sqsjobs.store import transact, waiting
from sqsjobs.store.apply import Refused, apply_all
from sqsjobs.store.codec import av_s, idempotent_job_id, nonce
from sqsjobs.store.enqueue import outside_producer
from sqsjobs.store.transact import CONDITION_FAILED

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from datetime import datetime, timedelta

    from sqsjobs.job import Notify
    from sqsjobs.registry import Handler, Registry
    from sqsjobs.runtime.kernel import Kernel


@dataclass(frozen=True)
class BatchStatus:
    """A batch as ``app.batches.get`` reads it: its record, and its counts summed over its shards."""

    id: str
    #: ``open`` (takes items), ``sealed`` (takes none; completes when all are done) or ``complete``.
    status: str
    #: ``{"pending", "succeeded", "failed"}``; frozen at completion.
    counts: dict[str, int]
    on_complete: str
    final_stage: bool
    parent_id: str | None
    root_id: str
    #: Child batch ids, and how many of them are complete.
    children: tuple[str, ...]
    children_complete: int
    max_item_failures: int | None
    #: True when it completed early: ``max_item_failures`` exceeded, or cancelled (``reason`` says which).
    failed: bool
    reason: str | None
    created_at: datetime | None
    sealed_at: datetime | None
    #: When it was sealed with nothing pending (and sealed its children).
    drained_at: datetime | None
    completed_at: datetime | None
    #: The completion callback's job id, once complete.
    callback_id: str | None
    shards: int
    dedupe_key: str | None = None

    @property
    def sealed(self) -> bool:
        """True once it takes no more items."""
        return self.status != batch_records.OPEN

    @property
    def complete(self) -> bool:
        """True once its callback job exists (it completed, or failed early)."""
        return self.status == batch_records.COMPLETE


def _status(record: batch_records.BatchRecord, counts: dict[str, int]) -> BatchStatus:
    return BatchStatus(
        id=record.id,
        status=record.status,
        counts=counts,
        on_complete=record.on_complete,
        final_stage=record.final_stage,
        parent_id=record.parent_id,
        root_id=record.root_id,
        children=record.kids,
        children_complete=record.children_done,
        max_item_failures=record.max_item_failures,
        failed=record.failed,
        reason=record.reason,
        created_at=record.created_at,
        sealed_at=record.sealed_at,
        drained_at=record.drained_at,
        completed_at=record.completed_at,
        callback_id=record.callback_id,
        shards=record.shards,
        dedupe_key=record.dedupe_key,
    )


def status_flow(env: BatchEnv, batch_id: str) -> Flow[BatchStatus]:
    """The batch's record and counts; ``BatchNotFound`` when there is none."""
    record = yield from read_record_flow(env, batch_id)
    if record.final_counts is not None:
        return _status(record, record.final_counts)
    shards = yield from read_shards_flow(env, record)
    return _status(record, batch_records.read_counts(shards).as_dict())


def create_flow(
    env: BatchEnv,
    registry: Registry,
    *,
    on_complete: str | Handler,
    parent: str | None,
    final_stage: bool,
    dedupe_key: str | None,
    max_item_failures: int | None,
    shards: int,
    now: float,
    notify: Notify | Mapping[str, str] | None = None,
    tags: Mapping[str, str] | None = None,
) -> Flow[batch_records.BatchRecord]:
    """Create the batch (record, shards, the parent's count) in one transaction; its record.

    A dedupe key names one batch: created again with the same configuration, it is the same batch;
    with another, ``IdempotencyConflict``. A parent that has drained (or completed) takes no child:
    ``BatchSealed``.
    """
    if not 1 <= shards <= batch_records.MAX_SHARDS:
        raise ConfigurationError(
            f"shards={shards}: a batch has 1 to {batch_records.MAX_SHARDS} counter shards"
        )
    if max_item_failures is not None and max_item_failures < 0:
        raise ConfigurationError(f"max_item_failures={max_item_failures} must be 0 or more (None: no limit)")
    callback_type = registry.name_of(on_complete)
    spec_of = registry.get(callback_type) if callback_type in registry else None
    root = (yield from read_record_flow(env, parent)).root_id if parent else None
    batch_id = batch_records.new_batch_id(dedupe_key)
    spec = batch_records.BatchSpec(
        id=batch_id,
        on_complete=callback_type,
        callback_queue=spec_of.queue if spec_of else "default",
        callback_version=spec_of.version if spec_of else 1,
        final_stage=final_stage,
        shards=shards,
        parent_id=parent,
        root_id=root or batch_id,
        max_item_failures=max_item_failures,
        dedupe_key=dedupe_key,
        now=now,
        notify=notify_target(notify),
        tags=store_tags.checked(tags),
    )
    entries = batch_records.create_entries(env.table, spec)
    entries[0]["Put"]["Item"]["batch_key"] = av_s(
        batch_records.list_key(batch_id)
    )  # found by ``batches list``
    refused = yield from apply_all(entries)
    if isinstance(refused, Refused):
        if refused.code(0) == CONDITION_FAILED and (found := refused.item_at(0)) is not None:
            existing = batch_records.read_record(found)
            if existing.config_hash == spec.config_hash:
                return existing
            raise IdempotencyConflict(
                f"dedupe key {dedupe_key!r} already names batch {batch_id} with another configuration "
                "(callback, parent, final_stage, max_item_failures or shards); reuse it or choose a new key"
            )
        if parent and refused.code(len(entries) - 1) == CONDITION_FAILED:
            if refused.item_at(len(entries) - 1) is None:
                raise BatchNotFound(f"no batch with id {parent!r} in table {env.table}")
            raise BatchSealed(
                f"batch {parent} has drained (its children are sealed) or completed: it takes no new child"
            )
        raise refused.as_error()
    return batch_records.read_record(entries[0]["Put"]["Item"])


def add_flow(
    env: BatchEnv,
    registry: Registry,
    batch: batch_records.BatchRecord,
    request: JobRequest[Any],
    *,
    dedupe_key: str | None,
    now: float,
) -> Flow[str]:
    """Add one item (see the module docstring); its id. The same dedupe key again is the same item.

    The item inherits the batch's tags (its own win over them).
    """
    request = dataclasses.replace(request, tags=store_tags.inherited(batch.tags, request.tags))
    job = build_new_job(request, registry=registry, settings=env.settings, now=now, in_record=True)
    outside_producer(job, "a batch")
    if dedupe_key is not None:
        item_id = idempotent_job_id(job.type, f"{batch.id}\0{dedupe_key}", job.tenant)
        job = dataclasses.replace(job, id=item_id, idempotency_key=dedupe_key)
    place = BatchPlace(batch_records.item_key(batch.id, job.id, batch.shards))
    job = dataclasses.replace(job, root_id=batch.root_id, batch=place)
    yield from env.queue_urls.flow([] if job.held else [route_of(job)])  # fails the add, not its send
    yield from write_objects([job])
    token = nonce()
    put = transact.job_entry(
        env.table, job, token=token, pending_until=job.run_at + env.settings.stale_after_s
    )
    refused = yield from apply_all([put, batch_records.add_entry(env.table, place.key)], wid=token, own=[0])
    if isinstance(refused, Refused):
        reasons = refused.reasons
        same = transact.existing_job(reasons[0], job) if reasons else None
        if same is True:
            return job.id  # added before: counted then, not again
        if same is False:
            raise IdempotencyConflict(
                f"dedupe key {dedupe_key!r} already names item {job.id} of batch {batch.id} with a "
                "different payload; reuse the same payload or choose a new key"
            )
        if refused.code(1) == CONDITION_FAILED:
            if refused.item_at(1) is None:
                raise BatchNotFound(f"batch {batch.id} has no counter shard for this item: it does not exist")
            raise BatchSealed(f"batch {batch.id} is sealed: it takes no more items")
        raise refused.as_error()
    yield from store_tags.write_jobs_flow(env.settings, [job])
    yield from env.hint(job, put)
    return job.id


def cancel_flow(env: BatchEnv, batch_id: str, now: float) -> Flow[BatchStatus]:
    """Complete the batch at once as failed (``cancelled``), cancel its waiting items, its sub-tree too."""
    record = yield from read_record_flow(env, batch_id)
    if record.status != batch_records.COMPLETE:
        yield from fail_flow(env, record, "cancelled by request", now)
    return (yield from status_flow(env, batch_id))


def list_flow(env: BatchEnv, *, limit: int = 50) -> Flow[list[BatchStatus]]:
    """The newest batches (``limit``), from their partitions of the ``batch_items`` index."""
    ids: list[str] = []
    for n in range(batch_records.LIST_SHARDS):
        start = None
        while True:
            page = yield Call(
                "dynamodb", "query", batch_records.query_items(env.table, f"list#{n:02d}", start)
            )
            ids += [i["id"]["S"] for i in page.get("Items", [])]
            start = page.get("LastEvaluatedKey")
            if not start:
                break
    records = yield from items_flow(env, ids, ("id", "status", "created_at"))
    newest = sorted(records, key=lambda i: float(i.get("created_at", {}).get("N", 0)), reverse=True)
    out = []
    for item in newest[:limit]:
        out.append((yield from status_flow(env, item["id"]["S"].removeprefix("batch#"))))
    return out


class Batch(Namespace):
    """A handle on one batch (``app.batches.create``): add items, seal it, read it."""

    def __init__(self, kernel: Callable[[], Kernel], record: batch_records.BatchRecord) -> None:
        super().__init__(kernel)
        self._record = record

    @property
    def id(self) -> str:
        """The batch id (``app.batches.get``, ``parent=``, ``ctx.add_to_batch``)."""
        return self._record.id

    @property
    def root_id(self) -> str:
        """The id of the tree's root batch (its own id for a root)."""
        return self._record.root_id

    def __repr__(self) -> str:
        return f"Batch({self.id!r})"

    def _add(
        self, /, job_type: Any, payload: Any = None, *, dedupe_key: str | None = None, **options: Any
    ) -> Flow[str]:
        """Add an item (``App.enqueue``'s options: tenant, delay, run_at, queue, parent_id); its job id.

        ``dedupe_key``: the same key again returns the same item (counted once); with another
        payload, ``IdempotencyConflict``. ``BatchSealed`` once the batch is sealed.
        """
        k = self.kernel
        request = JobRequest(job_type, payload, **options)
        return add_flow(
            env_of(k), k.registry, self._record, request, dedupe_key=dedupe_key, now=k.clock.now()
        )

    def _seal(self) -> Flow[None]:
        """No more items: the batch completes once every item is done (at once if none is pending)."""
        return seal_flow(env_of(self.kernel), self.id, self.kernel.clock.now())

    def _status(self) -> Flow[BatchStatus]:
        """The batch's status and counts (``app.batches.get(self.id)``)."""
        return status_flow(env_of(self.kernel), self.id)

    add, aadd = sync_verb(_add), async_verb(_add)
    seal, aseal = sync_verb(_seal), async_verb(_seal)
    status, astatus = sync_verb(_status), async_verb(_status)


def env_of(kernel: Kernel) -> BatchEnv:
    """The flows' view of a kernel."""
    return BatchEnv(kernel.settings, kernel.queue_urls, kernel.logger, kernel.clock.now, kernel.registry)


def add_to_batch_flow(
    kernel: Kernel, batch_id: str, request: JobRequest[Any], *, dedupe_key: str | None
) -> Flow[str]:
    """Add an item to a batch known by id only (``JobContext.add_to_batch``): reads its record first."""
    env = env_of(kernel)
    record = yield from read_record_flow(env, batch_id)
    return (
        yield from add_flow(
            env, kernel.registry, record, request, dedupe_key=dedupe_key, now=kernel.clock.now()
        )
    )


# ── the App's namespace: ``app.batches`` ─────────────────────────────────────────────────────
class Batches(Namespace):
    """``app.batches``: create a batch, read it, wait for it, cancel it (docs/workflows-batches.md)."""

    def _create(
        self,
        on_complete: str | Handler,
        *,
        parent: str | None = None,
        final_stage: bool = False,
        dedupe_key: str | None = None,
        max_item_failures: int | None = None,
        shards: int | None = None,
        notify: Notify | Mapping[str, str] | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> Flow[Batch]:
        """Create a batch whose ``on_complete`` job runs once when it is sealed and every item is done.

        ``parent``: a batch that seals this one once it drains; ``final_stage``: the callback gets
        the succeeded items' results; ``dedupe_key``: the same key is the same batch;
        ``max_item_failures``: more failed items complete it at once as failed; ``shards``: counter
        shards (1-64, default 16), the item throughput a batch takes (docs/workflows-batches.md);
        ``notify``: a webhook, queue or bus told when the batch ends (its callback job's end);
        ``tags``: what its items are about, each item inheriting them (``enqueue(tags=)``).
        """
        k = self.kernel
        record = yield from create_flow(
            env_of(k),
            k.registry,
            on_complete=on_complete,
            now=k.clock.now(),
            parent=parent,
            final_stage=final_stage,
            dedupe_key=dedupe_key,
            max_item_failures=max_item_failures,
            shards=shards or batch_records.DEFAULT_SHARDS,
            notify=notify,
            tags=tags,
        )
        return Batch(self._kernel, record)

    def _get(self, batch_id: str) -> Flow[BatchStatus]:
        """The batch's status and counts; ``BatchNotFound`` if there is none."""
        return status_flow(env_of(self.kernel), batch_id)

    def _wait(self, batch_id: str, *, timeout: float | timedelta = 60.0) -> Flow[BatchStatus]:
        """The batch once complete; ``WaitTimeout`` past ``timeout``."""
        env = env_of(self.kernel)
        return waiting.poll_flow(
            lambda _first: status_flow(env, batch_id),
            lambda batch: batch.status == "complete",
            to_seconds(timeout),
            f"batch {batch_id}",
        )

    def _cancel(self, batch_id: str) -> Flow[BatchStatus]:
        """Complete the batch at once as failed, cancel its waiting items (running ones are asked to stop) and its sub-tree."""
        return cancel_flow(env_of(self.kernel), batch_id, self.kernel.clock.now())

    create, acreate = sync_verb(_create), async_verb(_create)
    get, aget = sync_verb(_get), async_verb(_get)
    wait, await_result = sync_verb(_wait), async_verb(_wait)
    cancel, acancel = sync_verb(_cancel), async_verb(_cancel)


class ItemStream:
    """What a handler's ``ctx.add_to_batch`` calls (the worker sets it on each ``JobContext``)."""

    def __init__(self, kernel: Kernel) -> None:
        self._kernel = kernel

    def add(
        self, ctx: Any, batch_id: str, job_type: Any, payload: Any, *, dedupe_key: str | None, **options: Any
    ) -> str:
        """Add from a sync handler's thread; the item's parent is the running job."""
        options.setdefault("parent_id", ctx.job.id)
        request = JobRequest(job_type, payload, **options)
        return self._kernel.run(add_to_batch_flow(self._kernel, batch_id, request, dedupe_key=dedupe_key))

    async def aadd(
        self, ctx: Any, batch_id: str, job_type: Any, payload: Any, *, dedupe_key: str | None, **options: Any
    ) -> str:
        """Add from an async handler."""
        options.setdefault("parent_id", ctx.job.id)
        request = JobRequest(job_type, payload, **options)
        return await self._kernel.arun(
            add_to_batch_flow(self._kernel, batch_id, request, dedupe_key=dedupe_key)
        )
