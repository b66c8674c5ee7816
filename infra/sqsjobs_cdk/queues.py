"""One SQS queue and its dead-letter queue per logical queue, named as the runtime names them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from aws_cdk import Duration
from aws_cdk import aws_sqs as sqs

from sqsjobs.deploy.rules import DLQ_RETENTION_S

if TYPE_CHECKING:
    from collections.abc import Iterable

    from constructs import Construct

    from sqsjobs.config import Settings


@dataclass(frozen=True)
class JobQueue:
    """A logical queue's SQS queue and its DLQ."""

    name: str
    queue: sqs.Queue
    dlq: sqs.Queue


def job_queues(
    scope: Construct, settings: Settings, names: Iterable[str], *, max_receive_count: int
) -> dict[str, JobQueue]:
    """SSE-SQS encrypted, TLS-only queues with the redrive backstop (DESIGN §3.5).

    SQS-managed keys rather than KMS: Scheduler and the Lambda event source mapping can use them
    without key grants, and nothing else reads the messages.
    """
    out = {}
    for name in names:
        dlq = sqs.Queue(
            scope,
            f"{name}-dlq",
            queue_name=settings.dlq_name(name),
            retention_period=Duration.seconds(DLQ_RETENTION_S),
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
        )
        queue = sqs.Queue(
            scope,
            name,
            queue_name=settings.queue_name(name),
            visibility_timeout=Duration.seconds(settings.visibility_timeout_s),
            dead_letter_queue=sqs.DeadLetterQueue(max_receive_count=max_receive_count, queue=dlq),
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
        )
        out[name] = JobQueue(name, queue, dlq)
    return out
