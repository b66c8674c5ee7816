"""The sweeper: sends the hints that no message will bring, reading only the sparse attention index.

Most jobs never need it: the producer sends the message first (a claim creates the record from it if
the producer died before its write), retries re-arm the same message, and a killed worker's job is
rescued when its own message comes back. What is left, each in its 32 shards:

- ``held``: runnable records with no message yet (``run_at`` beyond the 15 min SQS delay cap, or a
  retry beyond the 12 h visibility cap), sent once within 15 minutes of due;
- ``pending``: a hint was sent (by the sweeper, or by an operator's replay) and no claim took the job
  by ``due`` (``stale_after_s`` later): the hint was lost, send another;
- ``batch``: a sealed batch not complete by ``due``: its completion check runs again (a crash between
  an item's finish and its check, or a drain and its children's seal): the batches feature's own
  pass (``SweepPass``, ``runtime/seams.py``), as every feature's pass runs in each sweep.

A record whose deadline passed before it started is expired instead of sent (``store/deadlines.py``:
the same conditional write a worker makes; the type's ``expires_after`` from ``expiry_bounds``), with
the same finish hooks as a worker's expire (``runtime/record_stage.py``): a batch item counts as
failed on its batch, a chain step stops its chain. The hooks are the kernel's (async), so the
expires run in ``sweep_once`` after the passes (``due_flow``); ``sweep_flow``, the sans-I/O sweep
without a kernel, only lists them (``SweepReport.expiring``) and runs no feature's pass.

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
from sqsjobs.delivery import Finish
from sqsjobs.job import AttemptOutcome, JobStatus
from sqsjobs.producer import route_of
from sqsjobs.runtime.kernel import kernel_of
from sqsjobs.runtime.reconciler import DlqScope, ReconcileReport, reconcile_flow
from sqsjobs.runtime.record_stage import commit, finish_hooks
from sqsjobs.store import codec, deadlines, enqueue, outlived, requests, schema
from sqsjobs.store.apply import Landed, Refused, apply
from sqsjobs.store.job_store import JobStore
from sqsjobs.store.write_batcher import WriteBatcher
from sqsjobs.transport import lifespan, sqs

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
    #: Such jobs found by ``due_flow`` and their passed deadlines, before ``sweep_once`` expires them.
    expiring: list[tuple[Job, float]] = field(default_factory=list)
    #: What each feature's own pass completed, by feature (``batches``: sealed batches whose repair
    #: entry was due).
    repaired: dict[str, list[str]] = field(default_factory=dict)
    #: What the DLQ reconciler did (``sqsjobs.runtime.reconciler``).
    dlq: ReconcileReport = field(default_factory=ReconcileReport)

    @property
    def batches_completed(self) -> list[str]:
        """Sealed batches whose repair entry was due and that this sweep completed."""
        return self.repaired.get("batches", [])

    @property
    def total(self) -> int:
        """Hints sent."""
        return len(self.dispatched_held) + len(self.redispatched)


def due_flow(
    settings: Settings,
    queue_urls: QueueUrls,
    now: float,
    *,
    page_size: int = 100,
    expiry_bounds: Mapping[str, float] | None = None,
) -> Flow[SweepReport]:
    """One pass over the held and pending shards: hints sent, and the records to expire listed (``expiring``).

    ``expiry_bounds``: each type's ``expires_after`` (s).
    """
    report = SweepReport()
    bounds = expiry_bounds or {}
    passes = [
        (schema.HELD, now + lifespan.delay_cap_s(settings), report.dispatched_held),
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
                    if isinstance(outcome, tuple):
                        report.expiring.append(outcome)
                    elif outcome == "sent":
                        sent.append(record.id)
                start_key = page.get("LastEvaluatedKey")
                if not start_key:
                    break
    return report


def sweep_flow(
    settings: Settings,
    queue_urls: QueueUrls,
    now: float,
    *,
    page_size: int = 100,
    expiry_bounds: Mapping[str, float] | None = None,
    dlqs: DlqScope | None = None,
) -> Flow[SweepReport]:
    """``due_flow`` then the DLQs of ``dlqs``, without a kernel: no feature's pass, the expiring only listed."""
    report = yield from due_flow(settings, queue_urls, now, page_size=page_size, expiry_bounds=expiry_bounds)
    if dlqs is not None:
        report.dlq = yield from reconcile_flow(settings, queue_urls, now, dlqs)
    return report


def _dispatch(
    settings: Settings,
    queue_urls: QueueUrls,
    record: schema.DueRecord,
    now: float,
    bounds: Mapping[str, float],
) -> Flow[str | tuple[Job, float]]:
    """Mark the entry pending, then send its hint (``sent``); the job and its deadline once that passed.

    ``""`` when another sweeper or a claim got there first.
    """
    # The index carries no payload: read the record (rare: only records no message carries come here).
    found = yield Call("dynamodb", "get_item", requests.get(settings.table_name, record.id))
    if "Item" not in found:
        return ""
    job = codec.job_from_item(found["Item"])
    if (yield from _follow_outlived_run(settings, record, job, now)):
        return ""
    passed = deadlines.expired_deadline(found["Item"], now, bounds.get(job.type))
    if passed is not None:
        return job, passed
    mark = schema.mark_dispatched(
        settings.table_name, record, now=now, recheck_at=max(now, record.run_at) + settings.stale_after_s
    )
    # Refused: it changed since the query and someone else acts on it (a write of its own that
    # botocore retried after a lost answer reads as landed: the mark carries a nonce).
    if isinstance((yield from apply(mark)), Refused):
        return ""
    yield from queue_urls.send_flow(
        route_of(job),
        enqueue.envelope_of(job).to_body(),
        delay_s=sqs.clamp_delay(record.run_at - now),
        tenant=job.tenant,
        serialize_key=job.serialize_key,
        trace=job.trace,
    )
    return "sent"


def _follow_outlived_run(settings: Settings, record: schema.DueRecord, job: Job, now: float) -> Flow[bool]:
    """A run that outlived its message (``runtime/outliving.py``): True when its entry needs no hint.

    Still under a live lease: the entry waits for that lease's end. Finished: the entry is removed.
    A lapsed lease gets the hint any pending entry gets (False): its claim rescues the job.
    """
    if job.status is JobStatus.RUNNING and job.lease_expires and job.lease_expires.timestamp() > now:
        write = outlived.postpone(settings.table_name, record, due=job.lease_expires.timestamp())
    elif job.status.terminal and record.attn.startswith(f"{schema.PENDING}#"):
        write = outlived.clear(settings.table_name, record)
    else:
        return False
    yield from apply(write)  # a refusal: the entry changed since the query (a claim took it)
    return True


async def expire(kernel: Kernel, store: JobStore, job: Job, now: float, deadline: float) -> bool:
    """The expire write of a record no message carries, with its finish hooks; False when it changed meanwhile.

    The same write and hooks as a worker's expire (``runtime/record_stage.py``): a batch item's
    expiry counts as failed on its batch in the same transaction, a chain step's stops its chain.
    """
    bound = kernel.registry.get(job.type).expires_after_s if job.type in kernel.registry else None
    envelope = enqueue.envelope_of(job)
    expired = await commit(
        finish_hooks(kernel, job),
        Finish(job, AttemptOutcome.EXPIRED),
        lambda entries: store.expire(
            envelope,
            now=now,
            reason=deadlines.reason(deadline),
            retention_s=kernel.kept_for(envelope.job_type, JobStatus.EXPIRED),
            type_bound_s=bound,
            entries=entries,
        ),
    )
    return isinstance(expired, Landed)  # refused: the record, or a hook's entry (a chain moved on)


def expiry_bounds(kernel: Kernel) -> dict[str, float]:
    """Each registered type's ``expires_after`` in seconds (types without one are left out)."""
    return {s.name: s.expires_after_s for s in kernel.registry if s.expires_after_s is not None}


async def sweep_once(app: Kernel | SupportsKernel, *, now: float | None = None) -> SweepReport:
    """One sweep with the async clients (at ``now``, default the clock's); logs what it sent, expired and completed."""
    kernel = kernel_of(app)
    settings, urls = kernel.settings, kernel.queue_urls
    now = kernel.clock.now() if now is None else now
    report: SweepReport = await kernel.arun(
        due_flow(settings, urls, now, expiry_bounds=expiry_bounds(kernel))
    )
    if report.expiring:
        store = JobStore(
            WriteBatcher(kernel.arun, batch=False, logger=kernel.logger), settings.table_name, "sweeper"
        )
        for job, deadline in report.expiring:
            if await expire(kernel, store, job, now, deadline):
                report.expired.append(job.id)
    for plugin, part in kernel.sweeps:  # the features' own passes (a batch's repair)
        report.repaired[plugin.name] = await part.sweep(now)
    report.dlq = await kernel.arun(
        reconcile_flow(settings, urls, now, DlqScope.of(kernel.registry, settings))
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
                "dlq_refired": report.dlq.refired,
                "dlq_dead": report.dlq.dead,
                "dlq_moved": report.dlq.moved,
                "dlq_deleted": report.dlq.deleted,
            },
        )
    return report


def sweep(app: Kernel | SupportsKernel, *, now: float | None = None) -> SweepReport:
    """``sweep_once`` from sync code (the Lambda sweeper, a script, a test): in a loop of its own.

    The async clients are closed after it, as they belong to that loop.
    """
    kernel = kernel_of(app)

    async def once() -> SweepReport:
        try:
            return await sweep_once(kernel, now=now)
        finally:
            await kernel.aclose()

    return asyncio.run(once())


async def run_sweeper(app: Kernel | SupportsKernel, stop: asyncio.Event) -> None:
    """Sweep every ``sweep_interval_s`` until ``stop``.

    A sweep in flight when ``stop`` is set is cancelled rather than awaited: every dispatch is a
    conditional mark before its send, so a sweep cut short leaves nothing half-done that the next
    one (in this or another process) does not redo, and shutdown never waits on a slow pass. The
    cancellation reaches the pass where it waits (``sqsjobs._aws.run_async``): the DLQ reconciler
    makes the messages its scan hid visible again before it returns, so a DLQ read right after a
    stop sees them at once rather than after the scan's hide time (30 s or more).
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
