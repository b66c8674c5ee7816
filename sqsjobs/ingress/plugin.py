"""Turn a message sent from outside sqsjobs into one job, whatever the number of deliveries.

An EventBridge rule, an SNS topic, a Step Functions task or a Go service puts ``{"sqsjobs": 1,
"type", "payload", ...}`` (``sqsjobs.envelope.Foreign``; docs/enqueue-from-aws.md) on a queue. Such a
sender has no record to write and no payload hash to compute, so the worker does the producer's part,
the way a schedule fire does (``sqsjobs.schedules.plugin``): it validates the payload with the type's
handler, writes the record and sends an ordinary hint through the producer's own path, and only then
deletes the foreign message.

Why enqueue-then-delete rather than claiming the foreign message in place: every producer rule then
holds unchanged (a payload over the inline limit goes to S3, a delay past 15 min is held in the record
for the sweeper, a reused key with another payload is an ``IdempotencyConflict``), and the claim path,
the DLQ and replay only ever see our own envelopes. The record is written before the message is
touched, as everywhere:

    receive foreign ──▶ validate ──▶ send hint ──▶ put record ──▶ delete foreign
                                  crash ▲       crash ▲       crash ▲
    each crash leaves the foreign message to come back: the same id (the key is derived from it)
    finds the same record, and a second hint is one more duplicate the claim discards.

The job id is ``idempotent_job_id(type, key, tenant)``: the sender's ``idempotency_key``, else the
SNS ``MessageId`` of a non-raw notification, else the SQS ``MessageId``. So redeliveries of one message
are one job, and a sender that may send twice (EventBridge and SNS deliver at least once) gives a key.

Foreign messages are a message kind of the kernel (``runtime/seams.py``): ``foreign_plugin`` registers them.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from sqsjobs.dedupe.modes import of_fields
from sqsjobs.delivery import DELETE, LEAVE, Ack, dead_letter, failure_record
from sqsjobs.envelope import Foreign
from sqsjobs.errors import AwsError, HandlerNotFound, IdempotencyConflict, PayloadError, RoutingError
from sqsjobs.observability.tracing import AWS_TRACE_HEADER, TRACEPARENT
from sqsjobs.observability.tracing import parse as parse_trace
from sqsjobs.producer import JobRequest, build_new_job, enqueue_jobs_flow
from sqsjobs.runtime.seams import Plugin
from sqsjobs.schedules.spec import empty_payload

if TYPE_CHECKING:
    from sqsjobs.delivery import Delivery
    from sqsjobs.runtime.kernel import Kernel
    from sqsjobs.store.enqueue import NewJob


def job_key(message: Foreign, delivery: Delivery) -> str:
    """The idempotency key of the job: the sender's, else the id of the message that brought it.

    The prefixes keep a derived key apart from any key a producer chooses.
    """
    if message.idempotency_key is not None:
        return message.idempotency_key
    if message.sns_message_id is not None:
        return f"sns:{message.sns_message_id}"
    return f"sqs:{delivery.message_id}"


def sender_trace(delivery: Delivery) -> str | None:
    """The sender's trace, for the job's run to continue: X-Ray's ``AWSTraceHeader``, else a W3C ``traceparent``.

    EventBridge, SNS, Step Functions and X-Ray-instrumented SDKs set the first when tracing is on.
    """
    traceparent = delivery.message_attributes.get(TRACEPARENT) or {}
    for header in (delivery.attributes.get(AWS_TRACE_HEADER), traceparent.get("StringValue")):
        if parse_trace(header) is not None:
            return str(header)
    return None


def job_of(kernel: Kernel, message: Foreign, delivery: Delivery) -> NewJob:
    """The job a foreign message asks for, validated by its handler.

    Its ``run_at`` counts the delay from the message's ``SentTimestamp``, so every delivery of one
    message asks for the same instant, and time spent waiting in the queue counts toward the delay.

    Raises:
        HandlerNotFound: no handler for the type in this kernel.
        PayloadError: the payload does not validate (``PayloadInvalid``) or cannot be carried.
    """
    spec = kernel.registry.get(message.job_type)
    payload = empty_payload(spec) if message.payload is None else message.payload
    request = JobRequest(
        message.job_type,
        payload,
        idempotency_key=job_key(message, delivery),
        tenant=message.tenant,
        priority=message.priority,
        serialize_key=message.serialize_key,
        run_at=datetime.fromtimestamp(delivery.sent_at + message.delay_s, UTC),
        trace=sender_trace(delivery),  # None: the worker's own (current_trace), as for any enqueue
        dedupe=of_fields(message),
    )
    return build_new_job(
        request,
        registry=kernel.registry,
        settings=kernel.settings,
        now=kernel.clock.now(),
        window_at=delivery.sent_at,  # a redelivery after a window's end is still the same job
    )


async def handle_foreign(kernel: Kernel, message: Foreign, delivery: Delivery) -> Ack:
    """Enqueue the job a foreign message asks for (once), then let the message go; bad ones to the DLQ."""
    fields = {"job_type": message.job_type, "queue": delivery.queue, "message_id": delivery.message_id}
    try:
        job = job_of(kernel, message, delivery)
    except HandlerNotFound as exc:
        return _refuse(kernel, f"unknown job type {message.job_type!r}", exc, message, delivery)
    except PayloadError as exc:
        return _refuse(kernel, f"invalid payload: {exc}", exc, message, delivery)
    except RoutingError as exc:
        return _refuse(kernel, f"invalid routing: {exc}", exc, message, delivery)
    except ValueError as exc:  # a dedup mode the producer refuses (two modes, debounce_max alone...)
        return _refuse(kernel, f"invalid dedup mode: {exc}", exc, message, delivery)
    try:
        # The message's dedup mode, else the type's, applies as to any enqueue (docs/dedupe.md).
        await kernel.arun(
            enqueue_jobs_flow(
                [job],
                settings=kernel.settings,
                queue_urls=kernel.queue_urls,
                logger=kernel.logger,
                metrics=kernel.metrics,
            )
        )
    except IdempotencyConflict as exc:
        # The key already names a job with another payload: the sender reused it. Not this job's to run.
        return _refuse(kernel, f"idempotency conflict: {exc}", exc, message, delivery)
    except AwsError as exc:
        kernel.logger.warning(
            "foreign message not enqueued; left for redelivery", extra={**fields, "error": str(exc)}
        )
        return LEAVE
    kernel.logger.info("foreign message enqueued", extra={**fields, "job_id": job.id, "run_at": job.run_at})
    return DELETE


def _refuse(kernel: Kernel, reason: str, exc: Exception, message: Foreign, delivery: Delivery) -> Ack:
    """To the DLQ with the reason, no record: nothing became a job (the body is kept as sent)."""
    kernel.logger.warning(
        "foreign message rejected",
        extra={"job_type": message.job_type, "queue": delivery.queue, "reason": reason},
    )
    return dead_letter(reason, job_type=message.job_type, error=failure_record(exc), queue=delivery.queue)


class ForeignMessages:
    """The ingress feature's ``MessageKind``: a foreign message becomes one job."""

    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel

    async def handle(self, message: Foreign, delivery: Delivery) -> Ack:
        """``handle_foreign``."""
        return await handle_foreign(self.kernel, message, delivery)


def foreign_plugin(kernel: Kernel) -> Plugin:
    """Foreign messages: a message kind handled whole (validated, enqueued once, then let go)."""
    return Plugin("foreign messages", kinds={Foreign: ForeignMessages(kernel)})
