"""The batch's ``FinishHook``: an item's terminal outcome counts on its shard, in the finish's own transaction.

A succeeded, dead or cancelled item of a batch (``Job.batch_key``) adds one to ``succeeded`` or
``failed`` of its counter shard in the same ``TransactWriteItems`` as its finish, so the count and
the transition cannot disagree after a crash, and a duplicate message cannot count twice: the
finish is fenced by the claim token, and a refused finish refuses its count with it. Retries and
releases are not terminal and count nothing. Once the finish landed, the hook reads the shard and,
when it is done, checks the batch (``completion.after_finish_flow``); a crash before that check is
repaired by the sweeper (the batch's ``batch`` attention entry).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqsjobs.batches import records as batch_records
from sqsjobs.batches.completion import after_finish_flow, repair_flow
from sqsjobs.batches.namespace import ItemStream, env_of
from sqsjobs.job import AttemptOutcome
from sqsjobs.runtime.seams import Plugin

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sqsjobs.delivery import Finish
    from sqsjobs.runtime.kernel import Kernel
    from sqsjobs.store.write import Entry

#: The counter each terminal outcome adds to.
COUNTED = {
    AttemptOutcome.SUCCEEDED: "succeeded",
    AttemptOutcome.DEAD: "failed",
    AttemptOutcome.CANCELLED: "failed",
    AttemptOutcome.EXPIRED: "failed",
}


class BatchHook:
    """Counts a batch item's terminal outcome with its finish, then checks the batch (see the module docstring)."""

    def __init__(self, kernel: Kernel) -> None:
        self._kernel = kernel

    async def entries(self, finish: Finish) -> Sequence[Entry]:
        """``ADD succeeded|failed 1`` on the item's shard, for a terminal outcome of a batch item."""
        counter = COUNTED.get(finish.outcome)
        if counter is None or finish.job.batch is None:
            return []
        return [batch_records.count_write(self._kernel.settings.table_name, finish.job.batch.key, counter)]

    async def landed(self, finish: Finish) -> None:
        """Read the item's shard and check the batch when it is done; never raises."""
        counter = COUNTED.get(finish.outcome)
        batch = finish.job.batch
        if counter is None or batch is None:
            return
        try:
            await self._kernel.arun(
                after_finish_flow(
                    env_of(self._kernel), batch.key, failed=counter == "failed", now=self._kernel.clock.now()
                )
            )
        except Exception as exc:  # the count landed; the sweeper completes the batch if this check did not
            self._kernel.logger.warning(
                "batch completion check failed; the sweeper repeats it",
                extra={"job_id": finish.job.id, "batch_id": batch.id, "error": repr(exc)},
            )


class Repair:
    """The batches' ``SweepPass``: each sweep checks again every sealed batch whose repair entry is due."""

    def __init__(self, kernel: Kernel) -> None:
        self._kernel = kernel

    async def sweep(self, now: float) -> list[str]:
        """The batches this pass completed (a crash between an item's finish and its check, a drain)."""
        kernel = self._kernel
        completed: list[str] = await kernel.arun(repair_flow(env_of(kernel), now))
        return completed


def batches_plugin(kernel: Kernel) -> Plugin:
    """Batches: items streamed from a handler, an item's end counted with its finish."""
    # ``ctx.batches`` is every run's (any handler may stream items); the counts are a batch item's only.
    return Plugin(
        "batches",
        finish=BatchHook(kernel),
        sweep=Repair(kernel),
        fields=("batch",),
        context={"batches": ItemStream(kernel)},
    )
