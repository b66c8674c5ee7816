"""Transactional enqueue: the caller's DynamoDB writes and its jobs, all or nothing.

::

    with app.transaction() as tx:                      # async: async with app.atransaction() as tx
        tx.put(TableName="orders", Item={"pk": {"S": "o1"}}, ConditionExpression="attribute_not_exists(pk)")
        job_id = tx.enqueue("orders.ship", {"order": 1}, idempotency_key="o1")

Items, keys and values are the boto3 *client's* low-level shapes (``{"S": "o1"}``), exactly what
``transact_write_items`` takes; ``tx.put``/``update``/``delete``/``condition_check`` take the
parameters of its ``Put``/``Update``/``Delete``/``ConditionCheck``. Nothing is sent inside the
block: an exception there discards the transaction. On a clean exit, in this order::

    GetQueueUrl (cached)   TransactWriteItems          SendMessageBatch      UpdateItem per job (clear)
    ─────────────────────┬───────────────────────────┬─────────────────────┬─────────────────────────▶
     crash: nothing      │ crash: nothing, or all of │ crash: the records  │ crash: the hint went; the
     written             │ it (one request)          │ wait for the sweeper│ sweeper sends a duplicate
                         │                           │ at run_at + stale   │ only if no claim by then

The job records are written inside the transaction with their payload and a ``pending`` attention
entry due ``stale_after_s`` after the job's ``run_at`` (``sqsjobs.store.transact``): a crash between
the commit and the send loses nothing, the sweeper sends the hint then. Once the message is sent,
one conditional UpdateItem per job clears the payload and the entry, so the record is a plain
enqueue's and the sweeper never repeats a hint that went. A job held for later (``run_at`` beyond
the 15 min SQS delay cap) is the plain held record: no message now, the sweeper sends it when due.

Refusals: a false condition cancels everything and raises ``TransactionCancelled`` with one reason
per item; a job whose idempotency key already names a job with another payload raises
``IdempotencyConflict`` (chained to the cancellation); the same key with the same payload cancels
the transaction too (the reason says the job exists: an earlier transaction made it). Limits (100
items, 4 MB, one write per item) raise ``TransactionInvalid`` at the add, before anything is sent.
Costs and measured figures: docs/payloads.md, "Transactional enqueue".
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, NoReturn, Unpack, overload

from sqsjobs.errors import (
    CancellationReason,
    IdempotencyConflict,
    StoreError,
    TransactionCancelled,
    TransactionInvalid,
)
from sqsjobs.producer import (
    EnqueueOptions,
    JobRequest,
    build_new_job,
    hint_written,
    route_of,
    write_objects,
)
from sqsjobs.store import tags, transact
from sqsjobs.store.apply import Refused, apply_all
from sqsjobs.store.codec import av_s, nonce
from sqsjobs.store.enqueue import outside_producer

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from mypy_boto3_dynamodb.type_defs import (
        ConditionCheckTypeDef,
        DeleteTypeDef,
        PutTypeDef,
        UpdateTypeDef,
    )

    from sqsjobs._aws import Flow
    from sqsjobs.config import Settings
    from sqsjobs.observability.metrics import JobMetrics
    from sqsjobs.options import P
    from sqsjobs.registry import Handler, HandlerOf, Registry
    from sqsjobs.store.enqueue import NewJob
    from sqsjobs.transport.queues import QueueUrls


@dataclass(frozen=True)
class _Item:
    """One item of the transaction, and what the add-time checks know of it."""

    operation: str
    params: dict[str, Any]
    #: The item's key when known: the ``Key`` of an update, delete or check, a job's ``id``. A
    #: caller's put names no key (only the table's schema says which attributes are).
    key: dict[str, Any] | None
    size: int
    job: NewJob | None = None

    @property
    def table(self) -> str:
        return str(self.params["TableName"])

    def names_same_item(self, other: _Item) -> bool:
        """True when both items certainly target one key (a put is matched by the key it contains)."""
        if self.table != other.table:
            return False
        if self.key is not None and other.key is not None:
            return self.key == other.key
        known, put = (self, other) if self.key is not None else (other, self)
        if known.key is None or put.operation != "Put":
            return False  # two caller puts: only DynamoDB knows; it refuses at the commit
        item = put.params["Item"]
        return all(item.get(name) == value for name, value in known.key.items())


class Transaction:
    """Writes and jobs gathered by ``App.transaction()``/``atransaction()``, committed on a clean exit.

    Each add is checked at once (shapes, limits, one write per item) and raises
    ``TransactionInvalid`` without sending anything; ``commit_flow`` is the one sans-I/O flow both
    drivers run.
    """

    def __init__(
        self,
        *,
        registry: Registry,
        settings: Settings,
        queue_urls: QueueUrls,
        now: Callable[[], float],
        logger: Any = None,
        metrics: JobMetrics | None = None,
        run: Callable[[Flow[list[str]]], list[str]],
        arun: Callable[[Flow[list[str]]], Awaitable[list[str]]],
    ) -> None:
        self._registry = registry
        self._run, self._arun = run, arun
        self._settings = settings
        self._queue_urls = queue_urls
        self._now = now
        self._logger = logger
        self._metrics = metrics
        self._items: list[_Item] = []
        self._size = 0
        self._closed = False
        #: The transaction's ``ClientRequestToken``, also written into its job records (``wid``).
        self.token = nonce()
        #: True once the transaction is written.
        self.committed = False

    @property
    def job_ids(self) -> list[str]:
        """The ids of the jobs enqueued so far, in order."""
        return [i.job.id for i in self._items if i.job is not None]

    # ── the caller's writes: the parameters of transact_write_items' Put/Update/Delete/ConditionCheck
    def put(self, **params: Unpack[PutTypeDef]) -> None:
        """Put an item (``TableName``, ``Item``, optional ``ConditionExpression``...)."""
        self._add_write("Put", dict(params), "Item")

    def update(self, **params: Unpack[UpdateTypeDef]) -> None:
        """Update an item (``TableName``, ``Key``, ``UpdateExpression``, optional condition...)."""
        self._add_write("Update", dict(params), "Key")

    def delete(self, **params: Unpack[DeleteTypeDef]) -> None:
        """Delete an item (``TableName``, ``Key``, optional condition...)."""
        self._add_write("Delete", dict(params), "Key")

    def condition_check(self, **params: Unpack[ConditionCheckTypeDef]) -> None:
        """Require a condition on an item that is not written (``TableName``, ``Key``, ``ConditionExpression``)."""
        self._add_write("ConditionCheck", dict(params), "Key")

    # ``job_type`` is the type's name or its handler, as in ``App.enqueue``.
    @overload
    def enqueue(self, job_type: str, payload: Any = None, **options: Unpack[EnqueueOptions]) -> str: ...
    @overload
    def enqueue(self, job_type: HandlerOf[P], payload: P, **options: Unpack[EnqueueOptions]) -> str: ...
    def enqueue(self, job_type: str | Handler, payload: Any = None, **options: Unpack[EnqueueOptions]) -> str:
        """Add a job, with ``App.enqueue``'s options; returns its id (the job exists once committed).

        The same idempotency key and payload twice in one transaction is one job (the same id);
        the same key with another payload raises ``IdempotencyConflict`` here.
        """
        job = build_new_job(
            JobRequest(job_type, payload, **options),
            registry=self._registry,
            settings=self._settings,
            now=self._now(),
            in_record=True,
        )
        outside_producer(job, "a transaction")
        for item in self._items:
            if item.job is not None and item.job.id == job.id:
                if item.job.payload_hash == job.payload_hash and item.job.type == job.type:
                    return job.id
                raise IdempotencyConflict(
                    f"idempotency key {job.idempotency_key!r} names job {job.id} twice in this "
                    "transaction, with different payloads"
                )
        entry = transact.job_entry(
            self._settings.table_name,
            job,
            token=self.token,
            pending_until=job.run_at + self._settings.stale_after_s,
        )["Put"]
        self._add(_Item("Put", entry, {"id": av_s(job.id)}, transact.item_size(entry["Item"]), job))
        return job.id

    # ``with app.transaction() as tx:`` commits with the sync clients on a clean exit, ``async with``
    # with the async ones; an exception in the block writes nothing and propagates.
    def __enter__(self) -> Transaction:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        if exc_type is not None:
            self.discard()
        else:
            self._run(self.commit_flow())

    async def __aenter__(self) -> Transaction:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        if exc_type is not None:
            self.discard()
        else:
            await self._arun(self.commit_flow())

    def discard(self) -> None:
        """Drop everything added; nothing was or will be written."""
        self._closed = True
        self._items.clear()

    def _add_write(self, operation: str, params: dict[str, Any], shape: str) -> None:
        for where in (shape, "ExpressionAttributeValues"):
            problem = transact.attribute_value_error(where, dict(params.get(where) or {}))
            if problem:
                raise TransactionInvalid(f"tx.{_METHOD[operation]}: {problem}")
        size = transact.item_size(params[shape]) + transact.item_size(
            params.get("ExpressionAttributeValues", {})
        )
        self._add(_Item(operation, params, params[shape] if shape == "Key" else None, size))

    def _add(self, item: _Item) -> None:
        if self._closed:
            raise TransactionInvalid("this transaction is already committed or discarded; open a new one")
        if len(self._items) >= transact.MAX_ITEMS:
            raise TransactionInvalid(
                f"a transaction holds at most {transact.MAX_ITEMS} items (DynamoDB's TransactWriteItems "
                "limit), jobs included; split the work or enqueue some jobs outside it"
            )
        if self._size + item.size > transact.MAX_BYTES:
            raise TransactionInvalid(
                f"this {item.operation} would bring the transaction to {self._size + item.size} bytes, over "
                f"DynamoDB's {transact.MAX_BYTES}-byte limit for one TransactWriteItems"
            )
        for index, other in enumerate(self._items):
            if item.names_same_item(other):
                raise TransactionInvalid(
                    f"{_describe(item)} targets the same item as item {index} ({_describe(other)}); "
                    "DynamoDB refuses two operations on one item in a transaction: combine them"
                )
        self._items.append(item)
        self._size += item.size

    # ── the commit ───────────────────────────────────────────────────────────────────────────
    def commit_flow(self) -> Flow[list[str]]:
        """Write everything in one TransactWriteItems, then send the hints and clear their records."""
        self._closed = True
        if not self._items:
            return []
        jobs = [i.job for i in self._items if i.job is not None]
        # Before anything is written: a queue that does not resolve fails the transaction, not its send.
        yield from self._queue_urls.flow({route_of(j) for j in jobs if not j.held})
        yield from write_objects(jobs)  # payloads over the record's limit, before the record names them
        entries = [{item.operation: item.params} for item in self._items]
        job_indexes = [n for n, i in enumerate(self._items) if i.job is not None]
        try:
            committed = yield from apply_all(entries, wid=self.token, own=job_indexes)
        except StoreError as exc:
            self._raise_invalid(exc)
        if isinstance(committed, Refused):
            self._raise_refusal(committed)
        self.committed = True
        if self._metrics is not None:
            for job in jobs:
                self._metrics.enqueued(job.type, job.tenant)
        yield from tags.write_jobs_flow(self._settings, jobs)  # after the commit: its jobs exist
        written = [(item.job, item.params["Item"]) for item in self._items if item.job is not None]
        yield from hint_written(
            written,
            table=self._settings.table_name,
            queue_urls=self._queue_urls,
            settings=self._settings,
            logger=self._logger,
        )
        return [j.id for j in jobs]

    def _raise_invalid(self, exc: StoreError) -> NoReturn:
        """Raise what the caller can act on for a transaction DynamoDB would not take as built."""
        if exc.code == "ValidationException":  # a bad expression, a size over the limits, one item twice...
            hint = (
                " (two of its operations target one item: two puts of one key cannot be told apart "
                "before the commit)"
                if transact.is_same_item_refusal(exc)
                else ""
            )
            raise TransactionInvalid(
                f"DynamoDB refused the transaction as built{hint}, nothing was written: {exc}"
            ) from exc
        raise exc

    def _raise_refusal(self, refused: Refused) -> NoReturn:
        """Raise what the caller can act on for a cancelled transaction, chained to DynamoDB's answer."""
        exc, raw = refused.as_error(), refused.reasons
        reasons = []
        conflicts = []
        for index, (item, answer) in enumerate(zip(self._items, raw, strict=False)):
            reason = CancellationReason(
                index=index,
                operation=item.operation,
                table=item.table,
                code=str(answer.get("Code", "None")),
                message=str(answer.get("Message", "")),
                item=answer.get("Item"),
                job_id=item.job.id if item.job else None,
            )
            if item.job is not None:
                same = transact.existing_job(answer, item.job)
                if same is False:
                    conflicts.append(item.job)
                if same is not None:
                    reason = _job_exists(reason, item.job, same=same)
            reasons.append(reason)
        failed = [r for r in reasons if r.failed]
        cancelled = TransactionCancelled(
            "transaction cancelled, nothing was written: "
            + "; ".join(
                f"item {r.index} ({r.operation} on {r.table!r}): {r.code}: {r.message}" for r in failed
            ),
            reasons=tuple(reasons),
        )
        if conflicts and len(conflicts) == len(failed):
            conflict = IdempotencyConflict(
                "; ".join(
                    f"idempotency key {j.idempotency_key!r} already names job {j.id} with a different "
                    "payload; reuse the same payload or choose a new key (the transaction was cancelled)"
                    for j in conflicts
                )
            )
            cancelled.__cause__ = exc
            raise conflict from cancelled
        raise cancelled from exc


_METHOD = {"Put": "put", "Update": "update", "Delete": "delete", "ConditionCheck": "condition_check"}


def _describe(item: _Item) -> str:
    if item.job is not None:
        return f"the record of job {item.job.id} ({item.job.type!r})"
    return f"tx.{_METHOD[item.operation]} on {item.table!r}"


def _job_exists(reason: CancellationReason, job: NewJob, *, same: bool) -> CancellationReason:
    """The reason of a job record refused by its idempotency check, said in the job's terms."""
    key = f"idempotency key {job.idempotency_key!r}" if job.idempotency_key else "no idempotency key"
    if same:
        message = f"job {job.id} already exists with this payload ({key}): an earlier enqueue or transaction made it"
    else:
        message = f"job {job.id} already exists with a different payload ({key})"
    return replace(reason, message=message)
