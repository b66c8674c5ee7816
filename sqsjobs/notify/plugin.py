"""The finish hook of ``notify``: a delivery job written with the job's end, in the finish's own transaction.

When a job that names a notify target ends (succeeded, dead, cancelled, expired), its delivery job
(type ``sqsjobs.notify``, handled by ``sender``) lands with the finish or not at all: a worker
killed right after its finish cannot lose the notification, and a refused finish (a duplicated
message, a lost lease) cannot make one. Its id comes from the ended job and its claim, so a
finish retried after a lost answer writes the same delivery once; that id is the webhook's
``webhook-id``, the same on every retry of the delivery, so a receiver deduplicates by it. Once
the transaction landed the delivery's message is sent; a crash before that leaves its pending
entry, and the sweeper sends it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sqsjobs.job import AttemptOutcome
from sqsjobs.producer import hint_written
from sqsjobs.runtime.follow_ups import FollowUps, follow_up_job
from sqsjobs.runtime.seams import Plugin
from sqsjobs.store import transact
from sqsjobs.store.codec import nonce

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sqsjobs._aws import Flow
    from sqsjobs.config import Settings
    from sqsjobs.delivery import Finish
    from sqsjobs.job import FailureRecord, Job
    from sqsjobs.registry import Registry
    from sqsjobs.runtime.kernel import Kernel
    from sqsjobs.store.enqueue import NewJob
    from sqsjobs.store.write import Entry, Put
    from sqsjobs.transport.queues import QueueUrls

#: The built-in job type that delivers a notification (registered by every App: ``sender``).
DELIVERY_TYPE = "sqsjobs.notify"
#: The ends that are told: every status a job does not leave.
TOLD = frozenset(
    {AttemptOutcome.SUCCEEDED, AttemptOutcome.DEAD, AttemptOutcome.CANCELLED, AttemptOutcome.EXPIRED}
)


def ends_what_it_tells(job: Job, outcome: AttemptOutcome) -> bool:
    """Whether this end is told: a told end of a job with a target; a chain's step only when it ends the chain.

    A chain started with ``notify=`` carries the target on every step: a step that succeeded and is
    not the last one hands over to the next step, which is not an end of the chain.
    """
    if job.notify is None or outcome not in TOLD:
        return False
    return (
        job.chain is None or outcome is not AttemptOutcome.SUCCEEDED or job.chain.step == job.chain.steps - 1
    )


def event_of(
    job: Job,
    outcome: AttemptOutcome,
    now: float,
    *,
    result: Any = None,
    result_ref: str | None = None,
    error: FailureRecord | None = None,
) -> dict[str, Any]:
    """What the target hears of ``job``'s end; never its payload.

    Its id, type, status, attempt, result (or the result's S3 reference), error, and its place.
    """
    data: dict[str, Any] = {
        "id": job.id,
        "type": job.type,
        "status": str(outcome),
        "attempt": job.attempt,
        "result": result if result_ref is None else None,
        "result_ref": result_ref,
        "error": {"type": error.error_class, "message": error.message} if error else None,
        "tenant": job.tenant,
        "parent_id": job.parent_id,
        "root_id": job.root_id or job.id,
        "chain": {"id": job.chain.id, "step": job.chain.step, "steps": job.chain.steps}
        if job.chain
        else None,
    }
    return {
        "type": f"job.{outcome}",
        "timestamp": datetime.fromtimestamp(now, UTC).isoformat(),
        "data": data,
    }


def delivery_queue(registry: Registry, queue: str) -> str:
    """Where a delivery goes: the ended job's queue, unless HTTP workers lease that one (a Python worker's, then)."""
    if queue not in registry.external_queues():
        return queue
    return next(iter(registry.worker_queues()), "default")


def delivery_job(registry: Registry, job: Job, event: dict[str, Any], *, key: str, now: float) -> NewJob:
    """The delivery of ``event`` to ``job``'s target, its id from ``key`` (the webhook's ``webhook-id``)."""
    assert job.notify is not None
    return follow_up_job(
        registry.get(DELIVERY_TYPE),
        job,
        key=key,
        payload={"target": job.notify.to_json(), "event": event},
        queue=delivery_queue(registry, job.queue),
        now=now,
    )


@dataclass(frozen=True)
class CancelTold:
    """What a cancel of a waiting job writes beside it to tell the job's target, and sends once that landed.

    Empty for a job without a target: its ``entries`` add nothing to the cancel's transaction and
    ``send_flow`` sends nothing.
    """

    settings: Settings
    #: The delivery job and its ``Put`` (kept pending: the sweeper's witness until it is sent).
    delivery: tuple[NewJob, Put] | None = None

    def entries(self) -> list[dict[str, Any]]:
        """The ``TransactWriteItems`` entries to write with the cancel."""
        return [] if self.delivery is None else [{"Put": self.delivery[1].put_item()}]

    def send_flow(self, queue_urls: QueueUrls, logger: Any = None) -> Flow[set[str]]:
        """Once the cancel's transaction landed: send the delivery's message and clear its entry."""
        written = [] if self.delivery is None else [(self.delivery[0], self.delivery[1].item)]
        return hint_written(
            written,
            table=self.settings.table_name,
            queue_urls=queue_urls,
            settings=self.settings,
            logger=logger,
        )


def told_cancel(registry: Registry, settings: Settings, job: Job, now: float) -> CancelTold:
    """The delivery an operator's cancel of waiting ``job`` writes in its own transaction; none without a target.

    A cancel is a job's end without a run, so no finish tells it: each cancel path (``jobs cancel``,
    a bulk cancel, a batch's or a chain's cancel) writes these ``entries`` beside its cancel write and
    sends the message once that landed (``send_flow``; the pending entry is the witness for the
    sweeper). The target is immutable once enqueued, so the record the cancel read names it.
    """
    if not ends_what_it_tells(job, AttemptOutcome.CANCELLED):
        return CancelTold(settings)
    event = event_of(job, AttemptOutcome.CANCELLED, now)
    delivery = delivery_job(registry, job, event, key=f"notify:{job.id}:cancelled", now=now)
    put = transact.job_put(
        settings.table_name, delivery, token=nonce(), pending_until=now + settings.stale_after_s
    )
    return CancelTold(settings, (delivery, put))


class NotifyHook:
    """The ``FinishHook`` (see the module docstring)."""

    def __init__(self, kernel: Kernel) -> None:
        self._kernel = kernel
        self._follow_ups = FollowUps(kernel, "notification")

    async def entries(self, finish: Finish) -> Sequence[Entry]:
        """The delivery job's ``Put`` for a told end of a job with a target (kept pending until sent)."""
        job = finish.job
        if not ends_what_it_tells(job, finish.outcome):
            return []
        now = self._kernel.clock.now()
        event = event_of(
            job, finish.outcome, now, result=finish.result, result_ref=finish.result_ref, error=finish.error
        )
        key = f"notify:{job.id}:{job.claim_token or finish.outcome}"
        return [
            self._follow_ups.put(job.id, delivery_job(self._kernel.registry, job, event, key=key, now=now))
        ]

    async def landed(self, finish: Finish) -> None:
        """Send the delivery's message and clear its pending entry; never raises (the sweeper resends)."""
        await self._follow_ups.landed(finish.job.id)


def notify_plugin(kernel: Kernel) -> Plugin:
    """Notify: the jobs that name a target are this feature's (by their ``notify`` field)."""
    return Plugin("notify", finish=NotifyHook(kernel), fields=("notify",))
