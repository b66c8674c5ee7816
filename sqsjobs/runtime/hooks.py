"""What else a finish writes: the seam through which workflows and flow control follow a job's end.

A job that belongs to something larger (a batch's counters, a chain's next step, a limit's slot)
must have that larger thing updated *with* its own transition, or a crash between the two writes
leaves them disagreeing. A ``FinishHook`` (``runtime/seams.py``; each feature registers its own
with the kernel) says, for one finish, which DynamoDB writes must commit atomically with it
(``entries``: the finish then goes as one ``TransactWriteItems``, at twice the write units,
instead of its single UpdateItem), and what to do once it landed (``landed``: work that may follow
the finish, such as sending a hint; it must not raise). A finish no hook claims pays nothing: it
stays the single (or batched) write of the happy path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqsjobs.delivery import Finish
from sqsjobs.store.codec import job_from_item
from sqsjobs.store.enqueue import record_of
from sqsjobs.store.job_store import Landed

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping, Sequence

    from sqsjobs.envelope import Envelope
    from sqsjobs.job import AttemptOutcome, FailureRecord
    from sqsjobs.runtime.seams import FinishHook
    from sqsjobs.store.job_store import Refused


async def entries_of(hooks: Sequence[FinishHook], finish: Finish | None) -> list[Mapping[str, Any]]:
    """Every hook's entries for ``finish``, in hook order (none without a finish)."""
    return [e for hook in hooks for e in await hook.entries(finish)] if finish is not None else []


async def tell_landed(hooks: Sequence[FinishHook], finish: Finish | None) -> None:
    """Tell every hook that ``finish`` (and its entries) committed."""
    if finish is not None:
        for hook in hooks:
            await hook.landed(finish)


def unrun(envelope: Envelope, outcome: AttemptOutcome, error: FailureRecord | None = None) -> Finish | None:
    """A job ended without a run (rejected: dead; expired), as a finish its batch or chain must hear of.

    None for a message without the job's fields (version 1): it does not describe the job.
    """
    if not envelope.has_payload:
        return None
    return Finish(job_from_item(record_of(envelope)), outcome, error=error)


async def commit_unrun(
    hooks: Sequence[FinishHook],
    finish: Finish | None,
    transition: Callable[[Sequence[Mapping[str, Any]]], Awaitable[Landed | Refused]],
) -> Landed | Refused:
    """Apply ``transition`` (one without a run: ``JobStore.reject``, ``expire``) with what the hooks add.

    The hooks hear of it only once it landed; a ``StoreError`` is raised as the transition raised it.
    """
    entries = await entries_of(hooks, finish)
    outcome = await transition(entries)
    if isinstance(outcome, Landed):
        await tell_landed(hooks, finish)
    return outcome
