"""A queue whose backlog stays high alarms: worker starvation, configurable per logical queue.

The age alarm fires on one message that waited too long; this one on a depth that does not come
down: at or over ``DepthAlarm.threshold`` visible messages (the queue's priority levels summed) for
``minutes`` minutes in a row. ``full`` is infra/app.py's shop with the default (1,000 for 10
minutes, every queue); ``tests/infra/monitoring_synth.py`` asks for 50 for 3 minutes on one queue
and none on another.
"""

from __future__ import annotations

from examples.shop import app as shop

VISIBLE = "ApproximateNumberOfMessagesVisible"


def depth_alarms(resources: dict) -> dict[str, dict]:
    """The depth alarms of a template, by the logical queue their description names."""
    found = {}
    for resource in resources.values():
        props = resource["Properties"]
        if resource["Type"] == "AWS::CloudWatch::Alarm" and "messages waiting for" in props.get(
            "AlarmDescription", ""
        ):
            queue = props["AlarmDescription"].removeprefix("Queue ").partition(":")[0]
            found[queue] = props
    return found


def visible_metrics(alarm: dict) -> list[dict]:
    """The SQS metrics an alarm reads: itself, or each metric of its math expression."""
    if "MetricName" in alarm:
        return [alarm]
    return [q["MetricStat"]["Metric"] for q in alarm["Metrics"] if "MetricStat" in q]


def test_every_queue_of_the_shop_alarms_on_a_depth_that_stays_high(full):
    resources = full.template["Resources"]
    alarms = depth_alarms(resources)
    assert set(alarms) == {spec.queue for spec in shop.registry}  # one per logical queue
    for alarm in alarms.values():
        assert alarm["Threshold"] == 1000 and alarm["EvaluationPeriods"] == 10
        assert alarm["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
        assert alarm["TreatMissingData"] == "notBreaching" and alarm["AlarmActions"]
        metrics = visible_metrics(alarm)
        assert {m["MetricName"] for m in metrics} == {VISIBLE} and all(
            m["Namespace"] == "AWS/SQS" for m in metrics
        )


def test_a_queue_gets_its_own_depth_alarm_or_none(monitoring_template):
    alarms = depth_alarms(monitoring_template["Resources"])
    assert set(alarms) == {"default", "audit"}  # "rebuilds" asked for none
    assert (alarms["audit"]["Threshold"], alarms["audit"]["EvaluationPeriods"]) == (50, 3)
    assert (alarms["default"]["Threshold"], alarms["default"]["EvaluationPeriods"]) == (1000, 10)
    # "audit" has priority levels: its alarm sums the visible messages of its three queues
    audit = alarms["audit"]
    [expression] = [q for q in audit["Metrics"] if "Expression" in q]
    assert expression["Expression"] == "m0 + m1 + m2" and expression["ReturnData"] is not False
    stats = [q["MetricStat"] for q in audit["Metrics"] if "MetricStat" in q]
    assert len(stats) == 3 and {(m["Period"], m["Stat"]) for m in stats} == {(60, "Maximum")}
    assert {m["Metric"]["MetricName"] for m in stats} == {VISIBLE}
