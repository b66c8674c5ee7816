"""Durable sleeps: ``ctx.sleep(timedelta)`` ends the run without using an attempt and resumes after the delay.

The handler's ``ctx.sleep`` raises ``Sleep``; the run stage hands it to ``SleepOutcome`` (the
kernel's ``RunOutcome`` seam) instead of the retry policy. One fenced write records the sleep as a
step and queues the job again until it wakes, giving the attempt back; the slot (on Lambda, the
invocation) is free at once. The witness is the retry's: the same message re-armed to the wake-up,
or — beyond the 12 h visibility cap, or past the message's expiry — a ``held`` entry the sweeper
sends when due. The woken run replays the steps before the sleep, finds the sleep recorded and
goes on after it.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from sqsjobs.delivery import DELETE, LEAVE, RELEASE, Ack, Finish
from sqsjobs.errors import Sleep
from sqsjobs.job import AttemptOutcome, JobStatus
from sqsjobs.steps import records
from sqsjobs.store import yielded
from sqsjobs.store.apply import Refused
from sqsjobs.transport import lifespan, sqs

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

    from sqsjobs.delivery import Delivery
    from sqsjobs.job import Job
    from sqsjobs.store.apply import Landed
    from sqsjobs.store.job_store import JobStore
    from sqsjobs.store.write import Entry, Write


class SleepOutcome:
    """Records a ``Sleep``: the job queued until it wakes, its message re-armed (or the record held)."""

    async def record(self, job: Job, exc: BaseException, delivery: Delivery | None, recorder: Any) -> Ack:
        """One fenced write, the finish hooks' entries with it (a limit's slot is given back)."""
        assert isinstance(exc, Sleep)
        kernel = recorder.kernel
        now = kernel.clock.now()
        delay = max(0.0, exc.until - now)
        # A wait for a token is always held: the answer wakes the job from its record (payload kept).
        # A sleep past the 12 h cap on a FIFO queue keeps its message, and so its place in its key
        # (``lifespan.in_key``).
        held = (
            exc.waits_for is not None
            or (delay > sqs.MAX_VISIBILITY_S and not lifespan.in_key(delivery))
            or recorder.outlives(delivery, exc.until)
        )
        table = kernel.settings.table_name
        write = records.sleep(
            table, job, exc.step, until=exc.until, now=now, held=held, unanswered=exc.waits_for
        )
        if held and job.serialize_key is not None:  # its message goes: the key's later jobs go first
            why = "waits on a token" if exc.waits_for is not None else "sleeps past its message's life"
            write = write.also_set(*yielded.note(f"{why}: its key went on", now))
        refusals: list[Refused] = []
        if not await recorder.write(
            job, _noting(refusals, recorder.store, job, write), Finish(job, AttemptOutcome.RELEASED)
        ):
            if exc.waits_for is not None and refusals and _still_ours(job, refusals[-1]):
                return await _answered_meanwhile(job, recorder, exc.waits_for, now)
            return LEAVE
        name = exc.step.name if exc.step is not None else exc.waits_for
        recorder.log(
            "job asleep", job, status=JobStatus.QUEUED, step=name, delay_s=round(delay, 3), held=held
        )
        if held:
            return DELETE
        # A sleep uses no attempt, so its receives must not add up to the redrive limit (sized for
        # attempts): a job that sleeps more often than that would be moved to a DLQ mid-sleep.
        redrive = lifespan.redrive_limit(kernel.settings, kernel.registry.max_attempts())
        if delivery is None:
            return Ack("rearm", delay_s=sqs.clamp_visibility(delay))
        return lifespan.waiting(delivery, delay, redrive)


def _noting(
    refusals: list[Refused], store: JobStore, job: Job, write: Write
) -> Callable[..., Awaitable[Landed | Refused]]:
    """The sleep's transition, keeping its refusal: the record it met says why."""

    async def transition(*, entries: Sequence[Entry] = ()) -> Landed | Refused:
        outcome = await store.transition(job, write, entries=entries)
        if isinstance(outcome, Refused):
            refusals.append(outcome)
        return outcome

    return transition


def _still_ours(job: Job, refused: Refused) -> bool:
    """The refusal met our own run (running, our claim): only the token's answer refused the wait."""
    met = refused.job
    return met is not None and met.status is JobStatus.RUNNING and met.claim_token == job.claim_token


async def _answered_meanwhile(job: Job, recorder: Any, waits_for: str, now: float) -> Ack:
    """The token was answered between the run's read and its wait: a sleep of no time instead.

    The run ends as a sleep does (attempt given back, finish hooks heard) and its message is visible
    at once, so the next claim replays the steps and reads the answer. Leaving the run to its lease
    instead would delay the job a lease, and end one whose attempts are all used as ``dead``.
    """
    write = records.sleep(recorder.kernel.settings.table_name, job, None, until=now, now=now, held=False)
    transition = functools.partial(recorder.store.transition, job, write)
    if not await recorder.write(job, transition, Finish(job, AttemptOutcome.RELEASED)):
        return LEAVE
    recorder.log(
        "job's token answered as it began to wait: it runs again now",
        job,
        status=JobStatus.QUEUED,
        step=waits_for,
    )
    return RELEASE
