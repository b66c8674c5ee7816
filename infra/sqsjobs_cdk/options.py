"""What a user can choose about each part of the deployment; everything else is derived from the App.

Plain frozen dataclasses (not jsii structs): they never leave Python, and a typo in a field name
fails at construction instead of being ignored.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sqsjobs.deploy.packaging import DEFAULT_PYTHON, HANDLER

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from aws_cdk import aws_ecs as ecs

    from .bundling import LocalBundle


@dataclass(frozen=True)
class FargateWorker:
    """The ECS worker service (``sqsjobs worker``), scaled on the backlog per running task."""

    #: The worker image, e.g. ``ecs.ContainerImage.from_asset(repo_root)`` (the repo's Dockerfile).
    image: ecs.ContainerImage
    #: Logical queues it consumes; None means every queue no Lambda worker consumes.
    queues: Sequence[str] | None = None
    cpu: int = 512
    memory_mib: int = 1024
    #: ``X86_64`` or ``ARM64``; must match the platform the image was built for.
    cpu_architecture: str = "X86_64"
    #: At least one task: the scaling metric divides by the running task count.
    min_tasks: int = 1
    max_tasks: int = 10
    #: Target of the scaling policy: visible messages per running task. Roughly the acceptable
    #: wait in seconds times the jobs one task finishes per second.
    backlog_per_task: int = 100
    #: ``SQSJOBS_CONCURRENCY`` for each task; None keeps the App's setting.
    concurrency: int | None = None
    #: Run tasks on Fargate Spot (about 70 % cheaper). A Spot reclaim sends SIGTERM two minutes before
    #: the stop, which the drain fits: ``stopTimeout`` (the drain deadline + 10 s) is at most 120 s.
    spot: bool = False
    #: With ``spot``: this many tasks stay on regular Fargate (a floor Spot shortages cannot take).
    on_demand_base: int = 0
    #: The worker's health probe port (``SQSJOBS_HEALTH_PORT``, loopback only); the container's
    #: health check asks its ``/live``. None: no probe and no health check.
    health_port: int | None = 8081


@dataclass(frozen=True)
class LambdaWorker:
    """A Lambda function fed by an SQS event source mapping (the Lambda issue's deployment package)."""

    #: A deployment zip, or a directory to zip, built by ``sqsjobs package lambda``; or a ``LocalBundle``,
    #: which builds it while synthesizing, with this machine's Python and no Docker (``bundling.py``).
    code_path: str | LocalBundle
    #: The entry point ``sqsjobs package lambda`` puts in the zip.
    handler: str = HANDLER
    #: Logical queues it consumes; None means all of the App's queues.
    queues: Sequence[str] | None = None
    #: Function timeout; None means the shortest that starts every job type on its queues
    #: (``deployment.lambda_timeout_s``). Each consumed queue's visibility must be at least 6x it.
    timeout_s: int | None = None
    memory_mib: int = 512
    #: Must match the interpreter the zip was built for.
    runtime: str = f"python{DEFAULT_PYTHON}"
    #: ``X86_64`` or ``ARM64``; must match the zip's compiled wheels.
    architecture: str = "X86_64"
    batch_size: int = 10
    #: ``ScalingConfig.MaximumConcurrency``: concurrent invocations per queue (2..1000).
    max_concurrency: int = 5
    #: ``MaximumBatchingWindowInSeconds`` (0..300): wait this long to fill a batch (standard queues
    #: only; FIFO mappings take none). None: Lambda's default, which is 0 up to 10 messages a batch.
    max_batching_window_s: int | None = None
    #: Provisioned mode: ``(minimum, maximum)`` event pollers kept for each mapping, for bursts
    #: that must not wait for the pollers to scale up; the maximum then bounds the invocations in
    #: place of ``max_concurrency``, which is not sent (the two are exclusive). None: on-demand polling.
    provisioned_pollers: tuple[int, int] | None = None
    #: The mapping's own CloudWatch metrics (``MetricsConfig``: ``EventCount``: polled, filtered,
    #: invoked, failed and dropped events per mapping); they are billed as custom metrics.
    mapping_metrics: bool = False


@dataclass(frozen=True)
class HttpApi:
    """The HTTP API (``sqsjobs.api``): a Lambda function behind API Gateway's HTTP API, IAM-authorised.

    Callers sign their requests (SigV4) with a principal given ``SqsJobs.grant_invoke_api``.
    """

    #: The deployment zip (or a ``LocalBundle``); None means the ``LambdaWorker``'s (the same zip runs both).
    code_path: str | LocalBundle | None = None
    #: At most 29: API Gateway ends an HTTP API integration after 30 s.
    timeout_s: int = 29
    memory_mib: int = 512
    #: Must match the interpreter the zip was built for.
    runtime: str = f"python{DEFAULT_PYTHON}"
    #: ``X86_64`` or ``ARM64``; must match the zip's compiled wheels.
    architecture: str = "X86_64"
    #: Refuse larger request bodies with 413 (``SQSJOBS_API_MAX_BODY_BYTES``); None: 1 MiB.
    max_body_bytes: int | None = None
    #: Stage throttling: requests per second, and the burst above it.
    rate_limit: int = 50
    burst_limit: int = 100


@dataclass(frozen=True)
class Sweeper:
    """A sweep on a schedule: a Fargate task, or a function when there is no ECS cluster.

    With ``fargate``: ``sqsjobs sweep --once`` as a task on the worker's cluster. Without:
    ``sqsjobs.runtime.lambda_handlers`` as a function from the Lambda worker's package.
    """

    every_minutes: int = 5
    cpu: int = 256
    memory_mib: int = 512


@dataclass(frozen=True)
class DepthAlarm:
    """Alarm when a queue's visible messages stay at or over ``threshold`` for ``minutes`` in a row.

    Worker starvation: the age alarm fires on one old message, this one on a backlog that does not
    shrink (too few workers for the arrival rate, a limit or pause holding a type back).
    """

    threshold: int
    minutes: int = 10


@dataclass(frozen=True)
class Monitoring:
    """Alarms (to an SNS topic) and a dashboard."""

    #: Alarm when a queue's oldest message is older than this.
    max_message_age_s: int = 900
    #: Alarm on this many worker ERROR log lines (or Lambda errors) within five minutes.
    error_threshold: int = 1
    #: Log retention of the worker, sweeper and function log groups.
    log_retention_days: int = 30
    #: Alarm on this many new dead jobs of one type within five minutes (``job_alarms.py``).
    dead_jobs_threshold: int = 1
    #: Alarm on this many deferrals of one type (a limit, pause or breaker) within five minutes.
    deferrals_threshold: int = 100
    #: Alarm when the Postgres outbox relay's lag (docs/outbox.md) stays at or over this for five
    #: minutes, or when no relay reports, and when a relay sets a row aside; None: no outbox, no
    #: alarms (``outbox_alarm.py``).
    outbox_max_lag_s: float | None = None
    #: Alarm on this many refused claims of one type within five minutes (SQS's duplicate deliveries
    #: make a few: this is for workers fighting over jobs, or copies piling up).
    claim_refusals_threshold: int = 100
    #: Every logical queue's depth alarm (its visible messages, priority levels summed); None: none.
    queue_depth: DepthAlarm | None = DepthAlarm(threshold=1000, minutes=10)
    #: Per logical queue, instead of ``queue_depth``: another alarm, or None for none on that queue.
    queue_depth_by_queue: Mapping[str, DepthAlarm | None] = field(default_factory=dict)
