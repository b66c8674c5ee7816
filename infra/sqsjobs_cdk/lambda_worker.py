"""The Lambda side: the worker behind an SQS event source mapping, and the sweeper on a schedule.

Both run the Lambda issue's deployment package (``sqsjobs package lambda``). The worker mapping
uses ReportBatchItemFailures (only the failed records come back) and MaximumConcurrency (the
function cannot starve the table or a downstream); its queues' visibility is at least 6x the
function timeout and the timeout starts every job type, both checked in ``sqsjobs.deploy.rules``
before anything is synthesized. The sweeper (``sqsjobs.runtime.lambda_handlers``) is for deployments
without an ECS cluster to run ``sqsjobs sweep --once`` on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aws_cdk import Duration
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as sources

from sqsjobs.deploy.rules import check_esm
from sqsjobs.errors import ConfigurationError
from sqsjobs.runtime.lambda_handlers import SWEEPER_HANDLER

from .bundling import lambda_code
from .nag import acknowledge

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from aws_cdk import aws_logs as logs
    from aws_cdk import aws_sqs as sqs
    from constructs import Construct

    from .options import LambdaWorker, Sweeper

SWEEPER_TIMEOUT_S = 120


def _function(
    scope: Construct,
    construct_id: str,
    *,
    options: LambdaWorker,
    handler: str,
    timeout_s: int,
    memory_mib: int,
    environment: Mapping[str, str],
    log_group: logs.ILogGroup,
    description: str,
) -> lambda_.Function:
    try:
        architecture = getattr(lambda_.Architecture, options.architecture)
    except AttributeError:
        raise ConfigurationError(
            f"architecture must be X86_64 or ARM64, got {options.architecture!r}"
        ) from None
    # An explicit role: the default one carries the AWSLambdaBasicExecutionRole managed policy,
    # which may write to any log group. Callers add the sqsjobs action lists.
    role = iam.Role(
        scope,
        f"{construct_id}Role",
        description=description,
        assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
    )
    log_group.grant_write(role)
    function = lambda_.Function(
        scope,
        construct_id,
        description=description,
        runtime=lambda_.Runtime(options.runtime, lambda_.RuntimeFamily.PYTHON),
        architecture=architecture,
        handler=handler,
        code=lambda_code(options.code_path, runtime=options.runtime, architecture=options.architecture),
        timeout=Duration.seconds(timeout_s),
        memory_size=memory_mib,
        role=role,
        environment=dict(environment),
        log_group=log_group,
    )
    acknowledge(
        function,
        "AwsSolutions-L1",
        "The runtime must match the Python the deployment zip's compiled wheels (pydantic-core) were "
        "built for (`sqsjobs package lambda --python-version`); LambdaWorker.runtime moves with it.",
    )
    return function


def lambda_worker(
    scope: Construct,
    *,
    options: LambdaWorker,
    timeout_s: int,
    environment: Mapping[str, str],
    queues: Sequence[tuple[str, sqs.IQueue]],
    log_group: logs.ILogGroup,
) -> lambda_.Function:
    """The worker function and one event source mapping per consumed queue: (level, queue) pairs.

    Lambda has no "serve this queue first": each level's mapping polls on its own. Priority there is
    a larger share of concurrency (``level_concurrency``): with ``max_concurrency`` set, the high
    level's mapping may run twice as many invocations and the low level's half (at least 2, the
    mapping's minimum). A FIFO mapping delivers one group's messages in order and the adapter runs
    them one at a time, stopping at the first that stays in the queue.
    """
    check_esm(batch_size=options.batch_size, max_concurrency=options.max_concurrency)
    function = _function(
        scope,
        "LambdaWorker",
        options=options,
        handler=options.handler,
        timeout_s=timeout_s,
        memory_mib=options.memory_mib,
        environment=environment,
        log_group=log_group,
        description="sqsjobs worker (SQS event source mapping)",
    )
    pollers = _pollers(options)
    for level, queue in queues:
        fifo = level == "fifo"
        window = options.max_batching_window_s
        function.add_event_source(
            sources.SqsEventSource(
                queue,
                batch_size=min(options.batch_size, 10) if fifo else options.batch_size,
                report_batch_item_failures=True,
                # Provisioned mode bounds the invocations by its pollers instead (one or the other).
                max_concurrency=None if pollers else level_concurrency(options.max_concurrency, level),
                max_batching_window=Duration.seconds(window) if window is not None and not fifo else None,
                provisioned_poller_config=pollers,
                metrics_config=(
                    lambda_.MetricsConfig(metrics=[lambda_.MetricType.EVENT_COUNT])
                    if options.mapping_metrics
                    else None
                ),
            )
        )
    return function


#: ``MaximumBatchingWindowInSeconds``'s range.
MAX_BATCHING_WINDOW_S = 300
#: Provisioned mode's bounds for an SQS mapping: minimum pollers 2..200, maximum 2..2000.
MIN_POLLERS, MAX_MIN_POLLERS, MAX_POLLERS = 2, 200, 2000


def _pollers(options: LambdaWorker) -> lambda_.ProvisionedPollerConfig | None:
    """The mapping's provisioned mode, checked at synth rather than refused by the deploy."""
    window = options.max_batching_window_s
    if window is not None and not 0 <= window <= MAX_BATCHING_WINDOW_S:
        raise ConfigurationError(f"max_batching_window_s must be 0..{MAX_BATCHING_WINDOW_S}, got {window}")
    if options.provisioned_pollers is None:
        return None
    low, high = options.provisioned_pollers
    if not (MIN_POLLERS <= low <= MAX_MIN_POLLERS and low <= high <= MAX_POLLERS):
        raise ConfigurationError(
            f"provisioned_pollers must be (minimum, maximum) with {MIN_POLLERS} <= minimum <= "
            f"{MAX_MIN_POLLERS} and minimum <= maximum <= {MAX_POLLERS}, got {options.provisioned_pollers}"
        )
    return lambda_.ProvisionedPollerConfig(minimum_pollers=low, maximum_pollers=high)


def level_concurrency(max_concurrency: int | None, level: str) -> int | None:
    """An event source mapping's maximum concurrency for a priority level (None: unbounded)."""
    if max_concurrency is None:
        return None
    if level == "high":
        return min(1000, max_concurrency * 2)
    if level == "low":
        return max(2, max_concurrency // 2)
    return max_concurrency


def lambda_sweeper(
    scope: Construct,
    *,
    options: LambdaWorker,
    sweeper: Sweeper,
    environment: Mapping[str, str],
    log_group: logs.ILogGroup,
) -> lambda_.Function:
    """``sqsjobs.runtime.lambda_handlers`` every ``sweeper.every_minutes`` (an EventBridge rule)."""
    if sweeper.every_minutes < 1:
        raise ConfigurationError(f"the sweeper runs at most once a minute, got every {sweeper.every_minutes}")
    function = _function(
        scope,
        "LambdaSweeper",
        options=options,
        handler=SWEEPER_HANDLER,
        timeout_s=SWEEPER_TIMEOUT_S,
        memory_mib=sweeper.memory_mib,
        environment=environment,
        log_group=log_group,
        description="sqsjobs sweeper (scheduled)",
    )
    events.Rule(
        scope,
        "SweeperSchedule",
        description="sqsjobs sweeper",
        schedule=events.Schedule.rate(Duration.minutes(sweeper.every_minutes)),
        targets=[targets.LambdaFunction(function, retry_attempts=0)],
    )
    return function
