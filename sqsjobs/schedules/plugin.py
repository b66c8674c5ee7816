"""Turn one schedule fire into one job, whatever the number of deliveries.

EventBridge Scheduler delivers at least once, and a slow fire can overlap the next one; the
local loop of ``sqsjobs dev`` may be restarted. So a fire never runs anything itself: it enqueues
a job whose idempotency key is ``schedule:<name>@<scheduled time>``. The first delivery writes the
record; every later delivery of the same occurrence finds it (same id, same payload) and only
re-sends its hint, which the claim then discards if the job already ran.

The scheduled time comes from ``<aws.scheduler.scheduled-time>``, which Scheduler substitutes in
the fire's input. Some emulators deliver the placeholder unchanged; the occurrence is then the
last one of the schedule at or before the message's ``SentTimestamp`` (for a rate: the sent time
truncated to the period), and a warning says so. On MiniStack a rate fire lands at the same phase
of every period, so two fires never share a slot unless one is sent within ~0.1 s of a period
boundary.

Fires are a message kind of the kernel (``runtime/seams.py``): ``fires_plugin`` registers them.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from sqsjobs.delivery import DELETE, LEAVE, Ack, dead_letter, failure_record
from sqsjobs.envelope import SCHEDULED_TIME, Fire
from sqsjobs.errors import AwsError, HandlerNotFound, IdempotencyConflict, PayloadError
from sqsjobs.producer import JobRequest, build_new_job, enqueue_many_flow
from sqsjobs.runtime.seams import Plugin
from sqsjobs.schedules import overlap, records
from sqsjobs.schedules.expressions import MIN_PERIOD_S, iso_utc, parse_instant
from sqsjobs.schedules.spec import ALLOW_ALL, DEFAULT_CATCHUP_S, empty_payload
from sqsjobs.transport import lifespan

if TYPE_CHECKING:
    from sqsjobs.delivery import Delivery
    from sqsjobs.runtime.kernel import Kernel
    from sqsjobs.schedules.namespace import Schedules


def idempotency_key(schedule: str, slot: float) -> str:
    """The key of the job for one occurrence: ``schedule:<name>@<UTC time>``."""
    return f"schedule:{schedule}@{iso_utc(slot)}"


def fire_slot(schedules: Schedules, fire: Fire, sent_at: float) -> tuple[float, bool]:
    """The occurrence a fire stands for, and whether Scheduler said so (False: derived from ``sent_at``)."""
    if fire.at != SCHEDULED_TIME:
        try:
            return parse_instant(fire.at), True
        except ValueError:
            pass  # not a time: derive it like an unsubstituted placeholder (logged by the caller)
    spec = schedules.get(fire.schedule)
    slot = spec.slot_at_or_before(sent_at) if spec is not None else None
    if slot is None:  # not declared in this app (or no occurrence found): Scheduler's 1-minute grid
        slot = math.floor(sent_at / MIN_PERIOD_S) * MIN_PERIOD_S
    return slot, False


async def handle_fire(kernel: Kernel, schedules: Schedules, fire: Fire, delivery: Delivery) -> Ack:
    """Enqueue the occurrence's job (idempotently), then let the fire message go."""
    slot, substituted = fire_slot(schedules, fire, delivery.sent_at)
    fields = {
        "schedule": fire.schedule,
        "job_type": fire.job_type,
        "slot": iso_utc(slot),
        "queue": delivery.queue,
    }
    if not substituted:
        kernel.logger.warning(
            "schedule fire without a scheduled time: slot derived from the message's SentTimestamp",
            extra={**fields, "at": fire.at[:64], "sent_at": delivery.sent_at},
        )
    try:
        # A fire without a payload (a schedule declared without payload=) gets the same empty
        # payload plan and dev would have given it.
        payload = fire.payload
        if payload is None:
            payload = empty_payload(kernel.registry.get(fire.job_type))
        tenant = records.split_key(fire.schedule)[0] if records.is_runtime(fire.schedule) else None
        request = JobRequest(
            fire.job_type, payload, idempotency_key=idempotency_key(fire.schedule, slot), tenant=tenant
        )
        job = build_new_job(
            request, registry=kernel.registry, settings=kernel.settings, now=kernel.clock.now()
        )
    except (HandlerNotFound, PayloadError) as exc:
        kernel.logger.warning("schedule fire rejected", extra={**fields, "error": str(exc)})
        return dead_letter(
            f"schedule {fire.schedule!r}: {exc}",
            job_type=fire.job_type,
            error=failure_record(exc),
            queue=delivery.queue,
        )
    # A declared schedule's policy is its declaration's (a fire of one no longer declared: the
    # defaults); a runtime schedule's is read from its item by the turn.
    spec = None if records.is_runtime(fire.schedule) else schedules.get(fire.schedule)
    declared = None if records.is_runtime(fire.schedule) else (ALLOW_ALL, DEFAULT_CATCHUP_S)
    if spec is not None:
        declared = (spec.overlap, spec.catchup_s)
    now = kernel.clock.now()
    try:
        turn = await kernel.arun(
            overlap.turn_flow(
                kernel.settings,
                fire.schedule,
                slot=slot,
                job_id=job.id,
                now=now,
                declared=declared,
            )
        )
    except AwsError as exc:
        kernel.logger.warning(
            "schedule fire not decided; left for redelivery", extra={**fields, "error": str(exc)}
        )
        return LEAVE
    if turn.verdict == overlap.WAIT:
        kernel.logger.info("schedule fire waits for the previous job", extra=fields)
        redrive = lifespan.redrive_limit(kernel.settings, kernel.registry.max_attempts())
        return lifespan.waiting(delivery, overlap.BUFFER_RECHECK_S, redrive)
    if turn.verdict != overlap.MAKE:
        kernel.logger.info(f"schedule fire not made: {turn.verdict}", extra=fields)
        return DELETE
    if turn.cancelled:
        kernel.logger.info(
            "schedule fire cancelled the previous job", extra={**fields, "cancelled": turn.cancelled}
        )
    try:
        await kernel.arun(
            enqueue_many_flow(
                [job],
                settings=kernel.settings,
                queue_urls=kernel.queue_urls,
                logger=kernel.logger,
                metrics=kernel.metrics,
            )
        )
    except IdempotencyConflict:
        # The occurrence already has its job, enqueued with the payload applied before a change.
        kernel.logger.info(
            "schedule fire already enqueued with another payload", extra={**fields, "job_id": job.id}
        )
        return DELETE
    except AwsError as exc:
        kernel.logger.warning(
            "schedule fire not enqueued; left for redelivery", extra={**fields, "error": str(exc)}
        )
        return LEAVE
    if declared is not None and declared[0] == ALLOW_ALL:
        try:
            await kernel.arun(
                overlap.recorded_flow(kernel.settings, fire.schedule, slot=slot, job_id=job.id, now=now)
            )
        except AwsError as exc:  # the job is made; only the schedule's "last fire" lags
            kernel.logger.warning("schedule fire not recorded", extra={**fields, "error": str(exc)})
    kernel.logger.info("schedule fired", extra={**fields, "job_id": job.id})
    return DELETE


class Fires:
    """The schedules feature's ``MessageKind``: a fire becomes its occurrence's job."""

    def __init__(self, kernel: Kernel, schedules: Schedules) -> None:
        self.kernel = kernel
        self.schedules = schedules

    async def handle(self, message: Fire, delivery: Delivery) -> Ack:
        """``handle_fire``."""
        return await handle_fire(self.kernel, self.schedules, message, delivery)


def fires_plugin(kernel: Kernel, schedules: Schedules) -> Plugin:
    """Schedule fires: a message kind handled whole (no claim, no run)."""
    return Plugin("schedule fires", kinds={Fire: Fires(kernel, schedules)})
