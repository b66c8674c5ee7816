"""AWS services that enqueue jobs without a producer: an EventBridge rule's target, an SNS subscription.

Both put the message of ``sqsjobs.envelope.Foreign`` (docs/enqueue-from-aws.md) on a job queue; a
worker validates it with the type's handler and enqueues the job once. The field names and version
come from ``sqsjobs.envelope``, never restated here. Each job type named is checked against the App
at synth time, so a typo fails ``cdk synth`` instead of filling the DLQ with "unknown job type".
Undeliverable events and notifications go to the queue's DLQ (the target's and the subscription's
dead-letter queue), so nothing the service could not deliver is lost silently.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_sns_subscriptions as subscriptions

from sqsjobs.envelope import FOREIGN_MARKER, FOREIGN_VERSION, MAX_FOREIGN_DELAY_S
from sqsjobs.errors import ConfigurationError

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from aws_cdk import aws_sns as sns

    from sqsjobs import App

    from .queues import JobQueue


def target_queue(
    app: App, queues: Mapping[str, JobQueue], job_types: Sequence[str], queue: str | None
) -> JobQueue:
    """The queue the messages go to: ``queue``, else the one queue of ``job_types`` (all must exist)."""
    unknown = sorted(t for t in job_types if t not in app.registry)
    if unknown:
        raise ConfigurationError(
            f"App {app.name!r} has no handler for {unknown}: its workers would dead-letter every such "
            f"message as an unknown job type (it has {sorted(s.name for s in app.registry)})"
        )
    if queue is None:
        names = sorted({app.registry.get(t).queue for t in job_types})
        if len(names) != 1:
            raise ConfigurationError(f"job types {list(job_types)} use queues {names}: name the queue=")
        queue = names[0]
    if queue not in queues:
        raise ConfigurationError(f"queue {queue!r} is not one of this deployment's ({sorted(queues)})")
    return queues[queue]


def rule_input(
    job_type: str,
    *,
    payload_path: str,
    idempotency_key_path: str | None,
    tenant_path: str | None,
    delay_s: float | None,
) -> events.RuleTargetInput:
    """The input transformer that turns a matched event into ``{"sqsjobs": 1, "type", "payload", ...}``."""
    if delay_s is not None and not 0 <= delay_s <= MAX_FOREIGN_DELAY_S:
        raise ConfigurationError(f"delay_s must be from 0 to {MAX_FOREIGN_DELAY_S} seconds, got {delay_s}")
    message: dict[str, Any] = {
        FOREIGN_MARKER: FOREIGN_VERSION,
        "type": job_type,
        "payload": events.EventField.from_path(payload_path),
    }
    if idempotency_key_path is not None:
        message["idempotency_key"] = events.EventField.from_path(idempotency_key_path)
    if tenant_path is not None:
        message["tenant"] = events.EventField.from_path(tenant_path)
    if delay_s:
        message["delay_s"] = delay_s
    return events.RuleTargetInput.from_object(message)


def add_rule_target(rule: events.Rule, job_queue: JobQueue, message: events.RuleTargetInput) -> None:
    """The rule sends to the job queue (CDK adds the queue policy for this rule only)."""
    rule.add_target(targets.SqsQueue(job_queue.queue, message=message, dead_letter_queue=job_queue.dlq))


def subscribe(topic: sns.ITopic, job_queue: JobQueue) -> subscriptions.SqsSubscription:
    """Raw message delivery: the queue gets the published message itself, as the publisher wrote it."""
    subscription = subscriptions.SqsSubscription(
        job_queue.queue, raw_message_delivery=True, dead_letter_queue=job_queue.dlq
    )
    topic.add_subscription(subscription)
    return subscription
