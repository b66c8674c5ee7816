"""Expiry as a plug-in: a job not started by its deadline ends ``expired`` and never runs.

The expiry feature's ``ClaimGuard`` (``runtime/seams.py``): the worker checks the deadline the
message shows before it claims (``before``: no claim for a job it can see has expired), and the
claim's condition refuses an expired record whatever the message shows (``terms``: the named
fragments ``claim_guard`` and ``fresh_claim_guard`` of ``store/runs.py``), so a copy of the message put back into the queue, a backlog
reached late, or a thin producer's job (no deadline in it: the type's bound applies) never runs.
A claim its fragments refused is read back by ``refused``. Either way the worker records
``expired`` instead (``runtime/record_stage.py``: one conditional write with the finish hooks'
entries, so a batch item counts and a chain step stops its chain), and deletes the message:
expiry is an outcome the producer asked for, not an error an operator must look at.

Only the jobs that can expire hear of it (``Plugin.fields``/``types``): a type with an
``expires_after``, or a message that shows a deadline. The sweeper expires the held and pending
records no message carries (``runtime/sweeper.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqsjobs.runtime.seams import ClaimTerms, ExpireInstead, Plugin
from sqsjobs.store import deadlines, runs

if TYPE_CHECKING:
    from sqsjobs.envelope import Envelope
    from sqsjobs.job import Job
    from sqsjobs.registry import HandlerSpec
    from sqsjobs.runtime.kernel import Kernel
    from sqsjobs.store.codec import Item


class Deadlines:
    """The claim guard of jobs with a deadline (see the module docstring)."""

    def before(self, spec: HandlerSpec, envelope: Envelope, now: float) -> ExpireInstead | None:
        """Expire instead of claiming when the deadline the message shows passed."""
        bound = spec.expires_after_s
        deadline = deadlines.message_deadline(envelope, bound)
        if deadline is None or deadline >= now:
            return None
        return ExpireInstead(deadline, deadlines.reason(deadline), bound)

    def terms(self, spec: HandlerSpec, envelope: Envelope, now: float) -> ClaimTerms:
        """The claim refuses an expired record; the fresh claim, a record whose deadline is not the message's."""
        bound = spec.expires_after_s
        single = runs.claim_guard(now=now, type_bound_s=bound)
        fresh = runs.fresh_claim_guard(envelope, now=now, type_bound_s=bound, values=single.values)
        return ClaimTerms(single=(single,), fresh=(fresh,))

    def refused(self, spec: HandlerSpec, item: Item | None, now: float) -> ExpireInstead | None:
        """Expire instead when the record the claim met expired (its own deadline, or the type's)."""
        bound = spec.expires_after_s
        passed = deadlines.expired_deadline(item, now, bound)
        return None if passed is None else ExpireInstead(passed, deadlines.reason(passed), bound)

    def late(self, spec: HandlerSpec, job: Job, now: float) -> str | None:
        """Its deadline passed while it waited for a slot: a job not started by then never starts."""
        if job.lease_epoch > 1:  # claimed before (a retry, a release): it started before its deadline
            return None
        deadline = deadlines.deadline(
            job.start_by.timestamp() if job.start_by else None,
            job.created_at.timestamp(),
            spec.expires_after_s,
        )
        return deadlines.reason(deadline) if deadline is not None and deadline < now else None


def expiry_plugin(kernel: Kernel) -> Plugin:
    """Expiry: the claim guarded by the job's deadline; expired instead of claimed once it passed."""
    bounded = frozenset(s.name for s in kernel.registry if s.expires_after_s is not None)
    return Plugin("expiry", claim=Deadlines(), fields=("start_by",), types=bounded)
