"""The archive in the synthesized template: the stream, the archiving function and its grants, the lifecycle.

``tests/infra/archive_synth.py``: an App with ``archive_days=400`` and the HTTP API.
"""

from __future__ import annotations

import json

import pytest

from tests.infra.conftest import run_synth

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    return run_synth("archive_synth.py", str(tmp_path_factory.mktemp("archive-synth")))


def of_type(template, kind: str) -> dict[str, dict]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == kind}


def statements_of(template, role_id: str) -> list[dict]:
    return [
        s
        for policy in of_type(template, "AWS::IAM::Policy").values()
        if any(r.get("Ref") == role_id for r in policy["Properties"]["Roles"])
        for s in policy["Properties"]["PolicyDocument"]["Statement"]
    ]


def test_a_function_on_the_change_stream_archives_to_the_archive_prefix_only(template):
    [table] = of_type(template, "AWS::DynamoDB::Table").values()
    assert table["Properties"]["StreamSpecification"] == {"StreamViewType": "NEW_AND_OLD_IMAGES"}
    [archiver] = [
        f
        for f in of_type(template, "AWS::Lambda::Function").values()
        if f["Properties"]["Handler"] == "sqsjobs.archive.plugin.handler"
    ]
    env = archiver["Properties"]["Environment"]["Variables"]
    assert env["SQSJOBS_ARCHIVE_DAYS"] == "400" and env["SQSJOBS_RETENTION"] == "succeeded=86400"
    [mapping] = [
        m
        for m in of_type(template, "AWS::Lambda::EventSourceMapping").values()
        if "status" in json.dumps(m["Properties"].get("FilterCriteria", {}))
        and m["Properties"]["FunctionName"] == {"Ref": _id_of(template, archiver)}
    ]
    assert mapping["Properties"]["BisectBatchOnFunctionError"] is True
    role = archiver["Properties"]["Role"]["Fn::GetAtt"][0]
    granted = {a for s in statements_of(template, role) for a in _list(s["Action"])}
    assert granted == {
        "dynamodb:DescribeStream",
        "dynamodb:GetRecords",
        "dynamodb:GetShardIterator",
        "dynamodb:ListStreams",
        "dynamodb:BatchWriteItem",  # the pointers
        "s3:PutObject",  # the objects, under archive/ only
        "sqs:SendMessage",
        "sqs:GetQueueAttributes",
        "sqs:GetQueueUrl",  # its DLQ
        "logs:CreateLogStream",
        "logs:PutLogEvents",
    }
    puts = [s for s in statements_of(template, role) if "s3:PutObject" in _list(s["Action"])]
    assert all("/archive/*" in json.dumps(s["Resource"]) for s in puts)


def test_the_bucket_keeps_the_archive_its_days_and_the_api_reads_it(template):
    [bucket] = of_type(template, "AWS::S3::Bucket").values()
    rules = {
        r["Prefix"] if "Prefix" in r else r["Filter"]["Prefix"]: r["ExpirationInDays"]
        for r in bucket["Properties"]["LifecycleConfiguration"]["Rules"]
    }
    assert rules == {"payloads/": 30, "results/": 30, "archive/": 400}
    [api] = [
        f for f in of_type(template, "AWS::Lambda::Function").values() if "api" in f["Properties"]["Handler"]
    ]
    role = api["Properties"]["Role"]["Fn::GetAtt"][0]
    reads = [s for s in statements_of(template, role) if _list(s["Action"]) == ["s3:GetObject"]]
    assert any("/archive/*" in json.dumps(s["Resource"]) for s in reads)  # jobs get, once a record is gone


def _list(value) -> list:
    return value if isinstance(value, list) else [value]


def _id_of(template, resource: dict) -> str:
    return next(k for k, v in template["Resources"].items() if v is resource)
