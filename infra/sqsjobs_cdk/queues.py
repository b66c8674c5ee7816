"""One SQS queue and its dead-letter queue per logical queue, named as the runtime names them.

A queue in ``priority_queues`` gets ``-high`` and ``-low`` queues beside it (sharing its DLQ); one
in ``serialized_queues`` a ``.fifo`` queue with a FIFO backstop DLQ (``sqsjobs.transport.routes``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from aws_cdk import Duration
from aws_cdk import aws_sqs as sqs

from sqsjobs.config import MAX_MESSAGE_BYTES
from sqsjobs.deploy.rules import DLQ_RETENTION_S
from sqsjobs.transport import routes

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
    #: The extra queues of priority levels and serialize keys, by level (``high``, ``low``, ``fifo``).
    levels: dict[str, sqs.Queue] = field(default_factory=dict)
    #: The FIFO queue's redrive backstop (a FIFO queue's DLQ must be FIFO), when it has one.
    fifo_dlq: sqs.Queue | None = None

    @property
    def consumed(self) -> list[tuple[str, sqs.Queue]]:
        """(level, queue) of every queue a worker polls: the normal one first."""
        return [("normal", self.queue), *self.levels.items()]

    @property
    def arns(self) -> list[str]:
        """Every queue of this logical queue, DLQs included (what workers and the sweeper touch)."""
        extra = [self.fifo_dlq.queue_arn] if self.fifo_dlq is not None else []
        return [
            self.queue.queue_arn,
            self.dlq.queue_arn,
            *(q.queue_arn for q in self.levels.values()),
            *extra,
        ]


def job_queues(
    scope: Construct, settings: Settings, names: Iterable[str], *, max_receive_count: int
) -> dict[str, JobQueue]:
    """SSE-SQS encrypted, TLS-only queues with the redrive backstop (``provision.redrive_count``).

    Every queue and DLQ takes 1 MiB messages (``MAX_MESSAGE_BYTES``), the size the inline payload
    limit and the send batches are cut to.

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
            max_message_size_bytes=MAX_MESSAGE_BYTES,
        )
        queue = sqs.Queue(
            scope,
            name,
            queue_name=settings.queue_name(name),
            visibility_timeout=Duration.seconds(settings.visibility_timeout_s),
            retention_period=Duration.seconds(settings.message_retention_s),
            dead_letter_queue=sqs.DeadLetterQueue(max_receive_count=max_receive_count, queue=dlq),
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            max_message_size_bytes=MAX_MESSAGE_BYTES,
        )
        levels: dict[str, sqs.Queue] = {}
        fifo_dlq = None
        for key in routes.routes_of(settings, name):
            level = routes.split(key)[1]
            if level == routes.NORMAL:
                continue
            target = dlq
            if level == routes.FIFO:
                target = fifo_dlq = sqs.Queue(
                    scope,
                    f"{name}-dlq-fifo",
                    queue_name=routes.fifo_dlq_name(settings, name),
                    fifo=True,
                    retention_period=Duration.seconds(DLQ_RETENTION_S),
                    encryption=sqs.QueueEncryption.SQS_MANAGED,
                    enforce_ssl=True,
                    max_message_size_bytes=MAX_MESSAGE_BYTES,
                )
            levels[level] = sqs.Queue(
                scope,
                f"{name}-{level}",
                queue_name=routes.queue_name(settings, key),
                fifo=True if level == routes.FIFO else None,
                visibility_timeout=Duration.seconds(settings.visibility_timeout_s),
                retention_period=Duration.seconds(settings.message_retention_s),
                dead_letter_queue=sqs.DeadLetterQueue(max_receive_count=max_receive_count, queue=target),
                encryption=sqs.QueueEncryption.SQS_MANAGED,
                enforce_ssl=True,
                max_message_size_bytes=MAX_MESSAGE_BYTES,
            )
        out[name] = JobQueue(name, queue, dlq, levels, fifo_dlq)
    return out
