"""The construct creates the extra queues of priority levels and serialize keys, and one mapping per level.

The expected names come from sqsjobs itself (``Settings``, ``transport.routes``); the template comes
from the CDK virtualenv (``tests/infra/routing_synth.py``).
"""

from __future__ import annotations

from typing import Any

import pytest

from sqsjobs.config import MAX_MESSAGE_RETENTION_S, Settings
from sqsjobs.transport import routes
from tests.infra.conftest import run_synth

#: What routing_synth.py builds (it runs in the CDK venv, so it is not imported here).
SETTINGS = Settings(
    app_name="routed", priority_queues=frozenset({"reports"}), serialized_queues=frozenset({"devices"})
)
MAX_CONCURRENCY = 6


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    result: dict[str, Any] = run_synth(
        "routing_synth.py", str(tmp_path_factory.mktemp("routed")), str(MAX_CONCURRENCY)
    )
    return result


def resources(template: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {k: v["Properties"] for k, v in template["Resources"].items() if v["Type"] == kind}


def test_each_opted_in_queue_gets_its_extra_queues_and_nothing_else_does(template):
    queues = {p["QueueName"]: (k, p) for k, p in resources(template, "AWS::SQS::Queue").items()}
    s = SETTINGS
    expected = (
        {s.queue_name(q) for q in ("reports", "devices", "default")}
        | {s.dlq_name(q) for q in ("reports", "devices", "default")}
        | {
            routes.queue_name(s, routes.route("reports", "high")),
            routes.queue_name(s, routes.route("reports", "low")),
            routes.queue_name(s, routes.route("devices", "fifo")),
            routes.fifo_dlq_name(s, "devices"),
        }
    )
    assert set(queues) == expected
    # levels redrive to the logical queue's DLQ; the FIFO queue (FifoQueue) to its FIFO backstop
    dlq_id = queues[s.dlq_name("reports")][0]
    for level in ("high", "low"):
        _, props = queues[routes.queue_name(s, routes.route("reports", level))]
        assert props["RedrivePolicy"]["deadLetterTargetArn"]["Fn::GetAtt"][0] == dlq_id
    _, fifo = queues[routes.queue_name(s, routes.route("devices", "fifo"))]
    assert fifo["FifoQueue"] is True
    assert (
        fifo["RedrivePolicy"]["deadLetterTargetArn"]["Fn::GetAtt"][0]
        == queues[routes.fifo_dlq_name(s, "devices")][0]
    )
    assert queues[routes.fifo_dlq_name(s, "devices")][1]["FifoQueue"] is True


def test_one_event_source_mapping_per_level_with_more_concurrency_for_high(template):
    queues = {k: p["QueueName"] for k, p in resources(template, "AWS::SQS::Queue").items()}
    mappings = {
        queues[m["EventSourceArn"]["Fn::GetAtt"][0]]: m.get("ScalingConfig", {}).get("MaximumConcurrency")
        for m in resources(template, "AWS::Lambda::EventSourceMapping").values()
    }
    s = SETTINGS
    assert mappings == {
        s.queue_name("default"): MAX_CONCURRENCY,
        s.queue_name("reports"): MAX_CONCURRENCY,
        routes.queue_name(s, routes.route("reports", "high")): 2 * MAX_CONCURRENCY,
        routes.queue_name(s, routes.route("reports", "low")): MAX_CONCURRENCY // 2,
        s.queue_name("devices"): MAX_CONCURRENCY,
        routes.queue_name(s, routes.route("devices", "fifo")): MAX_CONCURRENCY,
    }


def test_the_worker_knows_which_queues_are_routed(template):
    (function,) = [
        f
        for f in resources(template, "AWS::Lambda::Function").values()
        if "SQSJOBS_APP" in f.get("Environment", {}).get("Variables", {})
    ]
    env = function["Environment"]["Variables"]
    assert (env["SQSJOBS_PRIORITY_QUEUES"], env["SQSJOBS_SERIALIZED_QUEUES"]) == ("reports", "devices")


def test_every_dlq_has_a_depth_alarm_the_fifo_backstop_included(template):
    # GIVEN the DLQs: one per logical queue (its levels redrive there too) and the FIFO backstop
    queues = {p["QueueName"]: k for k, p in resources(template, "AWS::SQS::Queue").items()}
    s = SETTINGS
    dlqs = {queues[s.dlq_name(q)] for q in ("reports", "devices", "default")}
    dlqs.add(queues[routes.fifo_dlq_name(s, "devices")])
    # THEN each has an alarm on its visible messages, at the first message
    alarmed = {}
    for props in resources(template, "AWS::CloudWatch::Alarm").values():
        if (
            props.get("MetricName") == "ApproximateNumberOfMessagesVisible"
            and "DLQ" in props["AlarmDescription"]
        ):
            [dimension] = props["Dimensions"]
            alarmed[dimension["Value"]["Fn::GetAtt"][0]] = props
    assert set(alarmed) == dlqs  # the queues' own depth alarms are tests/infra/test_depth_alarm.py's
    assert {(a["Threshold"], a["ComparisonOperator"]) for a in alarmed.values()} == {
        (1, "GreaterThanOrEqualToThreshold")
    }


def test_every_level_fifo_queue_and_backstop_keeps_its_messages_14_days(template):
    retention = {
        p["QueueName"]: p.get("MessageRetentionPeriod")
        for p in resources(template, "AWS::SQS::Queue").values()
    }
    # 3 queues and their DLQs, reports' high and low levels, devices' FIFO queue and its FIFO backstop
    assert len(retention) == 10
    assert set(retention.values()) == {MAX_MESSAGE_RETENTION_S}, retention
