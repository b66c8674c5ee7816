"""When a batch is done: seal, drain, complete (exactly once), and cancel — sans-I/O flows.

Both sides write, then read (consistently)::

    finisher:  item's finish + ADD succeeded|failed on its shard (one transaction) ─▶ read its shard
               ─▶ sealed and done == added? read every shard ─▶ drained? complete
    sealer:    record → sealed + every shard sealed (one transaction) ─▶ read every shard ─▶ complete

so whichever of the last finish and the seal lands second sees the other, and at least one of them
completes the batch. Completion is one conditional transaction (the record → complete unless it is
already, the callback job's record, the parent's ``children_done``), so when two of them race, one
callback job exists. A crash after a write and before its check leaves the record's ``batch``
attention entry (set at the seal, removed by the completion): the sweeper runs the same check when
it is due (``repair_flow``).

Trees: a batch is *drained* when sealed with nothing pending; it then seals its children, and it is
*complete* once drained with every child complete. A child's completion counts on its parent and
re-checks it, so a tree completes from the leaves up, root last.
"""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from sqsjobs._aws import Call, Flow
from sqsjobs.batches import records as batch_records
from sqsjobs.errors import BatchNotFound
from sqsjobs.job import JobStatus
from sqsjobs.notify.plugin import CancelTold, told_cancel
from sqsjobs.producer import hint_written
from sqsjobs.store import batched, requests, transact
from sqsjobs.store.apply import Landed, Refusal, Refused, apply, apply_all
from sqsjobs.store.codec import av_s, idempotent_job_id, job_from_item, nonce
from sqsjobs.store.conditions import Compare, Fragment
from sqsjobs.store.enqueue import NewJob
from sqsjobs.store.operator import cancel, request_cancel
from sqsjobs.store.schema import BATCH, attention_partitions, due_records, query_due
from sqsjobs.store.transact import CONDITION_FAILED
from sqsjobs.store.write import Check, Write
from sqsjobs.transport import objects

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from sqsjobs.config import Settings
    from sqsjobs.job import Job
    from sqsjobs.registry import Registry
    from sqsjobs.transport.queues import QueueUrls


@dataclass(frozen=True)
class BatchEnv:
    """What the flows need: the table and timings, the queues a callback goes to, a logger."""

    settings: Settings
    queue_urls: QueueUrls
    logger: Any = None
    #: Read when the completion is written (not when the check began, which may be long before):
    #: a parent's ``completed_at`` is then never earlier than its children's.
    clock: Callable[[], float] = time.time
    #: The job types: what a cancelled item with a ``notify`` target is told by (None: no item has one).
    registry: Registry | None = None

    def told(self, job: Job, now: float) -> CancelTold:
        """The delivery a cancel of waiting ``job`` writes with it (``notify.plugin.told_cancel``)."""
        return (
            CancelTold(self.settings)
            if self.registry is None
            else told_cancel(self.registry, self.settings, job, now)
        )

    @property
    def table(self) -> str:
        """The jobs table, where batches live too."""
        return self.settings.table_name

    def hint(self, job: NewJob, put: Mapping[str, Any]) -> Flow[set[str]]:
        """Send the message of a job a batch's transaction wrote (``put``), then clear its entry."""
        return hint_written(
            [(job, put["Put"]["Item"])],
            table=self.table,
            queue_urls=self.queue_urls,
            settings=self.settings,
            logger=self.logger,
        )

    def log(self, event: str, **fields: Any) -> None:
        """One JSON line per batch transition."""
        if self.logger is not None:
            self.logger.info(event, extra=fields)


def read_record_flow(env: BatchEnv, batch_id: str) -> Flow[batch_records.BatchRecord]:
    """The batch record (consistent read); ``BatchNotFound`` when there is none."""
    found = yield Call("dynamodb", "get_item", batch_records.get_record(env.table, batch_id))
    if "Item" not in found:
        raise BatchNotFound(f"no batch with id {batch_id!r} in table {env.table}")
    return batch_records.read_record(found["Item"])


def read_shards_flow(env: BatchEnv, record: batch_records.BatchRecord) -> Flow[list[dict[str, Any]]]:
    """Every shard item of the batch, strongly consistent, in shard order."""
    keys = batch_records.shard_keys(record.id, record.shards)
    items = yield from batched.get_items(env.table, keys, consistent=True)
    return sorted(items, key=lambda i: str(i["id"]["S"]))


# ── seal, check, complete ───────────────────────────────────────────────────────────────────
def seal_flow(env: BatchEnv, batch_id: str, now: float) -> Flow[None]:
    """Seal the batch (no item may be added after), then check whether it is complete (idempotent)."""
    record = yield from read_record_flow(env, batch_id)
    if record.status == batch_records.OPEN:
        entries = batch_records.seal_entries(
            env.table, record, now=now, repair_at=now + env.settings.stale_after_s
        )
        sealed = yield from apply_all(entries)
        if isinstance(sealed, Refused) and sealed.code(0) != CONDITION_FAILED:
            raise sealed.as_error()  # not "sealed already": a shard is missing
        if isinstance(sealed, Landed):
            env.log("batch sealed", batch_id=batch_id)
    yield from check_flow(env, batch_id, now)


def after_finish_flow(env: BatchEnv, batch_key: str, *, failed: bool, now: float) -> Flow[None]:
    """After an item's terminal write landed: read its shard; check the batch if that shard is done."""
    batch_id, shard = batch_records.shard_of_key(batch_key)
    found = yield Call("dynamodb", "get_item", batch_records.get_shard(env.table, shard))
    counts = batch_records.read_counts([found["Item"]] if "Item" in found else [])
    if failed or counts.drained:  # a failure may exceed max_item_failures, whatever the shard says
        yield from check_flow(env, batch_id, now, for_failure=failed and not counts.drained)


def check_flow(
    env: BatchEnv, batch_id: str, now: float, *, for_failure: bool = False, seal_children: bool = True
) -> Flow[bool]:
    """Complete the batch if it is done (or failed); seal its children once it is drained.

    True when this call completed it. ``for_failure``: called for a failed item only (its shard
    is not done): nothing but ``max_item_failures`` can apply. ``seal_children`` False: called by
    a child's completion, while whoever drained this batch is sealing the others (or the sweeper
    will, after a crash), so the children are not sealed again from every one of them.
    """
    try:
        record = yield from read_record_flow(env, batch_id)
    except BatchNotFound:
        return False
    if record.status == batch_records.COMPLETE or (for_failure and record.max_item_failures is None):
        return False
    shard_items = yield from read_shards_flow(env, record)
    counts = (
        batch_records.read_counts(shard_items)
        if len(shard_items) == record.shards
        else batch_records.Counts(sealed=False)
    )
    if record.max_item_failures is not None and counts.failed > record.max_item_failures:
        reason = f"{counts.failed} items failed, more than max_item_failures={record.max_item_failures}"
        return (yield from fail_flow(env, record, reason, now))
    if record.status != batch_records.SEALED or not counts.drained:
        return False
    if record.children_done < record.children:
        if record.drained_at is None:
            drained = yield from apply(batch_records.drain(env.table, record.id, now=now))
            if isinstance(drained, Landed):  # refused: drained by another checker already
                env.log("batch drained, sealing its children", batch_id=batch_id, children=list(record.kids))
        elif not seal_children:
            return False
        for kid in record.kids:  # each completes (or not yet) and re-checks this batch
            yield from seal_flow(env, kid, now)
        return False
    return (yield from _complete(env, record, counts, shard_items, now, failed=False, reason=None))


def fail_flow(env: BatchEnv, record: batch_records.BatchRecord, reason: str, now: float) -> Flow[bool]:
    """Complete the batch at once as failed (sealing it), then cancel its pending items and its sub-tree."""
    shard_items = yield from read_shards_flow(env, record)
    counts = batch_records.read_counts(shard_items)
    done = yield from _complete(env, record, counts, shard_items, now, failed=True, reason=reason)
    yield from stop_items_flow(env, record, now)
    for kid in record.kids:
        with contextlib.suppress(BatchNotFound):
            child = yield from read_record_flow(env, kid)
            if child.status != batch_records.COMPLETE:
                yield from fail_flow(env, child, f"parent batch {record.id} failed: {reason}", now)
    return done


def _complete(
    env: BatchEnv,
    record: batch_records.BatchRecord,
    counts: batch_records.Counts,
    shard_items: Sequence[Mapping[str, Any]],
    now: float,
    *,
    failed: bool,
    reason: str | None,
) -> Flow[bool]:
    """The one conditional completion transaction, then the callback's hint; False when another won."""
    payload: dict[str, Any] = {
        "batch_id": record.id,
        "status": "failed" if failed else "succeeded",
        "failed": failed,
        "reason": reason,
        "counts": counts.as_dict(),
        "parent_id": record.parent_id,
        "root_id": record.root_id,
    }
    if record.final_stage:
        payload["items"] = yield from succeeded_items_flow(env, record)
    now = max(now, env.clock())
    job = callback_job(env.settings, record, payload, now)
    if job.payload_ref is not None:  # the normal claim-check: before the record names the object
        yield from objects.put_flow(job.payload_ref, job.payload_json.encode())
    token = nonce()
    put = transact.job_entry(env.table, job, token=token, pending_until=now + env.settings.stale_after_s)
    entries = batch_records.complete_entries(
        env.table,
        record,
        counts,
        shard_items,
        callback=put["Put"],
        callback_id=job.id,
        now=now,
        failed=failed,
        reason=reason,
    )
    completed = yield from apply_all(entries, wid=token, own=[1])
    if isinstance(completed, Refused):
        if completed.reason is Refusal.CONTENDED:
            raise completed.as_error()
        return False  # completed by another, or an item moved back to pending since the read
    env.log("batch complete", batch_id=record.id, failed=failed, counts=counts.as_dict(), callback=job.id)
    yield from env.hint(job, put)
    if record.parent_id is not None:
        yield from check_flow(env, record.parent_id, now, seal_children=False)
    return True


def callback_job(settings: Settings, record: batch_records.BatchRecord, payload: Any, now: float) -> NewJob:
    """The completion callback: a job of the batch's ``on_complete`` type, keyed by the batch id."""
    key = f"batch:{record.id}"
    job = NewJob(
        id=idempotent_job_id(record.on_complete, key),
        type=record.on_complete,
        queue=record.callback_queue,
        payload=payload,
        payload_version=record.callback_version,
        max_attempts=None,
        run_at=now,
        now=now,
        idempotency_key=key,
        parent_id=record.id,
        root_id=record.root_id,
        notify=record.notify,
    )
    if len(job.payload_json) > settings.held_inline_payload_bytes:
        job = replace(job, payload_bucket=settings.payload_bucket)
    return job


def item_ids_flow(env: BatchEnv, record: batch_records.BatchRecord) -> Flow[list[str]]:
    """Every item id of the batch, from the ``batch_items`` index (one query per shard)."""
    ids: list[str] = []
    for n in range(record.shards):
        start = None
        while True:
            page = yield Call(
                "dynamodb", "query", batch_records.query_items(env.table, f"{record.id}#{n:02d}", start)
            )
            ids += [i["id"]["S"] for i in page.get("Items", [])]
            start = page.get("LastEvaluatedKey")
            if not start:
                break
    return ids


def items_flow(env: BatchEnv, ids: Sequence[str], fields: Sequence[str]) -> Flow[list[dict[str, Any]]]:
    """The records of ``ids``, only their ``fields``, 100 to a BatchGetItem."""
    return (yield from batched.get_items(env.table, [{"id": av_s(i)} for i in ids], attributes=fields))


def succeeded_items_flow(env: BatchEnv, record: batch_records.BatchRecord) -> Flow[list[dict[str, Any]]]:
    """``[{"id", "result"} | {"id", "result_ref"}]`` of the succeeded items, for a final-stage callback."""
    ids = yield from item_ids_flow(env, record)
    items = yield from items_flow(env, ids, ("id", "status", "result", "result_ref"))
    out = []
    for item in sorted(items, key=lambda i: str(i["id"]["S"])):
        if item.get("status", {}).get("S") != JobStatus.SUCCEEDED:
            continue
        entry: dict[str, Any] = {"id": item["id"]["S"]}
        if "result_ref" in item:
            entry["result_ref"] = item["result_ref"]["S"]
        else:
            entry["result"] = _json_attr(item.get("result"))
        out.append(entry)
    return out


def _json_attr(value: Mapping[str, Any] | None) -> Any:
    return None if value is None else json.loads(value["S"])


# ── cancelling items ────────────────────────────────────────────────────────────────────────
def cancel_item_flow(env: BatchEnv, job: Job, now: float) -> Flow[bool]:
    """Cancel a waiting batch item and count it as failed, in one transaction; then check its batch.

    False when the item is no longer waiting (it started, or finished): nothing was written.
    """
    assert job.batch is not None
    key = job.batch.key
    params = cancel(env.table, job.id, now=now, retention_s=env.settings.retention_s, batch_key=key)
    told = env.told(job, now)
    entries = [
        {"Update": params.transact_item()},
        batch_records.count_entry(env.table, key, "failed"),
        *told.entries(),
    ]
    cancelled = yield from apply_all(entries)
    if isinstance(cancelled, Refused):
        if cancelled.reason is Refusal.CONTENDED:
            raise cancelled.as_error()
        return False
    yield from told.send_flow(env.queue_urls, env.logger)
    yield from after_finish_flow(env, key, failed=True, now=now)
    return True


#: What a batch's stop reads of each item: whether it waits, its count's key, and whether a target is told.
STOP_FIELDS = ("id", "status", "batch_key", "notify")


def _job_flow(env: BatchEnv, job_id: str) -> Flow[Job]:
    found = yield Call("dynamodb", "get_item", requests.get(env.table, job_id))
    return job_from_item(found["Item"])


def stop_items_flow(env: BatchEnv, record: batch_records.BatchRecord, now: float) -> Flow[dict[str, int]]:
    """Cancel the batch's waiting items and ask its running ones to stop; how many of each."""
    ids = yield from item_ids_flow(env, record)
    items = yield from items_flow(env, ids, STOP_FIELDS)
    done = {"cancelled": 0, "requested": 0}
    for item in items:
        status = item.get("status", {}).get("S")
        if status in (JobStatus.QUEUED, JobStatus.RETRY_SCHEDULED):
            params = cancel(
                env.table,
                item["id"]["S"],
                now=now,
                retention_s=env.settings.retention_s,
                batch_key=item["batch_key"]["S"],
            )
            told = (
                env.told((yield from _job_flow(env, item["id"]["S"])), now)
                if "notify" in item
                else CancelTold(env.settings)
            )
            cancelled = yield from apply_all(
                [
                    {"Update": params.transact_item()},
                    batch_records.count_entry(env.table, item["batch_key"]["S"], "failed"),
                    *told.entries(),
                ]
            )
            if isinstance(cancelled, Landed):
                done["cancelled"] += 1
                yield from told.send_flow(env.queue_urls, env.logger)
        elif status == JobStatus.RUNNING:
            asked = yield from apply(request_cancel(env.table, item["id"]["S"], now=now))
            done["requested"] += isinstance(asked, Landed)  # refused: it finished meanwhile
    return done


# ── replay of an item ───────────────────────────────────────────────────────────────────────
def replay_write_flow(env: BatchEnv, job: Job, write: Write) -> Flow[Landed | Refused]:
    """The replay's write for a batch item: back to pending on its batch while the batch is not complete.

    One transaction: the replay, ``ADD failed -1`` on its shard (it was counted when it died or was
    cancelled) and a check that the batch record is not complete. Once the batch is complete, the
    item is replayed alone: it runs, but the batch's counts and callback stay as they were.
    Answers as ``apply(write)`` does (a refusal of the replay itself as ``Refused`` with the record),
    so the caller reads both alike.
    """
    assert job.batch is not None
    not_complete = Compare("status", "<>", ":complete")
    record_check = {
        "ConditionCheck": Check(
            env.table,
            {"id": av_s(batch_records.record_id(job.batch.id))},
            (Fragment("not_complete", not_complete, {":complete": av_s(batch_records.COMPLETE)}),),
        ).transact_item()
    }
    entries = [
        {"Update": write.transact_item()},
        batch_records.count_entry(env.table, job.batch.key, "failed", by=-1),
        record_check,
    ]
    replayed = yield from apply_all(entries)
    if isinstance(replayed, Refused):
        if replayed.code(0) == CONDITION_FAILED:
            return Refused(Refusal.CHANGED, item=replayed.item_at(0), error=replayed.error)
        return (yield from apply(write))  # the batch is complete
    found = yield Call(
        "dynamodb", "get_item", {"TableName": env.table, "Key": {"id": av_s(job.id)}, "ConsistentRead": True}
    )
    return Landed(attributes=found["Item"])


# ── repair ──────────────────────────────────────────────────────────────────────────────────
def repair_flow(env: BatchEnv, now: float) -> Flow[list[str]]:
    """The sweeper's pass: check every sealed batch whose repair entry is due; the ids it completed.

    A batch that is still not complete (items still running) is due again ``stale_after_s`` later.
    """
    completed: list[str] = []
    for partition in attention_partitions(BATCH):
        start = None
        while True:
            page = yield Call(
                "dynamodb", "query", query_due(env.table, partition, due_before=now, start_key=start)
            )
            for due in due_records(page):
                batch_id = due.id.removeprefix("batch#")
                if (yield from check_flow(env, batch_id, now)):
                    completed.append(batch_id)
                    continue
                try:
                    record = yield from read_record_flow(env, batch_id)
                except BatchNotFound:
                    continue
                if record.status != batch_records.COMPLETE and record.attn is not None:
                    next_due = now + env.settings.stale_after_s
                    # A refusal: it changed meanwhile, and its new entry stands.
                    yield from apply(batch_records.push_repair(env.table, record, next_due=next_due))
            start = page.get("LastEvaluatedKey")
            if not start:
                break
    return completed
