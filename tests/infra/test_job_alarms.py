"""Per-type alarms and the diagnosis row of the dashboard, in the synthesized template (``full``: the shop App).

Each alarm watches exactly the metric a worker writes (its EMF document's namespace, name and
dimensions, produced here by ``JobMetrics`` itself) or a log filter on the line the code logs.
"""

from __future__ import annotations

import json

from examples.shop import app as shop
from sqsjobs.limits.plugin import DEFERRED
from sqsjobs.observability.metrics import CLAIMS_REFUSED, DEAD, OLDEST_WAIT, QUEUE_WAIT, JobMetrics
from tests.infra.test_template import logical_id


def alarms(asm) -> dict[str, dict]:
    return {k: v["Properties"] for k, v in asm.resources("AWS::CloudWatch::Alarm").items()}


def emf_dimensions(name: str, job_type: str) -> tuple[str, list[dict[str, str]]]:
    """The namespace and the (service, job_type) dimensions a worker writes ``name`` under."""
    lines: list[str] = []
    metrics = JobMetrics(shop.name, write=lines.append)
    if name == OLDEST_WAIT:
        metrics.waiting(job_type, 12.5)
    else:
        metrics.count(name, job_type)
    metrics.flush()
    doc = json.loads(lines[0])
    [directive] = doc["_aws"]["CloudWatchMetrics"]
    [dims] = directive["Dimensions"]
    return directive["Namespace"], [{"Name": d, "Value": doc[d]} for d in dims]


def by_metric(asm, name: str) -> dict[str, dict]:
    return {
        next(d["Value"] for d in a["Dimensions"] if d["Name"] == "job_type"): a
        for a in alarms(asm).values()
        if a.get("MetricName") == name
    }


def test_new_dead_jobs_and_a_slow_p95_wait_alarm_per_job_type_on_the_workers_own_metrics(full):
    types = {spec.name for spec in shop.registry}
    dead, waits = by_metric(full, DEAD), by_metric(full, QUEUE_WAIT)
    assert set(dead) == set(waits) == types
    for job_type, alarm in dead.items():
        namespace, dimensions = emf_dimensions(DEAD, job_type)
        assert (alarm["Namespace"], sorted(alarm["Dimensions"], key=str)) == (
            namespace,
            sorted(dimensions, key=str),
        )
        # growth, not "not empty": new dead jobs summed over 5 minutes
        assert (alarm["Statistic"], alarm["Period"], alarm["Threshold"]) == ("Sum", 300, 1)
        assert alarm["AlarmActions"] and alarm["TreatMissingData"] == "notBreaching"
    for alarm in waits.values():
        assert (alarm["ExtendedStatistic"], alarm["Period"]) == ("p95", 300)
        assert alarm["Threshold"] == 900 * 1000  # Monitoring.max_message_age_s, in the metric's ms


def test_the_oldest_waiting_job_alarms_per_type_on_the_metric_the_workers_write(full):
    oldest = by_metric(full, OLDEST_WAIT)
    assert set(oldest) == {spec.name for spec in shop.registry}
    for job_type, alarm in oldest.items():
        namespace, dimensions = emf_dimensions(OLDEST_WAIT, job_type)
        assert (alarm["Namespace"], sorted(alarm["Dimensions"], key=str)) == (
            namespace,
            sorted(dimensions, key=str),
        )
        assert (alarm["Statistic"], alarm["Period"]) == ("Maximum", 300)
        assert alarm["Threshold"] == 900  # Monitoring.max_message_age_s, in the metric's seconds
        assert alarm["AlarmActions"] and alarm["OKActions"]
    body = json.dumps(full.one("AWS::CloudWatch::Dashboard")["DashboardBody"])
    assert "Oldest waiting job per type (s)" in body and OLDEST_WAIT in body


def test_refused_claims_alarm_per_type_on_the_count_the_claim_stage_writes(full):
    refused = by_metric(full, CLAIMS_REFUSED)
    assert set(refused) == {spec.name for spec in shop.registry}
    for job_type, alarm in refused.items():
        namespace, dimensions = emf_dimensions(CLAIMS_REFUSED, job_type)
        assert (alarm["Namespace"], sorted(alarm["Dimensions"], key=str)) == (
            namespace,
            sorted(dimensions, key=str),
        )
        assert (alarm["Statistic"], alarm["Period"], alarm["Threshold"]) == ("Sum", 300, 100)
    assert "Claims refused per 5 min" in json.dumps(full.one("AWS::CloudWatch::Dashboard")["DashboardBody"])


def test_deferrals_alarm_only_for_types_a_limit_or_pause_can_defer(full):
    deferrable = {spec.name for spec in shop.registry if spec.pausable}
    assert set(by_metric(full, DEFERRED)) == deferrable


def test_poison_jobs_and_breakers_are_counted_from_the_lines_the_code_logs_on_every_worker_log(full):
    filters = [f["Properties"] for f in full.resources("AWS::Logs::MetricFilter").values()]
    worker_groups = {
        logical_id(f["LogGroupName"])
        for f in filters
        if f["MetricTransformations"][0]["MetricName"] == "WorkerErrors"
    }
    for metric, words in (
        ("PoisonJobs", ('"job rejected"', '"attempts exhausted*"')),
        ("BreakersOpened", ('"breaker opened"',)),
    ):
        mine = [f for f in filters if f["MetricTransformations"][0]["MetricName"] == metric]
        assert {logical_id(f["LogGroupName"]) for f in mine} == worker_groups
        assert all(all(w in f["FilterPattern"] for w in words) for f in mine)
        [alarm] = [a for a in alarms(full).values() if a.get("MetricName") == metric]
        assert (alarm["Threshold"], alarm["Statistic"]) == (1, "Sum") and alarm["AlarmActions"]


def test_the_code_logs_the_lines_the_filters_count():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "sqsjobs"
    assert '"job rejected"' in (root / "runtime" / "record_stage.py").read_text()
    assert "attempts exhausted" in (root / "runtime" / "claim_stage.py").read_text()
    assert '"breaker opened"' in (root / "limits" / "plugin.py").read_text()


def test_the_dashboard_has_the_diagnosis_row(full):
    body = json.dumps(full.one("AWS::CloudWatch::Dashboard")["DashboardBody"])
    for title in (
        "Started per minute (throughput)",
        "Queue wait p95 (ms)",
        "Oldest waiting job per type (s)",
        "Poison jobs and breakers opened",
        "Dependency outage",
        "Capacity shortage",
    ):
        assert title in body, title


def test_every_dashboard_widget_fits_the_24_column_grid(full):
    body = full.one("AWS::CloudWatch::Dashboard")["DashboardBody"]
    text = "".join(part if isinstance(part, str) else "token" for part in body["Fn::Join"][1])
    widgets = json.loads(text)["widgets"]
    assert widgets and all(w["x"] + w["width"] <= 24 for w in widgets), [
        (w.get("properties", {}).get("title"), w["x"], w["width"])
        for w in widgets
        if w["x"] + w["width"] > 24
    ]
