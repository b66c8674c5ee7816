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

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sqsjobs.job import AttemptOutcome
from sqsjobs.runtime.follow_ups import FollowUps
from sqsjobs.runtime.seams import Plugin
from sqsjobs.store.codec import idempotent_job_id
from sqsjobs.store.enqueue import NewJob

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sqsjobs.delivery import Finish
    from sqsjobs.runtime.kernel import Kernel
    from sqsjobs.store.write import Entry

#: The built-in job type that delivers a notification (registered by every App: ``sender``).
DELIVERY_TYPE = "sqsjobs.notify"
#: The ends that are told: every status a job does not leave.
TOLD = frozenset(
    {AttemptOutcome.SUCCEEDED, AttemptOutcome.DEAD, AttemptOutcome.CANCELLED, AttemptOutcome.EXPIRED}
)


def event_of(finish: Finish, now: float) -> dict[str, Any]:
    """What the target hears: the job's id, type, status, attempt, result (or its S3 reference) and error; never its payload."""
    job = finish.job
    data: dict[str, Any] = {
        "id": job.id,
        "type": job.type,
        "status": str(finish.outcome),
        "attempt": job.attempt,
        "result": finish.result if finish.result_ref is None else None,
        "result_ref": finish.result_ref,
        "error": {"type": finish.error.error_class, "message": finish.error.message}
        if finish.error
        else None,
        "tenant": job.tenant,
        "root_id": job.root_id or job.id,
    }
    return {
        "type": f"job.{finish.outcome}",
        "timestamp": datetime.fromtimestamp(now, UTC).isoformat(),
        "data": data,
    }


def delivery_queue(kernel: Kernel, queue: str) -> str:
    """Where a delivery goes: the ended job's queue, unless HTTP workers lease that one (a Python worker's, then)."""
    if queue not in kernel.registry.external_queues():
        return queue
    return next(iter(kernel.registry.worker_queues()), "default")


class NotifyHook:
    """The ``FinishHook`` (see the module docstring)."""

    def __init__(self, kernel: Kernel) -> None:
        self._kernel = kernel
        self._follow_ups = FollowUps(kernel, "notification")

    async def entries(self, finish: Finish) -> Sequence[Entry]:
        """The delivery job's ``Put`` for a told end of a job with a target (kept pending until sent)."""
        target = finish.job.notify
        if target is None or finish.outcome not in TOLD:
            return []
        kernel = self._kernel
        spec, now = kernel.registry.get(DELIVERY_TYPE), kernel.clock.now()
        key = f"notify:{finish.job.id}:{finish.job.claim_token or finish.outcome}"
        job = NewJob(
            id=idempotent_job_id(DELIVERY_TYPE, key),
            type=DELIVERY_TYPE,
            queue=delivery_queue(kernel, finish.job.queue),
            payload={"target": target.to_json(), "event": event_of(finish, now)},
            payload_version=spec.version,
            max_attempts=spec.max_attempts,
            run_at=now,
            now=now,
            idempotency_key=key,
            tenant=finish.job.tenant,
            parent_id=finish.job.id,
            root_id=finish.job.root_id or finish.job.id,
        )
        return [self._follow_ups.put(finish.job.id, job)]

    async def landed(self, finish: Finish) -> None:
        """Send the delivery's message and clear its pending entry; never raises (the sweeper resends)."""
        await self._follow_ups.landed(finish.job.id)


def notify_plugin(kernel: Kernel) -> Plugin:
    """Notify: the jobs that name a target are this feature's (by their ``notify`` field)."""
    return Plugin("notify", finish=NotifyHook(kernel), fields=("notify",))
