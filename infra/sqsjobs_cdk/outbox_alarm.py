"""The outbox relay's lag alarm (docs/outbox.md): a relay that stopped, or one that falls behind.

The relay (``sqsjobs outbox relay``) writes ``OutboxLag`` (milliseconds: the age of the oldest outbox
row at each pass, 0 when empty) as EMF, dimension ``service``, in the namespace the worker writes to.
The alarm watches its maximum over each minute for five minutes. A missing metric counts as
breaching: a deployment that asks for the alarm runs a relay, and a relay writes the metric every
``metrics_interval_s`` (at most a minute by default) even when idle, so silence means no relay runs.
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

#: ``sqsjobs.outbox.metrics.LAG``.
LAG_METRIC = "OutboxLag"
LAG_PERIODS = 5


def outbox_lag_alarm(scope: Construct, *, app_name: str, topic: sns.ITopic, max_lag_s: float) -> cw.Alarm:
    """An alarm (notifying ``topic``) when the relay's lag stays at or over ``max_lag_s`` for five minutes."""
    metric = cw.Metric(
        namespace=EMF_NAMESPACE,
        metric_name=LAG_METRIC,
        dimensions_map={"service": app_name},
        statistic="Maximum",
        period=Duration.minutes(1),
    )
    alarm = metric.create_alarm(
        scope,
        "outbox-lag",
        alarm_description=(
            f"Outbox relay: a committed job has waited over {max_lag_s:g} s in the Postgres outbox, or no relay "
            "reports (start `sqsjobs outbox relay`; `sqsjobs outbox count` shows the backlog)"
        ),
        threshold=max_lag_s * 1000,
        evaluation_periods=LAG_PERIODS,
        comparison_operator=cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        treat_missing_data=cw.TreatMissingData.BREACHING,
    )
    action = cw_actions.SnsAction(topic)
    alarm.add_alarm_action(action)
    alarm.add_ok_action(action)
    return alarm
