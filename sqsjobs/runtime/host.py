"""The delivery host: what the ECS worker and the Lambda adapter share between a receive and an ack.

Both hand each delivery to one ``Execution`` (claim → run → record), keep the jobs whose handler
runs (``running``: the lease renewal reads them, a shutdown interrupts them), renew those leases on
an interval, and apply the ``Ack`` each delivery ends with (``runtime/acks.py``). Only what differs
stays in the hosts: how messages arrive (a receive loop with slots; an event), how an ack reaches
SQS (batched ``MessageOps``; the partial batch response), and their deadlines (a drain; the
invocation's remaining time).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from sqsjobs.delivery import LEAVE
from sqsjobs.runtime.execution import Execution
from sqsjobs.transport.lifespan import keep_witness

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from concurrent.futures import ThreadPoolExecutor

    from sqsjobs.context import InterruptReason, JobContext
    from sqsjobs.delivery import Ack, Delivery
    from sqsjobs.runtime.kernel import Kernel


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
        """The delivery's ``Ack``; an unexpected error leaves the message to come back.

        Whoever decided a re-arm, it never outlives its message (``transport/lifespan.py``).
        """
        try:
            ack = await self.execution.handle(delivery)
            return keep_witness(ack, delivery, self.kernel.clock.now(), self.kernel.settings)
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
