"""The outbox relay's alarms watch exactly the EMF metrics the relay writes (docs/outbox.md).

The expected namespace, name and dimensions come from ``sqsjobs.outbox.lag_metrics.LagMetrics`` itself;
the template from the CDK virtualenv (``tests/infra/monitoring_synth.py``), with ``Monitoring(outbox_max_lag_s=120)``.
"""

from __future__ import annotations

import json

from sqsjobs.outbox.lag_metrics import DEAD, LAG, LagMetrics


def relay_metric(service: str) -> tuple[str, list[dict[str, str]]]:
    lines: list[str] = []
    metrics = LagMetrics(service, write=lines.append)
    metrics.lag(3.0)
    metrics.flush()
    doc = json.loads(lines[0])
    [directive] = doc["_aws"]["CloudWatchMetrics"]
    [dims] = directive["Dimensions"]
    assert {LAG, DEAD} <= {m["Name"] for m in directive["Metrics"]}
    return directive["Namespace"], [{"Name": d, "Value": doc[d]} for d in dims]


def test_the_lag_alarm_watches_the_relays_own_metric_and_treats_silence_as_a_stopped_relay(
    monitoring_template,
):
    template = monitoring_template
    alarms = [
        r["Properties"]
        for r in template["Resources"].values()
        if r["Type"] == "AWS::CloudWatch::Alarm" and r["Properties"].get("MetricName") in (LAG, DEAD)
    ]
    [alarm] = [a for a in alarms if a["MetricName"] == LAG]
    namespace, dimensions = relay_metric("outboxed")
    assert (alarm["Namespace"], alarm["Dimensions"]) == (namespace, dimensions)
    assert (alarm["Statistic"], alarm["Period"], alarm["EvaluationPeriods"]) == ("Maximum", 60, 5)
    assert alarm["Threshold"] == 120 * 1000  # the metric is in milliseconds
    assert alarm["TreatMissingData"] == "breaching" and alarm["AlarmActions"]

    # A row set aside: one is enough, and no rows (no data) is the normal case.
    [dead] = [a for a in alarms if a["MetricName"] == DEAD]
    assert (dead["Namespace"], dead["Dimensions"]) == (namespace, dimensions)
    assert (dead["Statistic"], dead["Threshold"], dead["EvaluationPeriods"]) == ("Sum", 1, 1)
    assert dead["TreatMissingData"] == "notBreaching" and dead["AlarmActions"]
