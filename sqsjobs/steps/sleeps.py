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

from sqsjobs.delivery import DELETE, LEAVE, Ack, Finish
from sqsjobs.errors import Sleep
from sqsjobs.job import AttemptOutcome, JobStatus
from sqsjobs.steps import records
from sqsjobs.transport import lifespan, sqs

if TYPE_CHECKING:
    from sqsjobs.delivery import Delivery
    from sqsjobs.job import Job


class SleepOutcome:
    """Records a ``Sleep``: the job queued until it wakes, its message re-armed (or the record held)."""

    async def record(self, job: Job, exc: BaseException, delivery: Delivery | None, recorder: Any) -> Ack:
        """One fenced write, the finish hooks' entries with it (a limit's slot is given back)."""
        assert isinstance(exc, Sleep)
        kernel = recorder.kernel
        now = kernel.clock.now()
        delay = max(0.0, exc.until - now)
        # A wait for a token is always held: the answer wakes the job from its record (payload kept).
        held = (
            exc.waits_for is not None
            or delay > sqs.MAX_VISIBILITY_S
            or recorder.outlives(delivery, exc.until)
        )
        table = kernel.settings.table_name
        write = records.sleep(
            table, job, exc.step, until=exc.until, now=now, held=held, unanswered=exc.waits_for
        )
        transition = functools.partial(recorder.store.transition, job, write)
        if not await recorder.write(job, transition, Finish(job, AttemptOutcome.RELEASED)):
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
