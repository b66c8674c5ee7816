"""The delivery host: what the ECS worker and the Lambda adapter share between a receive and an ack.

Both hand each delivery to one ``Execution`` (claim → run → record), keep the jobs whose handler
runs (``running``: the lease renewal reads them, a shutdown interrupts them), renew those leases on
an interval, and apply the ``Ack`` each delivery ends with (``apply``). Only what differs stays in
the hosts: how messages arrive (a receive loop with slots; an event), how an ack reaches SQS (an
``AckTarget``: the batched ``MessageOps``; the partial batch response), and their deadlines (a drain;
the invocation's remaining time).

Applying an ``Ack`` is the one place that turns a decided ack into what happens to the message. The
execution decides (``sqsjobs.delivery.Ack``: delete, re-arm, release, dead-letter, leave) after the
job's record is written; ``apply`` acts on it through the host's target. The ECS worker's target is
its ``MessageOps`` (batched deletes and visibility changes, the DLQ send then the delete); the Lambda
adapter's is its reply (``runtime/lambda_sqs.py``: a delete is a success the event source mapping
deletes, a re-arm a visibility change reported as a failure). Deciding and applying stay apart, so
each can be read and tested alone.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Protocol

from sqsjobs.delivery import LEAVE
from sqsjobs.runtime.execution import Execution

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from concurrent.futures import ThreadPoolExecutor

    from sqsjobs.context import InterruptReason, JobContext
    from sqsjobs.delivery import Ack, Delivery
    from sqsjobs.runtime.kernel import Kernel


class AckTarget(Protocol):
    """What a host does with a message; ``leave`` needs nothing (the message comes back by itself)."""

    def delete(self, delivery: Delivery) -> None:
        """The message is done with."""
        ...

    def set_visibility(self, delivery: Delivery, seconds: int) -> None:
        """Hide the message for ``seconds`` (0: visible again now)."""
        ...

    async def dead_letter(self, delivery: Delivery, dlq_url: str, attributes: dict[str, str]) -> None:
        """Copy the message to the DLQ with ``attributes``, then let it go."""
        ...

    async def resend(self, delivery: Delivery, delay_s: int) -> None:
        """Send a fresh copy of the message, then let this one go (re-arm it if the send fails)."""
        ...


async def apply(ack: Ack, delivery: Delivery, dlq_url: str, target: AckTarget) -> None:
    """Act on ``delivery`` as ``ack`` says, once its record was written."""
    if ack.kind == "delete":
        target.delete(delivery)
    elif ack.kind == "rearm":
        target.set_visibility(delivery, ack.delay_s)
    elif ack.kind == "release":
        target.set_visibility(delivery, 0)
    elif ack.kind == "dead_letter":
        await target.dead_letter(delivery, dlq_url, ack.attributes)
    elif ack.kind == "resend":
        await target.resend(delivery, ack.delay_s)


class DeliveryHost:
    """One execution, the jobs it runs now, and their lease renewal."""

    def __init__(
        self,
        kernel: Kernel,
        worker_id: str,
        *,
        pool: ThreadPoolExecutor,
        default_timeout_s: Callable[[], float] | None = None,
        what: str = "message",
    ) -> None:
        """``what`` names a delivery in the host's log lines (``message``; ``record`` for Lambda)."""
        self.kernel = kernel
        self._what = what
        #: Jobs whose handler is running, by job id.
        self.running: dict[str, JobContext] = {}
        self.execution = Execution(
            kernel,
            worker_id,
            pool=pool,
            on_run=self._track,
            on_done=self._untrack,
            default_timeout_s=default_timeout_s,
        )

    def _track(self, ctx: JobContext) -> None:
        self.running[ctx.job.id] = ctx

    def _untrack(self, ctx: JobContext) -> None:
        self.running.pop(ctx.job.id, None)

    async def handle(self, delivery: Delivery) -> Ack:
        """The delivery's ``Ack``; an unexpected error leaves the message to come back."""
        try:
            return await self.execution.handle(delivery)
        except Exception:
            self.kernel.logger.exception(
                f"unexpected error handling a {self._what}; it will be redelivered",
                extra={"message_id": delivery.message_id},
            )
            return LEAVE

    def interrupt_all(self, reason: InterruptReason) -> None:
        """Ask every running handler to stop (a shutdown's release)."""
        for ctx in list(self.running.values()):
            ctx.interrupt(reason)

    async def renew_leases(self) -> None:
        """Renew the lease of every running job past half of it (and what its admission holds)."""
        await self.execution.renew_leases(list(self.running.values()))

    async def keep_leases(
        self, interval_s: float, *, extend: Callable[[], Awaitable[None]] | None = None
    ) -> None:
        """Every ``interval_s``: ``extend`` (the held messages' visibility), then ``renew_leases``; until cancelled.

        A failed beat is logged and the next one comes on time: a lease left to run out would let
        another worker rescue a job that is still running.
        """
        while True:
            await asyncio.sleep(interval_s)
            try:
                if extend is not None:
                    await extend()
                await self.renew_leases()
            except Exception:
                self.kernel.logger.exception("heartbeat failed")
