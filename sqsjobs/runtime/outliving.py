"""Runs that outlive their message: the owner writes the witness the message can no longer be.

A running job is witnessed by its lease and by its message, which the owner keeps invisible: if the
owner dies, the message comes back and its claim rescues the job. SQS deletes a message
``message_retention_s`` after its first send even while it is held, so a handler that runs longer
than that is left with its lease alone, and a lapsed lease brings nothing back. At each heartbeat the
owner looks for runs whose message will be gone before the next beats; each gets one write
(``store/outlived.py``): its payload and a ``pending`` attention entry due when its lease would lapse,
which the sweeper follows (``runtime/sweeper.py``). Only such runs pay anything: one comparison per
running job per heartbeat for the others. A message gone before its time (deleted by hand, a purge:
the heartbeat's extension is refused) gets the same write at once (``lost``).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from sqsjobs.errors import AwsError
from sqsjobs.store import outlived
from sqsjobs.store.apply import Refused, apply
from sqsjobs.transport import lifespan

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sqsjobs.context import JobContext
    from sqsjobs.runtime.kernel import Kernel

#: Beats of warning: a run is marked when its message would be gone within this many heartbeats
#: (less the visibility timeout ``lifespan.reach_s`` keeps), so one failed beat is still in time.
BEATS_AHEAD = 2


class OutlivingRuns:
    """One per delivery host: the runs it marked (by claim), so each is written once."""

    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel
        self._marked: set[tuple[str, str]] = set()

    async def keep(self, running: Sequence[JobContext]) -> None:
        """Mark every run of ``running`` whose message is about to expire; forget runs that ended."""
        settings = self.kernel.settings
        now = self.kernel.clock.now()
        horizon = now + BEATS_AHEAD * settings.heartbeat_interval_s
        claims = {(ctx.job.id, ctx.job.claim_token or ""): ctx for ctx in running}
        self._marked &= set(claims)
        due = [
            ctx
            for claim, ctx in claims.items()
            if claim not in self._marked
            and ctx.delivery is not None
            and lifespan.outlives(settings, ctx.delivery.sent_at, horizon)
        ]
        marked = await asyncio.gather(*(self._mark(ctx, now) for ctx in due))
        self._marked |= {
            (ctx.job.id, ctx.job.claim_token or "") for ctx, ok in zip(due, marked, strict=True) if ok
        }

    async def lost(self, runs: Sequence[JobContext]) -> None:
        """Mark ``runs`` now, whatever their message's age: SQS no longer has their message."""
        now = self.kernel.clock.now()
        due = [ctx for ctx in runs if (ctx.job.id, ctx.job.claim_token or "") not in self._marked]
        marked = await asyncio.gather(*(self._mark(ctx, now) for ctx in due))
        self._marked |= {
            (ctx.job.id, ctx.job.claim_token or "") for ctx, ok in zip(due, marked, strict=True) if ok
        }

    async def _mark(self, ctx: JobContext, now: float) -> bool:
        """True once nothing more is to be written for this run (marked, or no longer its owner's)."""
        job = ctx.job
        lease_end = job.lease_expires.timestamp() if job.lease_expires else now + self.kernel.settings.lease_s
        write = outlived.mark(
            self.kernel.settings.table_name, job, payload=job.payload, due=lease_end, now=now
        )
        try:
            marked = await self.kernel.arun(apply(write))
        except AwsError as exc:
            self.kernel.logger.warning(
                "run outliving its message not marked; the next heartbeat tries again",
                extra={"job_id": job.id, "error": str(exc)},
            )
            return False
        if isinstance(marked, Refused):
            return True  # marked already (a retry whose answer was lost), or its lease was lost
        self.kernel.logger.info(
            "run outlives its message: its record keeps the payload and an attention entry",
            extra={"job_id": job.id, "due": lease_end},
        )
        return True
