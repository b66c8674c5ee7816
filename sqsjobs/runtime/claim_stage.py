"""The claim stage: whether this delivery's job is this worker's to run, and if not, what the message is worth.

Ownership comes only from the conditional claim in DynamoDB. Before it, a job whose message shows
a deadline that passed is expired instead (expiry is the core's: ``store/deadlines.py``), and the
features the job belongs to have their say (``runtime/seams.py``): admission guards may defer it
(pause, limits, breakers). Whatever they say, a claim never starts a job past its deadline — the
record's ``start_by``, or its type's ``expires_after`` from ``created_at`` — (``JobStore.claim``):
that job is expired instead. A claim that did not
take the job never runs the handler: the record it found decides the ``Ack`` — delete a copy of a
finished job, re-arm one not due, wait for a live lease, dead-letter a message without a record,
reject a job whose every attempt was lost. A failure that is not a refusal (throttling, an outage)
leaves the message to come back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqsjobs.delivery import DELETE, LEAVE, Ack, dead_letter
from sqsjobs.errors import StoreError, WorkerLost
from sqsjobs.job import AttemptOutcome, JobStatus
from sqsjobs.observability.metrics import CLAIMS_REFUSED
from sqsjobs.store import codec, deadlines
from sqsjobs.store.apply import ClaimRefusal, Refusal, Refused
from sqsjobs.store.deadlines import ExpireInstead
from sqsjobs.transport import lifespan, sqs

if TYPE_CHECKING:
    from sqsjobs.delivery import Delivery
    from sqsjobs.envelope import Envelope
    from sqsjobs.job import Job
    from sqsjobs.registry import HandlerSpec
    from sqsjobs.runtime.kernel import Kernel
    from sqsjobs.runtime.record_stage import Recorder
    from sqsjobs.runtime.seams import AdmissionGuard

#: A message waiting for another owner's lease comes back this long after the lease expires, so the
#: rescue claim is not refused by a clock a little behind the owner's.
LEASE_EXPIRY_MARGIN_S = 1.0


class Claimer:
    """Claims the job of a delivery for one worker (see the module docstring)."""

    def __init__(self, kernel: Kernel, recorder: Recorder) -> None:
        self.kernel = kernel
        self.recorder = recorder
        self.store = recorder.store

    async def claim(self, spec: HandlerSpec, envelope: Envelope, delivery: Delivery) -> Job | Ack:
        """The claimed job (its payload from the message), or the ``Ack`` the message is worth."""
        kernel = self.kernel
        bound = spec.expires_after_s
        now = kernel.clock.now()
        if envelope.start_by is not None or bound is not None:  # expiry: the deadline the message shows
            instead = deadlines.passed_before_claim(envelope, bound, now)
            if instead is not None:
                ack = await self.recorder.expire(envelope, delivery, now, instead)
                if ack is not None:
                    return ack
        guards: list[AdmissionGuard] = kernel.concerned(kernel.guards, spec.name, envelope)
        at = await self._admit(guards, spec, envelope, delivery) if guards else None
        if isinstance(at, Ack):
            return at
        now = at if at is not None else kernel.clock.now()  # a rate limit logged this start
        try:
            claimed = await self.store.claim(
                envelope,
                token=codec.nonce(),
                message_id=delivery.message_id,
                first_delivery=delivery.receive_count <= 1,
                now=now,
                lease_s=max(kernel.settings.lease_s, 1.0),
                max_attempts=spec.max_attempts,
                type_bound_s=bound,
            )
        except StoreError as exc:  # not a refusal: throttled, or DynamoDB did not answer
            for guard in guards:  # not claimed: free what the admission took (limit slots) now
                await guard.give_back(envelope.job_id)
            kernel.logger.warning(
                "claim failed, message left for redelivery",
                extra={"job_id": envelope.job_id, "error": str(exc)},
            )
            return LEAVE
        if isinstance(claimed, Refused):  # read by JobStore.claim (not by its own landed try)
            for guard in guards:  # not claimed: free what the admission took (limit slots) now
                await guard.give_back(envelope.job_id)
            if claimed.reason is Refusal.EXPIRED and claimed.deadline is not None:  # the record's deadline
                passed = ExpireInstead(claimed.deadline, deadlines.reason(claimed.deadline), bound)
                return await self.recorder.expire(envelope, delivery, now, passed) or LEAVE
            kernel.metrics.count(CLAIMS_REFUSED, spec.name, envelope.tenant)
            return await self._refused(envelope, delivery, claimed)
        job, confirmed = claimed.job, claimed.confirmed
        assert job is not None
        if confirmed:  # botocore retried a claim whose answer was lost: our own first try took the job
            kernel.logger.info("claim confirmed after a lost answer", extra={"job_id": job.id})
        self.recorder.log(
            "job claimed",
            job,
            receive_count=delivery.receive_count,
            wait_s=round(now - job.run_at.timestamp(), 3),
            outcome=AttemptOutcome.STARTED,
            **({"payload": job.payload} if kernel.settings.log_payloads else {}),
        )
        return job

    async def _admit(
        self, guards: list[AdmissionGuard], spec: HandlerSpec, envelope: Envelope, delivery: Delivery
    ) -> float | Ack | None:
        """Every admission guard in turn: an Ack defers (earlier guards give back), else the admitted instant."""
        at: float | None = None
        for n, guard in enumerate(guards):
            admitted = await guard.admit(spec, envelope, delivery)
            if isinstance(admitted, Ack):
                for earlier in guards[:n]:
                    await earlier.give_back(envelope.job_id)
                return admitted
            if admitted is not None:
                at = admitted.at
        return at

    async def _refused(self, envelope: Envelope, delivery: Delivery, refused: Refused) -> Ack:
        """A claim that did not take the job: the record decides what the message is worth."""
        job = refused.job
        if refused.reason is ClaimRefusal.MISSING:
            return dead_letter(
                f"no record for job {envelope.job_id}",
                job_id=envelope.job_id,
                job_type=envelope.job_type,
                queue=delivery.queue,
            )
        assert job is not None
        if refused.reason is ClaimRefusal.CONFLICT:
            self.kernel.logger.warning(
                "message dropped: its payload is not the job's (a conflicting enqueue, or retried with another)",
                extra={"job_id": job.id, "job_type": job.type},
            )
            return DELETE
        if refused.reason is ClaimRefusal.FINISHED:
            return await self.recorder.finished_copy(job, envelope, delivery)
        if job.status is JobStatus.WAITING:  # a chain step's copy: its predecessor's success sends its hint
            return DELETE
        if refused.reason is ClaimRefusal.NOT_DUE:
            # A job that only waits (a debounced one whose later enqueues keep pushing its start,
            # a copy come early): re-armed, or re-sent near the redrive limit, never moved to a DLQ.
            redrive = lifespan.redrive_limit(self.kernel.settings, self.kernel.registry.max_attempts())
            return lifespan.waiting(delivery, job.run_at.timestamp() - self.kernel.clock.now(), redrive)
        if refused.reason is ClaimRefusal.HELD_ELSEWHERE:
            return self._held_elsewhere(job, delivery)
        # ClaimRefusal.EXHAUSTED: every attempt was claimed by a run that never recorded an outcome
        # (its process died, or it stalled past its lease): dead without a run, and the record and
        # the DLQ say why.
        bound = f"{job.attempt}/{job.max_attempts or job.attempt}"
        return await self.recorder.reject(
            envelope,
            delivery,
            WorkerLost(f"attempts exhausted ({bound}): no run finished"),
            reason=f"attempts exhausted ({bound}) by runs that never finished "
            "(their worker died or lost its lease mid-run)",
        )

    def _held_elsewhere(self, job: Job, delivery: Delivery) -> Ack:
        """A claim refused by a live lease: wait for the lease, or drop a redundant copy.

        The owner holds the message it claimed with (``claim_message_id``) and extends it while it
        runs. If this *is* that message, the owner stopped extending it: its worker probably died.
        The message is re-armed until the lease expires, when a claim rescues the job — recovery
        without the sweeper. A copy of another message is redundant while the owner's
        message exists, so it is deleted rather than cycled toward the redrive limit.
        """
        if job.claim_message_id not in (None, delivery.message_id):
            return DELETE
        now = self.kernel.clock.now()
        expires = job.lease_expires.timestamp() if job.lease_expires else now
        wait_s = expires - now + LEASE_EXPIRY_MARGIN_S
        return Ack("rearm", delay_s=max(1, sqs.clamp_visibility(wait_s)))
