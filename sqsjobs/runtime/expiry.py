"""A delivery whose job expired: record ``expired`` (one conditional write), then delete the message.

The worker checks the deadline the message shows before it claims (no write for a job it can see
has expired), and the claim's condition refuses an expired record whatever the message shows
(``store/deadlines.py``), so a copy of the message put back into the queue, a backlog reached late, or
a thin producer's job (no deadline in it: the type's bound applies) never runs. The message is
deleted, not dead-lettered: expiry is an outcome the producer asked for, not an error an operator
must look at; the record says ``expired`` and why.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqsjobs.delivery import DELETE, LEAVE, Ack
from sqsjobs.errors import StoreError
from sqsjobs.job import AttemptOutcome
from sqsjobs.observability.metrics import EXPIRED
from sqsjobs.runtime.hooks import commit_unrun, unrun
from sqsjobs.store import deadlines
from sqsjobs.store.job_store import Refusal, Refused

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sqsjobs.delivery import Delivery
    from sqsjobs.envelope import Envelope
    from sqsjobs.runtime.kernel import Kernel
    from sqsjobs.runtime.seams import FinishHook
    from sqsjobs.store.job_store import JobStore


async def expire_delivery(
    app: Kernel,
    store: JobStore,
    envelope: Envelope,
    delivery: Delivery,
    *,
    now: float,
    deadline: float,
    type_bound_s: float | None,
    hooks: Sequence[FinishHook] = (),
) -> Ack | None:
    """Expire the job of ``delivery``: DELETE once the record says ``expired`` (now or before).

    None when the record refused because it is not expired (another deadline of its own, started
    already, finished): the claim then decides what the message is worth, as for any delivery.
    LEAVE when DynamoDB did not answer: the message comes back and is tried again.
    """
    try:  # a batch item's expiry counts on its batch, a chain step's stops its chain (runtime/hooks.py)
        expired = await commit_unrun(hooks, unrun(envelope, AttemptOutcome.EXPIRED), lambda entries: store.expire(
            envelope, now=now, reason=deadlines.reason(deadline), retention_s=app.settings.retention_s,
            type_bound_s=type_bound_s, entries=entries,
        ))  # fmt: skip
    except StoreError as exc:
        app.logger.warning(
            "expire failed, message left for redelivery",
            extra={"job_id": envelope.job_id, "error": str(exc)},
        )
        return LEAVE
    if isinstance(expired, Refused):  # read by JobStore.expire
        return DELETE if expired.reason is Refusal.ALREADY_EXPIRED else None
    app.logger.info(
        "job expired",
        extra={
            "job_id": envelope.job_id,
            "job_type": envelope.job_type,
            "queue": delivery.queue,
            "tenant": envelope.tenant,
            "status": "expired",
            "reason": deadlines.reason(deadline),
            "late_s": round(now - deadline, 3),
        },
    )
    app.metrics.count(EXPIRED, envelope.job_type, envelope.tenant)
    return DELETE
