"""What a chain step's run adds: the previous result before it, and the next step with its finish.

Before the handler (``before_step``): one strongly consistent GetItem of the predecessor's record
(1 read unit up to 4 KB), plus one S3 GET when its result is an object. The same read says whether
``app.chains.cancel`` asked the predecessor to stop: a predecessor that succeeded anyway does not start
this step, which ends cancelled (and ends the chain).

With the finish (``ChainHook``, the chains feature's ``FinishHook``; ``chains_plugin`` registers both)::

    step n's finish     entries committed with it (one TransactWriteItems)    landed (after)
    succeeded, n < last step n+1 waiting → queued + pending entry;       send n+1's hint; clear the entry
                        chain record current n → n+1
    succeeded, last     chain record → succeeded                              -
    dead                chain record → stopped at n, with the reason          later steps waiting → cancelled
    cancelled           chain record → cancelled at n                         later steps waiting → cancelled
    retry, released     nothing: the chain waits for the step's own retry     -

A crash after the commit and before the hint leaves step n+1 queued with its ``pending`` entry:
the sweeper sends the hint at ``due``. A crash before the later steps are dropped leaves them
``waiting``: they never run (nothing unblocks them; ``app.chains.get`` shows the chain stopped), and
they stay until an operator deletes them. ``entries`` reads the chain record and step n+1's record
first (one BatchGetItem, 2 read units): a step replayed by an operator after its chain ended runs
alone, with no entries, and the hint needs step n+1's fields.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from sqsjobs._aws import Call, one
from sqsjobs.chains import records as chain_records
from sqsjobs.chains.namespace import read_items
from sqsjobs.chains.records import ChainState
from sqsjobs.errors import Cancel
from sqsjobs.job import AttemptOutcome, JobStatus
from sqsjobs.producer import hint_written
from sqsjobs.runtime.seams import Plugin
from sqsjobs.store import codec, requests
from sqsjobs.store.apply import apply
from sqsjobs.store.codec import Item, num_attr, str_attr, to_datetime
from sqsjobs.transport import objects

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from sqsjobs.delivery import Finish
    from sqsjobs.job import Job
    from sqsjobs.runtime.kernel import Kernel
    from sqsjobs.store.write import Entry, Write

#: Finishes whose entries are kept for their ``landed`` at once, at most (a refused finish never lands).
MAX_PENDING_LANDINGS = 10_000


async def before_step(kernel: Kernel, job: Job) -> Any:
    """The previous step's result for ``job``, a chain step; raises ``Cancel`` when the chain was asked to stop.

    Step 0 has no predecessor (None). A failed read raises its ``StoreError``/``ObjectStoreError``
    (the attempt is retried by the type's policy); a result object gone raises ``PayloadMissing``.
    """
    if job.cancel_requested:
        raise Cancel("chain cancelled: this step was asked to stop before it started")
    if job.chain is None or not job.chain.step:
        return None
    previous_id = chain_records.step_job_id(job.chain.id, job.chain.step - 1)
    read = requests.get(kernel.settings.table_name, previous_id) | {
        "ProjectionExpression": "#r, result_ref, cancel_requested",
        "ExpressionAttributeNames": {"#r": "result"},
    }
    response = await kernel.arun(one(Call("dynamodb", "get_item", read)))
    item = response.get("Item") or {}
    if item.get("cancel_requested", {}).get("BOOL"):
        raise Cancel(f"chain cancelled while step {job.chain.step - 1} ran")
    reference = str_attr(item, "result_ref")
    if reference is not None:
        return json.loads(await kernel.arun(objects.get_flow(reference)))
    raw = str_attr(item, "result")
    return None if raw is None else json.loads(raw)


class ChainHook:
    """The finish hook of chain steps (see the module docstring); a job outside a chain passes untouched."""

    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel
        #: claim token → the next step's record (read in ``entries``) and its unblock, for ``landed``.
        self._next: dict[str, tuple[Item, Write] | None] = {}

    async def entries(self, finish: Finish) -> Sequence[Entry]:
        """The chain's writes that commit with this finish (none for retries, releases, other jobs)."""
        job = finish.job
        if job.chain is None:
            return []
        if finish.outcome not in (
            AttemptOutcome.SUCCEEDED,
            AttemptOutcome.DEAD,
            AttemptOutcome.CANCELLED,
            AttemptOutcome.EXPIRED,
        ):
            return []
        table, now, step = self.kernel.settings.table_name, self.kernel.clock.now(), job.chain.step
        last = step + 1 >= job.chain.steps
        next_id = chain_records.step_job_id(job.chain.id, step + 1)
        chain_id = f"{chain_records.CHAIN_PREFIX}{job.chain.id}"
        wanted = [chain_id] if last or finish.outcome is not AttemptOutcome.SUCCEEDED else [chain_id, next_id]
        items = await self.kernel.arun(read_items(table, wanted))
        chain = items.get(chain_id)
        if (
            chain is None
            or str_attr(chain, "chain_state") != ChainState.RUNNING
            or chain_records.chain_fields(chain)["current"] != step
        ):
            return []  # a step replayed after its chain ended (or the chain expired): it runs alone
        retention = self.kernel.settings.retention_s
        if finish.outcome is AttemptOutcome.SUCCEEDED and last:
            return [
                chain_records.end(
                    table, job.chain.id, step=step, state=ChainState.SUCCEEDED, now=now, retention_s=retention
                )
            ]
        if finish.outcome is AttemptOutcome.SUCCEEDED:
            following = items.get(next_id)
            if following is None or str_attr(following, "status") != JobStatus.WAITING:
                self.kernel.logger.error("chain: the next step is not waiting", extra={"job_id": next_id})
                return []
            unblock = chain_records.unblock(
                table,
                next_id,
                now=now,
                recheck_at=now + self.kernel.settings.stale_after_s,
                start_by=self._deadline(following, now),
            )
            self._remember(job, (following, unblock))
            return [unblock, chain_records.advance(table, job.chain.id, step=step, now=now)]
        dead = finish.outcome in (AttemptOutcome.DEAD, AttemptOutcome.EXPIRED)
        error = finish.error
        why = f": {error.error_class}: {error.message}" if dead and error else ""
        ended = {AttemptOutcome.DEAD: "died", AttemptOutcome.EXPIRED: "expired"}.get(
            finish.outcome, "was cancelled"
        )
        reason = f"step {step} ({job.type}) {ended}{why}"
        state = ChainState.STOPPED if dead else ChainState.CANCELLED
        self._remember(job, None)
        return [
            chain_records.end(
                table, job.chain.id, step=step, state=state, now=now, retention_s=retention, reason=reason
            )
        ]

    def _deadline(self, step: Item, now: float) -> float | None:
        """The unblocked step's expiry deadline from now: its own ``expires_after``, else its type's."""
        own, created = num_attr(step, "start_by"), num_attr(step, "created_at")
        if own is not None and created is not None:
            return now + (own - created)
        job_type = str_attr(step, "type")
        if job_type is None or job_type not in self.kernel.registry:
            return None
        bound = self.kernel.registry.get(job_type).expires_after_s
        return None if bound is None else now + bound

    def _remember(self, job: Job, landing: tuple[Item, Write] | None) -> None:
        if len(self._next) >= MAX_PENDING_LANDINGS:
            self._next.clear()  # only refused finishes leave theirs behind; a landing lost here is swept
        self._next[str(job.claim_token)] = landing  # None: the chain stops, its later steps are dropped

    async def landed(self, finish: Finish) -> None:
        """Send the next step's hint, or drop the later steps; logs a failure (the sweeper or nothing repairs it)."""
        job = finish.job
        if str(job.claim_token) not in self._next:
            return
        landing = self._next.pop(str(job.claim_token))
        if job.chain is None:
            return
        try:
            if landing is not None:
                await self._send_next(*landing)
            else:
                await self._drop_later(job.chain.id, job.chain.step, job.chain.steps)
        except Exception as exc:
            self.kernel.logger.warning(
                "chain: follow-up after a step's finish failed",
                extra={"job_id": job.id, "chain_id": job.chain.id, "error": f"{type(exc).__name__}: {exc}"},
            )

    async def _send_next(self, following: Item, unblock: Write) -> None:
        now = float((unblock.value(":now") or {})["N"])
        record = codec.job_from_item(following)
        job = record.evolve(status=JobStatus.QUEUED, run_at=to_datetime(now))
        # The one path of every job written in another's transaction: send, then clear the pending
        # entry; a refused send or clear leaves the entry, and the sweeper sends the hint at its due.
        await self.kernel.arun(
            hint_written(
                [(job, chain_records.pending_entry(unblock))],
                table=self.kernel.settings.table_name,
                queue_urls=self.kernel.queue_urls,
                settings=self.kernel.settings,
                logger=self.kernel.logger,
            )
        )

    async def _drop_later(self, chain_id: str, step: int, length: int) -> None:
        reason = f"chain ended at step {step}"
        now, table = self.kernel.clock.now(), self.kernel.settings.table_name
        for index in range(step + 1, length):
            drop = chain_records.drop(
                table,
                chain_records.step_job_id(chain_id, index),
                now=now,
                reason=reason,
                retention_s=self.kernel.settings.retention_s,
            )
            await self.kernel.arun(apply(drop))  # refused: dropped already (a repeated landing)


class PreviousResult:
    """The chains feature's ``RunPreparation``: a step's ``ctx.previous_result`` (``before_step``)."""

    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel

    async def prepare(self, job: Job) -> Mapping[str, Any]:
        """``previous_result`` for a chain step; nothing outside chains. Raises what ``before_step`` raises."""
        if job.chain is None:
            return {}
        return {"previous_result": await before_step(self.kernel, job)}


def chains_plugin(kernel: Kernel) -> Plugin:
    """Chains: the previous step's result before a step runs, the next step unblocked with its finish."""
    return Plugin("chains", finish=ChainHook(kernel), prepare=PreviousResult(kernel), fields=("chain",))
