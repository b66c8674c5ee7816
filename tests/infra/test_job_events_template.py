"""Job events in the synthesized template (the ``options`` stack's ``NAMED`` App): stream, relay, bus, rules.

cdk-nag and cfn-lint check the same stack in test_template.py.
"""

from __future__ import annotations

import json

import pytest

from sqsjobs.events.catalogue import ALL_EVENTS, EVERY_EVENT_CHOICE, SOURCE, events_of
from sqsjobs.events.setup import STREAM_VIEW
from sqsjobs.ops.digest import DIGEST_ACTIONS, DIGEST_EVENT, DIGEST_HANDLER
from sqsjobs.store.schema import ATTENTION_INDEX
from tests.infra import synth_example
from tests.infra.test_template import actions, function, logical_id, statements
from tests.unit.test_event_catalogue import change, job_item

RELAY = "sqsjobs.events.stream_relay.handler"


def resources(asm, kind: str, *, named: str = "NamedJobEvents") -> dict[str, dict]:
    return {k: v["Properties"] for k, v in asm.resources(kind).items() if k.startswith(named)}


def test_the_table_streams_both_images_to_a_relay_that_may_only_publish_on_its_bus(options):
    [(table_id, table)] = [
        (k, v["Properties"])
        for k, v in options.resources("AWS::DynamoDB::Table").items()
        if k.startswith("NamedTable")
    ]
    assert table["StreamSpecification"] == {"StreamViewType": STREAM_VIEW}
    [(bus_id, bus)] = resources(options, "AWS::Events::EventBus").items()
    assert bus["Name"] == f"{synth_example.NAMED.name}-events"
    relay = function(options, RELAY)
    env = relay["Environment"]["Variables"]
    assert logical_id(env["SQSJOBS_EVENT_BUS"]) == bus_id and env["SQSJOBS_EVENTS"] == "all"
    granted = statements(options, logical_id(relay["Role"]))
    assert actions(granted) == {
        "events:PutEvents",
        "dynamodb:DescribeStream",
        "dynamodb:GetRecords",
        "dynamodb:GetShardIterator",
        "dynamodb:ListStreams",
        "sqs:SendMessage",
        "sqs:GetQueueAttributes",
        "sqs:GetQueueUrl",
        "logs:CreateLogStream",
        "logs:PutLogEvents",
    }
    for s in granted:
        if s["Action"] == "events:PutEvents":
            assert logical_id(s["Resource"]) == bus_id
        if "dynamodb:GetRecords" in actions([s]):
            assert s["Resource"] == {"Fn::GetAtt": [table_id, "StreamArn"]}
        # the four actions the DynamoDB developer guide gives a stream-reading function; ListStreams
        # on this table's streams only, as the guide's policy scopes it (table/<name>/stream/*)
        if s["Action"] == "dynamodb:ListStreams":
            [arn, suffix] = s["Resource"]["Fn::Join"][1]
            assert arn == {"Fn::GetAtt": [table_id, "Arn"]} and suffix == "/stream/*"


def test_the_stream_mapping_retries_bisects_and_keeps_what_fails_in_a_dlq(options):
    [mapping] = resources(options, "AWS::Lambda::EventSourceMapping").values()
    assert mapping["EventSourceArn"]["Fn::GetAtt"][1] == "StreamArn"
    assert mapping["BisectBatchOnFunctionError"] is True and mapping["StartingPosition"] == "TRIM_HORIZON"
    dlq = logical_id(mapping["DestinationConfig"]["OnFailure"]["Destination"])
    assert options.template["Resources"][dlq]["Type"] == "AWS::SQS::Queue"


def matches(pattern, value) -> bool:
    """EventBridge / Lambda filter matching, for what the relay's patterns use."""
    if isinstance(pattern, dict):
        return isinstance(value, dict) and all(
            k in value and matches(p, value[k]) for k, p in pattern.items()
        )
    for rule in pattern:
        if isinstance(rule, dict):
            if "exists" in rule and rule["exists"] == (value is not None):
                return True
            if "prefix" in rule and isinstance(value, str) and value.startswith(rule["prefix"]):
                return True
            if "anything-but" in rule and isinstance(value, str) and value not in rule["anything-but"]:
                return True
        elif rule == value:
            return True
    return False


@pytest.mark.parametrize(
    "status", ["succeeded", "dead", "expired", "cancelled", "running", "retry_scheduled"]
)
def test_the_mapping_filter_passes_every_record_the_catalogue_makes_an_event_of(options, status):
    [mapping] = resources(options, "AWS::Lambda::EventSourceMapping").values()
    patterns = [json.loads(f["Pattern"]) for f in mapping["FilterCriteria"]["Filters"]]
    record = change(job_item(status), job_item("queued", finished=None))
    is_event = bool(events_of(record, EVERY_EVENT_CHOICE))
    assert any(matches(p, record) for p in patterns) == is_event


def test_rules_send_the_chosen_events_to_an_encrypted_topic_and_a_keyed_webhook_each_with_a_dlq(options):
    rules = {k: r for k, r in resources(options, "AWS::Events::Rule").items() if "EventPattern" in r}
    assert len(rules) == 2
    for rule in rules.values():
        assert rule["EventPattern"] == {"source": [SOURCE], "detail-type": list(synth_example.NOTIFIED)}
        [target] = rule["Targets"]
        assert "DeadLetterConfig" in target and target["RetryPolicy"]["MaximumRetryAttempts"] == 8
    [topic] = resources(options, "AWS::SNS::Topic").values()
    assert "KmsMasterKeyId" in topic
    [destination] = resources(options, "AWS::Events::ApiDestination").values()
    assert destination["InvocationEndpoint"] == synth_example.WEBHOOK_URL
    [connection] = resources(options, "AWS::Events::Connection").values()
    assert connection["AuthorizationType"] == "API_KEY"
    assert connection["AuthParameters"]["ApiKeyAuthParameters"]["ApiKeyName"] == "x-sqsjobs-signature"
    assert "resolve:secretsmanager" in json.dumps(connection["AuthParameters"])
    assert set(synth_example.NOTIFIED) <= ALL_EVENTS | {DIGEST_EVENT}


def test_the_digest_runs_daily_reads_only_the_dead_jobs_index_and_the_table_and_publishes_on_the_bus(options):
    digest = function(options, DIGEST_HANDLER)
    [schedule] = [r for r in resources(options, "AWS::Events::Rule").values() if "ScheduleExpression" in r]
    assert schedule["ScheduleExpression"] == "cron(0 7 * * ? *)"
    [digest_id] = [
        k
        for k, v in options.resources("AWS::Lambda::Function").items()
        if v["Properties"]["Handler"] == DIGEST_HANDLER
    ]
    assert logical_id(schedule["Targets"][0]["Arn"]) == digest_id
    granted = statements(options, logical_id(digest["Role"]))
    assert actions(granted) == set(DIGEST_ACTIONS) | {"logs:CreateLogStream", "logs:PutLogEvents"}
    where = {s["Action"]: json.dumps(s["Resource"]) for s in granted if isinstance(s["Action"], str)}
    assert f"/index/{ATTENTION_INDEX}" in where["dynamodb:Query"]
    assert "index" not in where["dynamodb:BatchGetItem"] and "Bus" in where["events:PutEvents"]
