"""``@app.job(..., hooks=Hooks(on_dead="alerts.page", on_succeeded="billing.record"))``: Python that runs once per end.

For teams that want a handler rather than an EventBridge rule. When a job of a hooked type ends
``dead`` (or ``succeeded``), the hook job — a job of the named type whose payload is the ended
job's summary (``summary``) — is written in the same ``TransactWriteItems`` as the finish, as a
batch's completion callback is: the finish and its hook land together or not at all, so a worker
killed right after its finish cannot lose the hook, and a refused finish (a duplicated message, a
lost lease) cannot make one. The hook job's id is derived from the ended job and its claim token:
one hook per transition, also when the transaction is retried after a lost answer.

Once the transaction landed, the hook job's message is sent and its record's pending entry cleared;
a crash before that leaves the entry, and the sweeper sends the message at its due
(``stale_after_s``). The hook job is then an ordinary job of its type: its own retries, its own
dead end. The summary never carries the payload or the result (``result_ref`` names a result kept
in S3; read the record for the rest).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqsjobs.errors import ConfigurationError
from sqsjobs.job import AttemptOutcome
from sqsjobs.runtime.follow_ups import FollowUps, follow_up_job
from sqsjobs.runtime.seams import Plugin

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sqsjobs.delivery import Finish
    from sqsjobs.registry import HandlerSpec
    from sqsjobs.runtime.kernel import Kernel
    from sqsjobs.store.write import Entry

#: The outcome each hook follows, and the ``HandlerSpec`` field naming it.
HOOKS = {AttemptOutcome.DEAD: "on_dead", AttemptOutcome.SUCCEEDED: "on_succeeded"}


def summary(finish: Finish) -> dict[str, Any]:
    """The hook job's payload: what ended, how, and why; never the payload or the result."""
    job = finish.job
    return {
        "job_id": job.id,
        "type": job.type,
        "status": str(finish.outcome),
        "attempt": job.attempt,
        "tenant": job.tenant,
        "queue": job.queue,
        "error_class": finish.error.error_class if finish.error else None,
        "error": finish.error.message if finish.error else None,
        "result_ref": finish.result_ref,
        "batch_id": job.batch.id if job.batch else None,
        "chain_id": job.chain.id if job.chain else None,
    }


class TransitionHooks:
    """The ``FinishHook``: the hook job's record with the finish, then its message (see the module docstring)."""

    def __init__(self, kernel: Kernel) -> None:
        self._kernel = kernel
        self._follow_ups = FollowUps(kernel, "hook job")

    def _hook_of(self, finish: Finish) -> HandlerSpec | None:
        field = HOOKS.get(finish.outcome)
        registry = self._kernel.registry
        if field is None or finish.job.type not in registry:
            return None
        name = getattr(registry.get(finish.job.type).hooks, field)
        return None if name is None else registry.get(name)

    async def entries(self, finish: Finish) -> Sequence[Entry]:
        """The hook job's ``Put`` (kept pending for the sweeper until its message is sent)."""
        hook = self._hook_of(finish)
        if hook is None:
            return []
        now = self._kernel.clock.now()
        key = f"{HOOKS[finish.outcome]}:{finish.job.id}:{finish.job.claim_token or finish.job.attempt}"
        job = follow_up_job(hook, finish.job, key=key, payload=summary(finish), queue=hook.queue, now=now)
        return [self._follow_ups.put(finish.job.id, job)]

    async def landed(self, finish: Finish) -> None:
        """Send the hook job's message and clear its pending entry; never raises (the sweeper resends)."""
        await self._follow_ups.landed(finish.job.id)


def hooks_plugin(kernel: Kernel) -> Plugin:
    """Hooks: the types that name ``on_dead``/``on_succeeded`` are this feature's; their targets must exist."""
    hooked: set[str] = set()
    for spec in kernel.registry:
        for target in (spec.hooks.on_dead, spec.hooks.on_succeeded):
            if target is None:
                continue
            if target not in kernel.registry:
                raise ConfigurationError(
                    f"job {spec.name!r} names hook {target!r}, which is not a registered job type"
                )
            hooked.add(spec.name)
    return Plugin(
        "hooks", finish=TransitionHooks(kernel) if hooked else None, fields=(), types=frozenset(hooked)
    )
