"""The sweeper: sends the hints that no message will bring, reading only the sparse attention index.

Most jobs never need it: the producer sends the message first (a claim creates the record from it if
the producer died before its write), retries re-arm the same message, and a killed worker's job is
rescued when its own message comes back. What is left, each in its 32 shards:

- ``held``: runnable records with no message yet (``run_at`` beyond the 15 min SQS delay cap, or a
  retry beyond the 12 h visibility cap), sent once within 15 minutes of due;
- ``pending``: a hint was sent (by the sweeper, or by an operator's replay) and no claim took the job
  by ``due`` (``stale_after_s`` later): the hint was lost, send another;
- ``batch``: a sealed batch not complete by ``due``: its completion check runs again (a crash between
  an item's finish and its check, or a drain and its children's seal), ``sqsjobs.workflows.completion``.

A record whose deadline passed before it started is expired instead of sent (``store/deadlines.py``:
the same conditional write a worker makes; the type's ``expires_after`` from ``expiry_bounds``).

Before each send the entry becomes ``pending`` with a conditional write, so concurrent sweepers do not
both send, and the claim the hint brings removes it. A duplicate hint is harmless: the claim decides.
A message SQS's redrive policy moved to a DLQ is judged by the DLQ reconciler, which each sweep runs last
when given its scope (``sqsjobs.runtime.reconciler``): re-dispatched, or its record made dead.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sqsjobs._aws import Call, Flow
from sqsjobs.errors import StoreError
from sqsjobs.producer import route_of
from sqsjobs.runtime.kernel import kernel_of
from sqsjobs.runtime.reconciler import DlqScope, ReconcileReport, reconcile_flow
from sqsjobs.store import codec, deadlines, enqueue, requests, schema, transact
from sqsjobs.transport import sqs
from sqsjobs.workflows import batch_store as bs
from sqsjobs.workflows.completion import BatchEnv, after_finish_flow, repair_flow

if TYPE_CHECKING:
    from collections.abc import Mapping

    from sqsjobs.config import Settings
    from sqsjobs.job import Job
    from sqsjobs.runtime.kernel import Kernel, SupportsKernel
    from sqsjobs.transport.queues import QueueUrls


@dataclass
class SweepReport:
    """What one sweep did."""

    dispatched_held: list[str] = field(default_factory=list)
    redispatched: list[str] = field(default_factory=list)
    #: Held or pending jobs whose deadline passed before they started: expired, not sent.
    expired: list[str] = field(default_factory=list)
    #: Sealed batches whose repair entry was due and that this sweep completed (``sqsjobs.workflows``).
    batches_completed: list[str] = field(default_factory=list)
    #: What the DLQ reconciler did (``sqsjobs.runtime.reconciler``).
    dlq: ReconcileReport = field(default_factory=ReconcileReport)

    @property
    def total(self) -> int:
        """Hints sent."""
        return len(self.dispatched_held) + len(self.redispatched)


def sweep_flow(
    settings: Settings,
    queue_urls: QueueUrls,
    now: float,
    *,
    page_size: int = 100,
    expiry_bounds: Mapping[str, float] | None = None,
    dlqs: DlqScope | None = None,
) -> Flow[SweepReport]:
    """One pass over the held and pending shards, then over the DLQs of ``dlqs`` when given.

    ``expiry_bounds``: each type's ``expires_after`` (s).
    """
    report = SweepReport()
    bounds = expiry_bounds or {}
    passes = [
        (schema.HELD, now + sqs.MAX_DELAY_S, report.dispatched_held),
        (schema.PENDING, now, report.redispatched),
    ]
    for kind, due_before, sent in passes:
        for partition in schema.attention_partitions(kind):
            start_key = None
            while True:
                page = yield Call(
                    "dynamodb",
                    "query",
                    schema.query_due(
                        settings.table_name,
                        partition,
                        due_before=due_before,
                        limit=page_size,
                        start_key=start_key,
                    ),
                )
                for record in schema.due_records(page):
                    outcome = yield from _dispatch(settings, queue_urls, record, now, bounds)
                    if outcome == "sent":
                        sent.append(record.id)
                    elif outcome == "expired":
                        report.expired.append(record.id)
                start_key = page.get("LastEvaluatedKey")
                if not start_key:
                    break
    report.batches_completed = yield from repair_flow(BatchEnv(settings, queue_urls), now)
    if dlqs is not None:
        report.dlq = yield from reconcile_flow(settings, queue_urls, now, dlqs)
    return report


def _dispatch(
    settings: Settings,
    queue_urls: QueueUrls,
    record: schema.DueRecord,
    now: float,
    bounds: Mapping[str, float],
) -> Flow[str]:
    """Mark the entry pending, then send its hint (``sent``); ``expired`` instead once its deadline passed.

    ``""`` when another sweeper or a claim got there first.
    """
    # The index carries no payload: read the record (rare: only records no message carries come here).
    found = yield Call("dynamodb", "get_item", requests.get(settings.table_name, record.id))
    if "Item" not in found:
        return ""
    job = codec.job_from_item(found["Item"])
    passed = deadlines.expired_deadline(found["Item"], now, bounds.get(job.type))
    if passed is not None:
        return (yield from _expire(settings, queue_urls, job, now, passed, bounds.get(job.type)))
    mark = schema.mark_dispatched(
        settings.table_name, record, now=now, recheck_at=max(now, record.run_at) + settings.stale_after_s
    )
    try:
        yield Call("dynamodb", "update_item", mark.update_item())
    except StoreError as exc:
        # Refused: it changed since the query and someone else acts on it — unless the change is
        # this very write, retried by botocore after its answer was lost.
        if not schema.dispatch_landed(mark, exc):
            if codec.is_conflict(exc):
                return ""
            raise
    yield from queue_urls.send_flow(
        route_of(job),
        enqueue.envelope_of(job).to_body(),
        delay_s=sqs.clamp_delay(record.run_at - now),
        tenant=job.tenant,
        serialize_key=job.serialize_key,
    )
    return "sent"


def _expire(
    settings: Settings, queue_urls: QueueUrls, job: Job, now: float, deadline: float, bound: float | None
) -> Flow[str]:
    """The expire write for a record no message carries; ``""`` when it changed meanwhile (a claim took it).

    A batch item's expiry counts as failed on its batch in the same transaction, then the batch is
    checked, as a worker's finish would (``workflows/batch_hook.py``).
    """
    params = deadlines.expire(
        settings.table_name,
        enqueue.envelope_of(job),
        now=now,
        reason=deadlines.reason(deadline),
        retention_s=settings.retention_s,
        type_bound_s=bound,
    )
    try:
        if job.batch_key is None:
            yield Call("dynamodb", "update_item", params.update_item())
        else:
            counted = [
                {"Update": params.transact_item()},
                bs.count_entry(settings.table_name, job.batch_key, "failed"),
            ]
            yield Call(
                "dynamodb", "transact_write_items", transact.transact_write(counted, token=codec.nonce())
            )
    except StoreError as exc:
        if not (codec.is_conflict(exc) or exc.code == "TransactionCanceledException"):
            raise
        return ""
    if job.batch_key is not None:
        yield from after_finish_flow(BatchEnv(settings, queue_urls), job.batch_key, failed=True, now=now)
    return "expired"


def expiry_bounds(kernel: Kernel) -> dict[str, float]:
    """Each registered type's ``expires_after`` in seconds (types without one are left out)."""
    return {s.name: s.expires_after_s for s in kernel.registry if s.expires_after_s is not None}


async def sweep_once(app: Kernel | SupportsKernel) -> SweepReport:
    """One sweep with the async clients; logs what it sent, expired and completed."""
    kernel = kernel_of(app)
    report: SweepReport = await kernel.arun(
        sweep_flow(
            kernel.settings,
            kernel.queue_urls,
            kernel.clock.now(),
            expiry_bounds=expiry_bounds(kernel),
            dlqs=DlqScope.of(kernel.registry, kernel.settings),
        )
    )
    if report.total or report.expired or report.batches_completed or report.dlq.acted:
        kernel.logger.info(
            "sweep dispatched hints",
            extra={
                "held": report.dispatched_held,
                "redispatched": report.redispatched,
                "expired": report.expired,
                "batches_completed": report.batches_completed,
                "dlq_redispatched": report.dlq.redispatched,
                "dlq_dead": report.dlq.dead,
                "dlq_moved": report.dlq.moved,
                "dlq_deleted": report.dlq.deleted,
            },
        )
    return report


async def run_sweeper(app: Kernel | SupportsKernel, stop: asyncio.Event) -> None:
    """Sweep every ``sweep_interval_s`` until ``stop``.

    A sweep in flight when ``stop`` is set is abandoned rather than awaited: every dispatch is a
    conditional mark before its send, so a sweep cut short leaves nothing half-done that the next
    one (in this or another process) does not redo, and shutdown never waits on a slow request.
    """
    kernel = kernel_of(app)
    stopping = asyncio.ensure_future(stop.wait())
    try:
        while not stop.is_set():
            sweep = asyncio.ensure_future(sweep_once(kernel))
            await asyncio.wait({sweep, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if not sweep.done():
                sweep.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await sweep
                return
            if sweep.exception() is not None:
                kernel.logger.error("sweep failed; retrying next interval", exc_info=sweep.exception())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(stopping), kernel.settings.sweep_interval_s)
    finally:
        stopping.cancel()
