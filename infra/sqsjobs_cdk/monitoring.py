"""Alarms (oldest message age, a depth that stays high, DLQ depth > 0 for every DLQ, FIFO backstops included, worker errors, ECS heartbeat gap) to an SNS topic, and one dashboard.

Worker errors are counted from the JSON logs both runtimes write (Powertools Logger, one line per
transition): a metric filter on ``level = ERROR`` per log group, so the alarm needs nothing from
the metrics code and covers the ECS and the Lambda worker alike. Lambda invocation errors
(timeouts, crashes before any log line) have their own alarm.

Heartbeat gap (ECS only): each worker writes a ``WorkerHeartbeat`` EMF line per registry refresh
(``Settings.registry_interval_s``, at most 60 s), which CloudWatch Logs turns into a metric from the
awslogs driver's PutLogEvents (no header or agent needed:
https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/CloudWatch_Embedded_Metric_Format_Generation_PutLogEvents.html).
The alarm fires when a whole minute's sum stays below 1 for ``HEARTBEAT_GAP_PERIODS`` minutes, and
treats a missing metric as breaching: the service always runs at least one task (``min_tasks >= 1``),
so silence means every worker is dead, stalled or cut off from DynamoDB (a beat is written only after
its registry write lands). Why not "live workers below the desired count": the desired count moves
with backlog scaling and is a metric only with Container Insights (paid); ECS replaces a single dead
task itself, and ``sqsjobs workers`` shows it as silent meanwhile.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_logs as logs

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from aws_cdk import aws_ecs as ecs
    from aws_cdk import aws_lambda as lambda_
    from aws_cdk import aws_sns as sns
    from aws_cdk import aws_sqs as sqs
    from constructs import Construct

    from .options import Monitoring
    from .queues import JobQueue

ERROR_METRIC = "WorkerErrors"
#: ``sqsjobs.observability.metrics.HEARTBEAT``, in the EMF namespace the worker writes by default.
HEARTBEAT_METRIC = "WorkerHeartbeat"
EMF_NAMESPACE = "sqsjobs"
#: Minutes without any heartbeat before the alarm fires: a rolling restart or a task replacement
#: (new task up in ~1-2 min) does not trip it, a fleet that is down does.
HEARTBEAT_GAP_PERIODS = 3
_MINUTE = Duration.minutes(1)
_FIVE_MINUTES = Duration.minutes(5)


def metric_namespace(app_name: str) -> str:
    """Where the log-derived metrics go."""
    return f"sqsjobs/{app_name}"


def queue_depth(jq: JobQueue) -> cw.IMetric:
    """A logical queue's visible messages, each minute's maximum: its priority levels' queues summed."""
    metrics = {
        f"m{i}": queue.metric_approximate_number_of_messages_visible(period=_MINUTE, statistic="Maximum")
        for i, (_, queue) in enumerate(jq.consumed)
    }
    if len(metrics) == 1:
        return metrics["m0"]
    return cw.MathExpression(
        expression=" + ".join(metrics), using_metrics=metrics, period=_MINUTE, label=f"{jq.name} depth"
    )


def alarms_and_dashboard(
    scope: Construct,
    *,
    app_name: str,
    options: Monitoring,
    topic: sns.ITopic,
    queues: Mapping[str, JobQueue],
    worker_logs: Sequence[logs.ILogGroup],
    service: ecs.FargateService | None,
    function: lambda_.IFunction | None,
) -> tuple[list[cw.Alarm], cw.Dashboard]:
    """Create the alarms (each notifying ``topic``) and the dashboard."""
    action = cw_actions.SnsAction(topic)
    alarms: list[cw.Alarm] = []

    def alarm(construct_id: str, metric: cw.IMetric, *, threshold: float, periods: int, what: str) -> None:
        created = metric.create_alarm(
            scope,
            construct_id,
            alarm_description=what,
            threshold=threshold,
            evaluation_periods=periods,
            comparison_operator=cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            treat_missing_data=cw.TreatMissingData.NOT_BREACHING,
        )
        created.add_alarm_action(action)
        created.add_ok_action(action)
        alarms.append(created)

    for name, jq in queues.items():
        alarm(
            f"{name}-oldest-message",
            jq.queue.metric_approximate_age_of_oldest_message(period=_MINUTE, statistic="Maximum"),
            threshold=options.max_message_age_s,
            periods=5,
            what=f"Queue {name}: a message has waited over {options.max_message_age_s} s (workers down or too few)",
        )
        alarm(
            f"{name}-dlq-not-empty",
            jq.dlq.metric_approximate_number_of_messages_visible(period=_MINUTE, statistic="Maximum"),
            threshold=1,
            periods=1,
            what=f"Queue {name}: messages in the DLQ; inspect with `sqsjobs dlq` and replay or drop them",
        )
        depth = options.queue_depth_by_queue.get(name, options.queue_depth)
        if depth is not None:
            alarm(
                f"{name}-depth",
                queue_depth(jq),
                threshold=depth.threshold,
                periods=depth.minutes,
                what=f"Queue {name}: {depth.threshold}+ messages waiting for {depth.minutes} minutes "
                "(too few workers for the arrival rate, or a limit or pause holding jobs back)",
            )
        if jq.fifo_dlq is not None:
            # The sweeper's reconciler empties it of every job's message; what stays is not a job
            # (or no sweeper runs).
            alarm(
                f"{name}-fifo-dlq-not-empty",
                jq.fifo_dlq.metric_approximate_number_of_messages_visible(
                    period=_MINUTE, statistic="Maximum"
                ),
                threshold=1,
                periods=1,
                what=f"Queue {name}: messages in the FIFO backstop DLQ; inspect with `sqsjobs dlq`",
            )

    errors = cw.Metric(
        namespace=metric_namespace(app_name),
        metric_name=ERROR_METRIC,
        statistic="Sum",
        period=_FIVE_MINUTES,
    )
    for i, group in enumerate(worker_logs):
        logs.MetricFilter(
            scope,
            f"ErrorLines{i}",
            log_group=group,
            filter_pattern=logs.FilterPattern.string_value("$.level", "=", "ERROR"),
            metric_namespace=errors.namespace,
            metric_name=ERROR_METRIC,
            metric_value="1",
            default_value=0,
        )
    alarm(
        "worker-errors",
        errors,
        threshold=options.error_threshold,
        periods=1,
        what="Workers logged ERROR lines (failed AWS calls, lost leases, handler crashes outside retries)",
    )
    heartbeats = cw.Metric(
        namespace=EMF_NAMESPACE,
        metric_name=HEARTBEAT_METRIC,
        dimensions_map={"service": app_name},
        statistic="Sum",
        period=_MINUTE,
    )
    if service is not None:
        gap = heartbeats.create_alarm(
            scope,
            "worker-heartbeat-gap",
            alarm_description=(
                f"No ECS worker of {app_name} refreshed its registry entry for {HEARTBEAT_GAP_PERIODS} "
                "minutes (all dead, stalled or cut off from DynamoDB); see `sqsjobs workers`"
            ),
            threshold=1,
            evaluation_periods=HEARTBEAT_GAP_PERIODS,
            comparison_operator=cw.ComparisonOperator.LESS_THAN_THRESHOLD,
            treat_missing_data=cw.TreatMissingData.BREACHING,
        )
        gap.add_alarm_action(action)
        gap.add_ok_action(action)
        alarms.append(gap)
    if function is not None:
        alarm(
            "lambda-errors",
            function.metric_errors(period=_FIVE_MINUTES, statistic="Sum"),
            threshold=options.error_threshold,
            periods=1,
            what="The Lambda worker failed invocations (timeouts or crashes); its batch comes back whole",
        )

    dashboard = cw.Dashboard(scope, "Dashboard", dashboard_name=f"sqsjobs-{app_name}")
    dashboard.add_widgets(cw.AlarmStatusWidget(title="Alarms", alarms=list(alarms), width=24, height=4))
    dashboard.add_widgets(
        _graph(
            "Messages visible / in flight",
            [
                m
                for jq in queues.values()
                for m in (
                    jq.queue.metric_approximate_number_of_messages_visible(
                        period=_MINUTE, label=f"{jq.name} visible"
                    ),
                    jq.queue.metric_approximate_number_of_messages_not_visible(
                        period=_MINUTE, label=f"{jq.name} in flight"
                    ),
                )
            ],
        ),
        _graph(
            "Age of oldest message (s)",
            [
                jq.queue.metric_approximate_age_of_oldest_message(
                    period=_MINUTE, statistic="Maximum", label=jq.name
                )
                for jq in queues.values()
            ],
        ),
        _graph(
            "DLQ depth",
            [
                dlq.metric_approximate_number_of_messages_visible(
                    period=_MINUTE, statistic="Maximum", label=label
                )
                for jq in queues.values()
                for dlq, label in _dlqs(jq)
            ],
        ),
    )
    row: list[cw.IWidget] = [_graph("Worker ERROR lines", [errors])]
    if service is not None:
        row.append(
            _graph(
                "ECS worker",
                [
                    service.metric_cpu_utilization(period=_MINUTE, label="CPU %"),
                    service.metric_memory_utilization(period=_MINUTE, label="memory %"),
                ],
            )
        )
        row.append(_graph("ECS worker heartbeats per minute", [heartbeats]))
    if function is not None:
        row.append(
            _graph(
                "Lambda worker",
                [
                    function.metric_invocations(period=_MINUTE, label="invocations"),
                    function.metric_errors(period=_MINUTE, label="errors"),
                    function.metric_throttles(period=_MINUTE, label="throttles"),
                    function.metric_duration(period=_MINUTE, statistic="p95", label="duration p95 (ms)"),
                ],
            )
        )
    dashboard.add_widgets(*row)
    return alarms, dashboard


def _graph(title: str, metrics: Sequence[cw.IMetric]) -> cw.GraphWidget:
    return cw.GraphWidget(title=title, left=list(metrics), width=8, height=6)


def _dlqs(jq: JobQueue) -> list[tuple[sqs.IQueue, str]]:
    """A logical queue's DLQs with their graph labels: the standard one, and a FIFO backstop."""
    out: list[tuple[sqs.IQueue, str]] = [(jq.dlq, jq.name)]
    if jq.fifo_dlq is not None:
        out.append((jq.fifo_dlq, f"{jq.name} (FIFO backstop)"))
    return out
