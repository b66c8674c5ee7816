"""Chains: jobs that run one after another, each seeing the result of the one before.

::

    chain_id = app.chains.start([("a.fetch", {"url": u}), ("a.transform", {}), ("a.store", {})])
    # each handler reads ctx.previous_result: the step before's result (None for the first)
    app.chains.get(chain_id)     # ChainStatus: running | succeeded | stopped | cancelled, and its steps
    app.chains.cancel(chain_id)

Creation is one TransactWriteItems (``chains.records``): the chain record, step 0 as a transactional
job (payload and a ``pending`` entry until its hint is sent, as ``sqsjobs.transaction`` writes it)
and steps 1.. as ``waiting`` records that hold their payloads. Each step's success unblocks the
next in the same transaction (``chains.plugin``); a step that dies or is cancelled ends the chain and
its later steps are dropped. A step's retries are its own type's policy: the chain waits.

The guarantees, the cost per step and the limits are in docs/workflows-chains.md.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from sqsjobs._aws import Call, Flow, async_verb, sync_verb
from sqsjobs.chains import records as chain_records
from sqsjobs.chains.records import ChainState
from sqsjobs.config import to_seconds
from sqsjobs.errors import ChainInvalid, ChainNotFound, IdempotencyConflict, StoreError, TransactionInvalid
from sqsjobs.job import ChainPlace, JobStatus
from sqsjobs.notify.plugin import CancelTold, told_cancel
from sqsjobs.producer import JobRequest, build_new_job, hint_written, route_of, write_objects
from sqsjobs.runtime.kernel import Namespace
from sqsjobs.store import batched, operator, transact, waiting
from sqsjobs.store import tags as store_tags
from sqsjobs.store.apply import Refused, apply_all
from sqsjobs.store.codec import av_s, job_from_item, nonce, str_attr, to_datetime
from sqsjobs.store.enqueue import outside_producer
from sqsjobs.transport.queues import QueueUrls

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence
    from datetime import datetime, timedelta

    from sqsjobs.config import Settings
    from sqsjobs.job import Notify
    from sqsjobs.registry import Registry
    from sqsjobs.store.codec import Item
    from sqsjobs.store.enqueue import NewJob

#: A step as ``app.chains.start`` takes it: ``(type, payload)``, or a ``JobRequest`` for a queue or tenant.
Step = tuple[Any, Any] | JobRequest[Any]
#: Tries of ``app.chains.cancel`` when the chain moves under it (a step claimed or finished meanwhile).
CANCEL_TRIES = 5
#: The chain states after which nothing more runs.
CHAIN_ENDED = frozenset({"succeeded", "stopped", "cancelled"})


class ChainStep(NamedTuple):
    """One step as ``app.chains.get`` shows it: ``(position, type, job_id, status)``."""

    #: The step's 0-based index in the chain (``index`` is the tuple's own method).
    position: int
    type: str
    job_id: str
    #: None when the step's record is gone (expired with its retention).
    status: JobStatus | None


@dataclass(frozen=True)
class ChainStatus:
    """A chain as its record and its steps' records say it is now."""

    id: str
    #: ``running``, ``succeeded``, ``stopped`` (a step died) or ``cancelled``.
    status: str
    steps: tuple[ChainStep, ...]
    #: The step running or next to run (the last one once succeeded).
    current: int
    #: The step where the chain stopped or was cancelled, and why.
    stopped_at: int | None
    reason: str | None
    created_at: datetime | None
    finished_at: datetime | None
    #: ``app.chains.cancel`` asked the running step to stop; the chain ends ``cancelled`` when it does.
    cancel_requested: bool = False


# ── creation ─────────────────────────────────────────────────────────────────────────────────
def build_steps(
    steps: Iterable[Step],
    *,
    registry: Registry,
    settings: Settings,
    now: float,
    dedupe_key: str | None,
    notify: Notify | Mapping[str, str] | None = None,
    tags: Mapping[str, str] | None = None,
) -> tuple[str, list[NewJob]]:
    """The chain's id and its steps as job records to write, validated as ``enqueue`` validates a job.

    ``notify``: told when the chain ends (its last step succeeded, or a step ended it dead,
    cancelled or expired); every step carries it, and only the step that ends the chain tells it.

    Payloads are sized for a record that keeps them (``held_inline_payload_bytes``): a larger one
    goes to S3 and the record keeps its reference, as for a held job.
    """
    requests = [
        dataclasses.replace(r, notify=notify, tags=store_tags.inherited(tags, r.tags))
        for r in (_request(n, s) for n, s in enumerate(steps))
    ]
    if not 1 <= len(requests) <= chain_records.MAX_STEPS:
        raise ChainInvalid(
            f"a chain has 1 to {chain_records.MAX_STEPS} steps, not {len(requests)}: the chain record and every step "
            "must fit one DynamoDB transaction (100 items); split the work into chains that start each other"
        )
    chain_id = chain_records.new_chain_id(dedupe_key)
    jobs = []
    for index, request in enumerate(requests):
        job = outside_producer(
            build_new_job(request, registry=registry, settings=settings, now=now, in_record=True), "a chain"
        )
        jobs.append(
            dataclasses.replace(
                job,
                id=chain_records.step_job_id(chain_id, index),
                chain=ChainPlace(chain_id, index, len(requests)),
            )
        )
    return chain_id, jobs


def _request(index: int, step: Step) -> JobRequest[Any]:
    if isinstance(step, JobRequest):
        if step.notify is not None:
            raise ChainInvalid(
                f"step {index}: a chain step takes no notify target; give the chain's to "
                "app.chains.start(..., notify=...), told when the chain ends"
            )
        if step.idempotency_key or step.delay is not None or step.run_at is not None:
            raise ChainInvalid(
                f"step {index}: a chain step takes no idempotency key, delay or run_at (its id comes from "
                "the chain's, and it runs when the step before succeeds); give the chain a dedupe_key"
            )
        return step
    if not (isinstance(step, tuple) and len(step) == 2):
        raise ChainInvalid(f"step {index} is {step!r}: give each step as (type, payload) or a JobRequest")
    return JobRequest(step[0], step[1])


def create_flow(
    chain_id: str,
    jobs: Sequence[NewJob],
    *,
    settings: Settings,
    queue_urls: QueueUrls,
    dedupe_key: str | None,
    now: float,
    logger: Any = None,
) -> Flow[str]:
    """Write the chain in one TransactWriteItems, send step 0's hint, then clear its pending entry.

    A crash between the commit and the send loses nothing: step 0's ``pending`` entry is due
    ``stale_after_s`` later, and the sweeper sends the hint then. The same dedupe key with the same
    steps returns the existing chain's id; with other steps, ``IdempotencyConflict``.
    """
    table, token, first = settings.table_name, nonce(), jobs[0]
    yield from queue_urls.flow([route_of(first)])  # fails the create, not its send
    yield from write_objects(jobs)  # payloads over the record's limit, before a record names them
    first_put = transact.job_entry(
        table, first, token=token, pending_until=first.run_at + settings.stale_after_s
    )
    entries = [
        chain_records.chain_put(table, chain_id, jobs, now=now, dedupe_key=dedupe_key, token=token),
        first_put,
        *(chain_records.waiting_put(table, job, token=token) for job in jobs[1:]),
    ]
    try:
        created = yield from apply_all(entries, wid=token, own=range(len(entries)))
    except StoreError as exc:
        if exc.code == "ValidationException":  # the transaction as built: a size over the limits...
            raise TransactionInvalid(
                f"DynamoDB refused the chain as built, nothing was written: {exc}"
            ) from exc
        raise
    if isinstance(created, Refused):
        return _refused(created, chain_id, jobs, dedupe_key)
    yield from store_tags.write_jobs_flow(settings, jobs)
    yield from hint_written(
        [(first, first_put["Put"]["Item"])],
        table=table,
        queue_urls=queue_urls,
        settings=settings,
        logger=logger,
    )
    return chain_id


def _refused(refused: Refused, chain_id: str, jobs: Sequence[NewJob], dedupe_key: str | None) -> str:
    """A creation DynamoDB refused: the chain the dedupe key names already, or a conflict."""
    existing = refused.item_at(0) if refused.code(0) == transact.CONDITION_FAILED else None
    if not existing:
        raise refused.as_error()
    if str_attr(existing, "steps_hash") == chain_records.steps_hash(jobs):
        return chain_id
    raise IdempotencyConflict(
        f"dedupe key {dedupe_key!r} already names chain {chain_id} with other steps; reuse the same steps "
        "or choose a new key"
    ) from refused.error


# ── reading ──────────────────────────────────────────────────────────────────────────────────
def read_items(
    table: str, ids: Sequence[str], *, attributes: Sequence[str] | None = None
) -> Flow[dict[str, Item]]:
    """The items with these ids (strongly consistent), by id; absent ids are left out."""
    keys = [{"id": av_s(i)} for i in ids]
    items = yield from batched.get_items(table, keys, consistent=True, attributes=attributes or ())
    return {item["id"]["S"]: item for item in items}


def get_flow(settings: Settings, chain_id: str) -> Flow[ChainStatus]:
    """The chain's record and its steps' states: one GetItem and one BatchGetItem per 100 steps."""
    table = settings.table_name
    response = yield Call("dynamodb", "get_item", chain_records.get_chain(table, chain_id))
    if "Item" not in response:
        raise ChainNotFound(f"no chain with id {chain_id!r} in table {table}")
    chain = chain_records.chain_fields(response["Item"])
    ids = [chain_records.step_job_id(chain_id, n) for n in range(chain["length"])]
    items = yield from read_items(table, ids, attributes=("id", "status", "reason"))
    steps = tuple(
        ChainStep(
            n, chain["types"][n], job_id, JobStatus(items[job_id]["status"]["S"]) if job_id in items else None
        )
        for n, job_id in enumerate(ids)
    )
    state, stopped_at, reason = chain["state"].value, chain["stopped_at"], chain["reason"]
    current = steps[chain["current"]] if chain["current"] < len(steps) else None
    if (
        chain["state"] is ChainState.RUNNING
        and current
        and current.status in (JobStatus.DEAD, JobStatus.EXPIRED, JobStatus.CANCELLED)
    ):
        # The step ended without the finish seam (rejected or expired by a process without the
        # chains feature, or cancelled on its own by an operator): the chain is over, and the
        # record has not said so.
        stopped = current.status in (JobStatus.DEAD, JobStatus.EXPIRED)
        state = ChainState.STOPPED.value if stopped else ChainState.CANCELLED.value
        stopped_at, reason = current.position, str_attr(items[current.job_id], "reason")
    return ChainStatus(
        id=chain_id,
        status=state,
        steps=steps,
        current=chain["current"],
        stopped_at=stopped_at,
        reason=reason,
        created_at=to_datetime(chain["created"]),
        finished_at=to_datetime(chain["finished"]),
        cancel_requested=chain["cancel_requested"],
    )


# ── cancel ───────────────────────────────────────────────────────────────────────────────────
def cancel_flow(settings: Settings, registry: Registry, chain_id: str, now: float) -> Flow[str]:
    """Cancel the chain: ``"cancelled"`` at once, ``"requested"`` (its step is running), or its end state.

    The current step decides, in one transaction with the chain record: queued or waiting to retry,
    it is cancelled with every waiting step; running, it gets a cancel request (seen at its next
    heartbeat; if it succeeds first, the next step refuses to start, ``chains.plugin.before_step``).
    When the chain moves under the read (the step was claimed, or finished), it reads again. A
    chain started with ``notify=`` is told of its cancel by a delivery written in the same transaction.
    """
    table = settings.table_name
    for _ in range(CANCEL_TRIES):
        status = yield from get_flow(settings, chain_id)
        if status.status != ChainState.RUNNING:
            return status.status
        step = status.steps[status.current]
        later = [s for s in status.steps[step.position + 1 :] if s.status is JobStatus.WAITING]
        reason = f"chain cancelled by request at step {step.position}"
        end = chain_records.end(
            table,
            chain_id,
            step=step.position,
            state=ChainState.CANCELLED,
            now=now,
            retention_s=settings.retention_s,
            reason=reason,
        )
        told = CancelTold(settings)
        if step.status in (JobStatus.QUEUED, JobStatus.RETRY_SCHEDULED):
            outcome = "cancelled"
            current = (yield from read_items(table, [step.job_id])).get(step.job_id)
            if current is not None and "notify" in current:
                told = told_cancel(registry, settings, job_from_item(current), now)
            updates = [
                operator.cancel(
                    table, step.job_id, now=now, retention_s=settings.retention_s, chain_step=True
                ).transact_item(),
                end.update_item(),
                *(
                    chain_records.drop(
                        table, s.job_id, now=now, reason=reason, retention_s=settings.retention_s
                    ).update_item()
                    for s in later
                ),
            ]
        elif step.status is JobStatus.RUNNING:
            outcome = "requested"
            updates = [
                operator.request_cancel(table, step.job_id, now=now).transact_item(),
                chain_records.cancel_requested(table, chain_id, step=step.position, now=now).update_item(),
            ]
        else:
            continue  # between two writes of a finish: read again
        entries = [*({"Update": u} for u in updates), *told.entries()]
        if isinstance((yield from apply_all(entries)), Refused):
            continue  # the step was claimed or finished meanwhile: read again
        yield from told.send_flow(QueueUrls(settings))
        return outcome
    raise StoreError(f"chain {chain_id} kept moving under app.chains.cancel; try again", code="ChainMoving")


# ── the App's namespace: ``app.chains`` ──────────────────────────────────────────────────────
class Chains(Namespace):
    """``app.chains``: start a chain, read it, wait for its end, cancel it (docs/workflows-chains.md)."""

    def _start(
        self,
        steps: Iterable[Step],
        *,
        dedupe_key: str | None = None,
        notify: Notify | Mapping[str, str] | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> Flow[str]:
        """Run ``(type, payload)`` steps one after another; returns the chain's id.

        Each step runs once the one before it succeeded and reads its result as
        ``ctx.previous_result``; a step that dies stops the chain. ``dedupe_key``: the same key and
        steps return the same chain, other steps raise ``IdempotencyConflict``. At most 99 steps.
        ``notify``: a webhook, queue or bus told once when the chain ends (docs/http-workers.md);
        ``tags``: what the chain is about, every step inheriting them (a step's own win).
        """
        k = self.kernel
        now = k.clock.now()
        chain_id, jobs = build_steps(
            steps,
            registry=k.registry,
            settings=k.settings,
            now=now,
            dedupe_key=dedupe_key,
            notify=notify,
            tags=tags,
        )
        return create_flow(
            chain_id,
            jobs,
            settings=k.settings,
            queue_urls=k.queue_urls,
            dedupe_key=dedupe_key,
            now=now,
            logger=k.logger,
        )

    def _get(self, chain_id: str) -> Flow[ChainStatus]:
        """The chain's state and its steps' (``ChainNotFound`` if there is none)."""
        return get_flow(self.kernel.settings, chain_id)

    def _wait(self, chain_id: str, *, timeout: float | timedelta = 60.0) -> Flow[ChainStatus]:
        """The chain once it succeeded, stopped or was cancelled; ``WaitTimeout`` past ``timeout``."""
        settings = self.kernel.settings
        return waiting.poll_flow(
            lambda _first: get_flow(settings, chain_id),
            lambda chain: chain.status in CHAIN_ENDED,
            to_seconds(timeout),
            f"chain {chain_id}",
        )

    def _cancel(self, chain_id: str) -> Flow[str]:
        """Cancel the chain: ``"cancelled"``, ``"requested"`` (its step is running) or its end state."""
        return cancel_flow(self.kernel.settings, self.kernel.registry, chain_id, self.kernel.clock.now())

    start, astart = sync_verb(_start), async_verb(_start)
    get, aget = sync_verb(_get), async_verb(_get)
    wait, await_result = sync_verb(_wait), async_verb(_wait)
    cancel, acancel = sync_verb(_cancel), async_verb(_cancel)
