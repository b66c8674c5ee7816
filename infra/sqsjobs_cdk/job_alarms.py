"""Alarms and widgets per job type, from the EMF metrics the workers write and two log filters.

What the queue-level alarms (``monitoring.py``) cannot tell apart, these can:

- **dead jobs, as growth**: ``JobsDead`` per type (EMF, ``sqsjobs.observability.metrics``), summed
  over five minutes, at least ``Monitoring.dead_jobs_threshold``: new dead jobs, not "the DLQ is
  not empty" (which stays in alarm until someone empties it);
- **poison jobs**: runs that never finished used up a job's attempts (the claim's ``job rejected``
  log line with ``attempts exhausted``): a job that kills or stalls its worker, counted by a log
  metric filter on every worker log group;
- **a breaker opening** (``breaker opened``, a warning line of ``sqsjobs.limits.plugin``): a
  dependency is failing, counted the same way;
- **queue wait p95 per type**: ``JobQueueWait`` (due → claimed) p95 over five minutes above
  ``Monitoring.max_message_age_s``: a type's jobs wait too long, even when its queue is shared;
- **refused claims per type**: ``ClaimsRefused`` over five minutes at least
  ``Monitoring.claim_refusals_threshold``: a few come from SQS's duplicate deliveries, many mean
  workers fighting over jobs or copies piling up;
- **deferrals per type** (types under a limit or pausable): ``JobsDeferred`` over five minutes at
  least ``Monitoring.deferrals_threshold``: jobs sent back to wait by a limit, a pause or a breaker.

The dashboard row reads as a diagnosis (its text widget says so): a **backlog** is depth up with
throughput (started per minute) steady and no failures; a **dependency outage** is failures, dead
jobs, deferrals and a breaker up; a **capacity shortage** is depth and queue wait up with the
workers saturated (CPU, or the Lambda worker's concurrency) and no failures.

- **oldest waiting job per type**: ``OldestJobWait`` (the longest a job of the type had waited
  since due when a worker met it: claimed, or sent back by a limit or a pause), Maximum over five
  minutes, at least ``Monitoring.max_message_age_s``. It is the per-type figure beside the queue's
  ``ApproximateAgeOfOldestMessage``, and it sees a paused or limited type whose jobs never start.
  Cost: no request (the worker already meets each message), one more custom metric and one alarm
  per type. A job no worker receives at all (the workers are down or saturated) shows in the
  queue's oldest-message alarm instead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_logs as logs

from sqsjobs.limits.plugin import DEFERRED
from sqsjobs.observability.metrics import (
    CLAIMS_REFUSED,
    DEAD,
    DEFAULT_NAMESPACE,
    OLDEST_WAIT,
    QUEUE_WAIT,
    STARTED,
    SUCCEEDED,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from aws_cdk import aws_sns as sns
    from constructs import Construct

    from sqsjobs.registry import Registry

    from .options import Monitoring

EMF_NAMESPACE = DEFAULT_NAMESPACE
POISON_METRIC = "PoisonJobs"
BREAKER_METRIC = "BreakersOpened"
#: The log lines the two filters count (``runtime/claim_stage.py``, ``limits/plugin.py``).
POISON_PATTERN = '{ $.message = "job rejected" && $.reason = "attempts exhausted*" }'
BREAKER_PATTERN = '{ $.message = "breaker opened" }'
_FIVE_MINUTES = Duration.minutes(5)
_MINUTE = Duration.minutes(1)


def job_alarms_and_widgets(
    scope: Construct,
    *,
    app_name: str,
    registry: Registry,
    options: Monitoring,
    topic: sns.ITopic,
    worker_logs: Sequence[logs.ILogGroup],
    dashboard: cw.Dashboard,
) -> list[cw.Alarm]:
    """The per-type alarms (each notifying ``topic``) and a dashboard row; the alarms made."""
    action = cw_actions.SnsAction(topic)
    alarms: list[cw.Alarm] = []

    def alarm(construct_id: str, metric: cw.IMetric, *, threshold: float, what: str) -> None:
        created = metric.create_alarm(
            scope,
            construct_id,
            alarm_description=what,
            threshold=threshold,
            evaluation_periods=1,
            comparison_operator=cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            treat_missing_data=cw.TreatMissingData.NOT_BREACHING,
        )
        created.add_alarm_action(action)
        created.add_ok_action(action)
        alarms.append(created)

    def per_type(
        name: str, job_type: str, statistic: str, period: Duration = _FIVE_MINUTES, label: str | None = None
    ) -> cw.Metric:
        return cw.Metric(
            namespace=EMF_NAMESPACE,
            metric_name=name,
            dimensions_map={"service": app_name, "job_type": job_type},
            statistic=statistic,
            period=period,
            label=label,
        )

    types = sorted(spec.name for spec in registry)
    deferrable = sorted(spec.name for spec in registry if spec.pausable)
    for job_type in types:
        alarm(
            f"dead-jobs-{job_type}",
            per_type(DEAD, job_type, "Sum"),
            threshold=options.dead_jobs_threshold,
            what=f"Type {job_type}: {options.dead_jobs_threshold}+ new dead jobs in 5 min; `sqsjobs digest` groups them",
        )
        alarm(
            f"queue-wait-p95-{job_type}",
            per_type(QUEUE_WAIT, job_type, "p95"),
            threshold=options.max_message_age_s * 1000,
            what=f"Type {job_type}: p95 wait from due to start over {options.max_message_age_s} s",
        )
        alarm(
            f"claim-refusals-{job_type}",
            per_type(CLAIMS_REFUSED, job_type, "Sum"),
            threshold=options.claim_refusals_threshold,
            what=f"Type {job_type}: {options.claim_refusals_threshold}+ refused claims in 5 min (workers fighting, copies piling up)",
        )
        alarm(
            f"oldest-wait-{job_type}",
            per_type(OLDEST_WAIT, job_type, "Maximum"),
            threshold=options.max_message_age_s,
            what=f"Type {job_type}: a job has waited {options.max_message_age_s} s+ since due (held or not started)",
        )
    for job_type in deferrable:
        alarm(
            f"deferrals-{job_type}",
            per_type(DEFERRED, job_type, "Sum"),
            threshold=options.deferrals_threshold,
            what=f"Type {job_type}: {options.deferrals_threshold}+ jobs deferred by a limit, pause or breaker in 5 min",
        )

    namespace = f"sqsjobs/{app_name}"
    for metric_name, pattern in ((POISON_METRIC, POISON_PATTERN), (BREAKER_METRIC, BREAKER_PATTERN)):
        for i, group in enumerate(worker_logs):
            logs.MetricFilter(
                scope,
                f"{metric_name}{i}",
                log_group=group,
                filter_pattern=logs.FilterPattern.literal(pattern),
                metric_namespace=namespace,
                metric_name=metric_name,
                metric_value="1",
                default_value=0,
            )
    poison = cw.Metric(namespace=namespace, metric_name=POISON_METRIC, statistic="Sum", period=_FIVE_MINUTES)
    breakers = cw.Metric(
        namespace=namespace, metric_name=BREAKER_METRIC, statistic="Sum", period=_FIVE_MINUTES
    )
    alarm(
        "poison-jobs",
        poison,
        threshold=1,
        what="A job's attempts were used up by runs that never finished (it kills or stalls its worker)",
    )
    alarm("breaker-opened", breakers, threshold=1, what="A circuit breaker opened: a dependency is failing")

    def graph(title: str, metrics: list[cw.IMetric]) -> cw.GraphWidget:
        return cw.GraphWidget(title=title, left=metrics, width=6, height=6)

    dashboard.add_widgets(
        cw.TextWidget(
            markdown=(
                "**Backlog**: depth up, started/min steady, no failures. **Dependency outage**: dead, "
                "deferrals and breakers up. **Capacity shortage**: depth and queue wait up, workers "
                "saturated (CPU or Lambda concurrency), no failures."
            ),
            width=24,
            height=2,
        )
    )
    dashboard.add_widgets(
        graph("Started per minute (throughput)", [per_type(STARTED, t, "Sum", _MINUTE, t) for t in types]),
        graph(
            "Succeeded / dead per 5 min",
            [per_type(SUCCEEDED, t, "Sum", label=f"{t} succeeded") for t in types]
            + [per_type(DEAD, t, "Sum", label=f"{t} dead") for t in types],
        ),
        graph("Queue wait p95 (ms)", [per_type(QUEUE_WAIT, t, "p95", label=t) for t in types]),
        graph(
            "Oldest waiting job per type (s)",
            [per_type(OLDEST_WAIT, t, "Maximum", _MINUTE, t) for t in types],
        ),
    )
    row: list[cw.IWidget] = [
        graph("Poison jobs and breakers opened", [poison, breakers]),
        graph("Claims refused per 5 min", [per_type(CLAIMS_REFUSED, t, "Sum", label=t) for t in types]),
    ]
    if deferrable:  # only types under a limit or pausable are ever deferred
        row.append(graph("Deferrals per 5 min", [per_type(DEFERRED, t, "Sum", label=t) for t in deferrable]))
    row.append(cw.AlarmStatusWidget(title="Job type alarms", alarms=list(alarms), width=12, height=6))
    dashboard.add_widgets(*row)
    return alarms
