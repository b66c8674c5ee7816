"""Jobs a finish writes in its own transaction (a hook's job, a notification's delivery), sent once it landed.

A finish hook (``runtime/seams.py``) makes the job and asks for its ``Put``: the record is written
with a pending entry (due ``stale_after_s`` later) in the finish's transaction, so the finish and
the job land together or not at all. Once the transaction landed, ``landed`` sends the job's
message and clears the entry; a crash in between leaves the entry, and the sweeper sends it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqsjobs.producer import hint_written
from sqsjobs.store import transact
from sqsjobs.store.codec import idempotent_job_id, nonce
from sqsjobs.store.enqueue import NewJob

if TYPE_CHECKING:
    from collections.abc import Mapping

    from sqsjobs.job import Job
    from sqsjobs.registry import HandlerSpec
    from sqsjobs.runtime.kernel import Kernel
    from sqsjobs.store.write import Put

#: Jobs written and not yet sent, at most: a finish refused after its entries were made never
#: reaches ``landed``, and its entry would otherwise stay (the sweeper sends what was written).
MAX_PENDING = 10_000


def follow_up_job(spec: HandlerSpec, ended: Job, *, key: str, payload: Any, queue: str, now: float) -> NewJob:
    """The job of type ``spec`` that ``ended``'s end makes: its child, due now, its id derived from ``key``.

    The same key makes the same id, so a finish (or a cancel) retried after a lost answer writes it once.
    """
    return NewJob(
        id=idempotent_job_id(spec.name, key),
        type=spec.name,
        queue=queue,
        payload=payload,
        payload_version=spec.version,
        max_attempts=spec.max_attempts,
        run_at=now,
        now=now,
        idempotency_key=key,
        tenant=ended.tenant,
        parent_id=ended.id,
        root_id=ended.root_id or ended.id,
    )


class FollowUps:
    """The follow-up jobs of one finish hook, by the job whose finish writes them."""

    def __init__(self, kernel: Kernel, what: str) -> None:
        """``what`` names them in the log line of a send that failed (``hook job``, ``notification``)."""
        self._kernel = kernel
        self._what = what
        self._pending: dict[str, tuple[NewJob, Mapping[str, Any]]] = {}

    def put(self, ended_id: str, job: NewJob) -> Put:
        """The ``Put`` of ``job``, written with the finish of job ``ended_id``, kept until ``landed``."""
        settings, now = self._kernel.settings, self._kernel.clock.now()
        put = transact.job_put(
            settings.table_name, job, token=nonce(), pending_until=now + settings.stale_after_s
        )
        if len(self._pending) >= MAX_PENDING:
            self._pending.clear()  # the sweeper sends what was written and not sent
        self._pending[ended_id] = (job, dict(put.item))
        return put

    async def landed(self, ended_id: str) -> None:
        """Send the message of what ``ended_id``'s finish wrote, and clear its entry; never raises."""
        pending = self._pending.pop(ended_id, None)
        if pending is None:
            return
        kernel = self._kernel
        try:
            await kernel.arun(
                hint_written(
                    [pending],
                    table=kernel.settings.table_name,
                    queue_urls=kernel.queue_urls,
                    settings=kernel.settings,
                    logger=kernel.logger,
                )
            )
        except Exception as exc:
            kernel.logger.warning(
                f"{self._what} not sent; the sweeper sends it",
                extra={"job_id": ended_id, "follow_up_id": pending[0].id, "error": repr(exc)},
            )
