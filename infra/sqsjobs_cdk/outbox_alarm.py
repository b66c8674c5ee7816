"""The outbox relay's alarms (docs/outbox.md): a relay that stopped or falls behind; a row set aside.

The relay (``sqsjobs outbox relay``) writes ``OutboxLag`` (milliseconds: the age of the oldest outbox
row at each pass, 0 when empty) as EMF, dimension ``service``, in the namespace the worker writes to.
The alarm watches its maximum over each minute for five minutes. A missing metric counts as
breaching: a deployment that asks for the alarm runs a relay, and a relay writes the metric every
``metrics_interval_s`` (at most a minute by default) even when idle, so silence means no relay runs.

``OutboxRowsDead`` counts the rows a relay set aside (it can never enqueue them as they are): one is a
job that will not run until an operator acts (``sqsjobs outbox dead``), so the second alarm fires at
the first; silence there is the normal case.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_cloudwatch_actions as cw_actions

from .monitoring import EMF_NAMESPACE

if TYPE_CHECKING:
    from aws_cdk import aws_sns as sns
    from constructs import Construct

#: ``sqsjobs.outbox.lag_metrics.LAG``.
LAG_METRIC = "OutboxLag"
LAG_PERIODS = 5
#: ``sqsjobs.outbox.lag_metrics.DEAD``.
DEAD_METRIC = "OutboxRowsDead"


def outbox_lag_alarm(scope: Construct, *, app_name: str, topic: sns.ITopic, max_lag_s: float) -> cw.Alarm:
    """An alarm (notifying ``topic``) when the relay's lag stays at or over ``max_lag_s`` for five minutes."""
    alarm = _relay_alarm(
        scope,
        "outbox-lag",
        app_name=app_name,
        metric_name=LAG_METRIC,
        statistic="Maximum",
        description=(
            f"Outbox relay: a committed job has waited over {max_lag_s:g} s in the Postgres outbox, or no relay "
            "reports (start `sqsjobs outbox relay`; `sqsjobs outbox count` shows the backlog)"
        ),
        threshold=max_lag_s * 1000,
        evaluation_periods=LAG_PERIODS,
        missing=cw.TreatMissingData.BREACHING,
    )
    action = cw_actions.SnsAction(topic)
    alarm.add_alarm_action(action)
    alarm.add_ok_action(action)
    return alarm


def outbox_dead_alarm(scope: Construct, *, app_name: str, topic: sns.ITopic) -> cw.Alarm:
    """An alarm (notifying ``topic``) when a relay sets a row aside: its job waits for an operator."""
    alarm = _relay_alarm(
        scope,
        "outbox-dead",
        app_name=app_name,
        metric_name=DEAD_METRIC,
        statistic="Sum",
        description=(
            "Outbox relay: a committed row can never be enqueued as it is and was set aside "
            "(`sqsjobs outbox dead` says why; `sqsjobs outbox retry` once fixed)"
        ),
        threshold=1,
        evaluation_periods=1,
        missing=cw.TreatMissingData.NOT_BREACHING,
    )
    alarm.add_alarm_action(cw_actions.SnsAction(topic))
    return alarm


def _relay_alarm(
    scope: Construct,
    construct_id: str,
    *,
    app_name: str,
    metric_name: str,
    statistic: str,
    description: str,
    threshold: float,
    evaluation_periods: int,
    missing: cw.TreatMissingData,
) -> cw.Alarm:
    """One of the relay's EMF metrics (per minute, dimension ``service``) at or over ``threshold``."""
    metric = cw.Metric(
        namespace=EMF_NAMESPACE,
        metric_name=metric_name,
        dimensions_map={"service": app_name},
        statistic=statistic,
        period=Duration.minutes(1),
    )
    return metric.create_alarm(
        scope,
        construct_id,
        alarm_description=description,
        threshold=threshold,
        evaluation_periods=evaluation_periods,
        comparison_operator=cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        treat_missing_data=missing,
    )
