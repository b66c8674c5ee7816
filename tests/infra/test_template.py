"""The synthesized template against the code it is derived from: table, queues, workers, IAM, alarms, nag, lint.

Expected values come from sqsjobs itself (``table_definition``, ``redrive_count``, ``Settings``,
``sqsjobs.deploy.rules``), never from infra/, so a change on either side that breaks agreement fails here.
"""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from examples.shop import app as shop
from sqsjobs.config import MAX_MESSAGE_RETENTION_S, MAX_REGISTRY_INTERVAL_S, Settings
from sqsjobs.deploy.packaging import HANDLER
from sqsjobs.deploy.provision import redrive_count
from sqsjobs.deploy.rules import (
    API_ACTIONS,
    FARGATE_MAX_STOP_TIMEOUT_S,
    LAMBDA_VISIBILITY_FACTOR,
    OPEN_ROUTES,
    PRODUCER_ACTIONS,
    SCHEDULER_ACTIONS,
    SWEEPER_ACTIONS,
    TASK_PROTECTION_ACTIONS,
    WORKER_ACTIONS,
    queues_of,
)
from sqsjobs.envelope import Foreign, parse
from sqsjobs.observability.metrics import HEARTBEAT, JobMetrics
from sqsjobs.remote.lease import LEASE_KEY_SECRET_ENV
from sqsjobs.runtime.lambda_handlers import API_HANDLER, API_MAX_BODY_ENV
from sqsjobs.runtime.lambda_sqs import DEADLINE_MARGIN_S
from sqsjobs.store.schema import TTL_ATTRIBUTE, table_definition
from sqsjobs.transport import objects
from tests.emulators import REPO_ROOT
from tests.infra import synth_example
from tests.infra.conftest import CDK_VENV, cdk_python, synth_env

QUEUES = queues_of(shop.registry)
#: Every acknowledged cdk-nag finding, so a new one is a reviewed change of this list.
ACKNOWLEDGED = {
    "AwsSolutions-ECS2",
    "AwsSolutions-IAM5[Resource::*]",
    "AwsSolutions-L1",
    "AwsSolutions-S1",
    "AwsSolutions-SNS2",
}
ACKNOWLEDGED_PATTERNS = [
    # the cluster's tasks: the sweeper's (EventBridge tags them), the worker's (its scale-in protection)
    r"AwsSolutions-IAM5\[Resource::arn:<AWS::Partition>:ecs:<AWS::Region>:(\*|<AWS::AccountId>):task/<\w+>/\*\]",
    # job events (the options stack): the webhook's secret is rotated with its endpoint, and the
    # relay's and the rules' DLQs are themselves dead-letter queues (infra/sqsjobs_cdk/job_events.py)
    "AwsSolutions-SMG4",
    "AwsSolutions-SQS3",
    # the relay's dynamodb:ListStreams on its table's streams, as the DynamoDB developer guide grants it
    r"AwsSolutions-IAM5\[Resource::<\w+\.Arn>/stream/\*\]",
    # the routes outside IAM (OPEN_ROUTES: a wait token's answer URL, whose key is its credential)
    "AwsSolutions-APIG4",
    # the API's scheduler actions on the runtime group's schedules (names made at runtime)
    r"AwsSolutions-IAM5\[Resource::arn:<AWS::Partition>:scheduler:<AWS::Region>:<AWS::AccountId>:schedule/[\w-]+/\*\]",
    # the archive's function puts objects under archive/ (keys made per day, type and stream page)
    r"AwsSolutions-IAM5\[Resource::<\w+\.Arn>/archive/\*\]",
    # grant_invoke_api: any method and path of the one stage of the one API
    r"AwsSolutions-IAM5\[Resource::arn:<AWS::Partition>:execute-api:<AWS::Region>:<AWS::AccountId>:<\w+>/\*/\*/\*\]",
    # the key prefixes of the payload bucket (ours, or one passed as payload_bucket=)
    *(
        rf"AwsSolutions-IAM5\[Resource::(<\w+\.Arn>|arn:<AWS::Partition>:s3:::[\w.-]+)/{re.escape(prefix)}\*\]"
        for prefix in (objects.PAYLOADS, objects.RESULTS)
    ),
]
PUBLIC_ACCESS_BLOCKED = dict.fromkeys(
    ("BlockPublicAcls", "IgnorePublicAcls", "BlockPublicPolicy", "RestrictPublicBuckets"), True
)


def logical_id(ref: object) -> str:
    """The logical id a Ref or Fn::GetAtt points at."""
    assert isinstance(ref, dict), ref
    if "Ref" in ref:
        return str(ref["Ref"])
    return str(ref["Fn::GetAtt"][0])


def queue_ids(asm) -> dict[str, str]:
    return {v["Properties"]["QueueName"]: k for k, v in asm.resources("AWS::SQS::Queue").items()}


def env_of(container: dict) -> dict[str, str]:
    return {e["Name"]: e["Value"] for e in container.get("Environment", [])}


def containers(asm) -> dict[str, dict]:
    return {
        c["Name"]: c
        for td in asm.resources("AWS::ECS::TaskDefinition").values()
        for c in td["Properties"]["ContainerDefinitions"]
    }


def statements(asm, role_id: str) -> list[dict]:
    return [
        s
        for p in asm.resources("AWS::IAM::Policy").values()
        if any(logical_id(r) == role_id for r in p["Properties"].get("Roles", []))
        for s in p["Properties"]["PolicyDocument"]["Statement"]
    ]


def actions(stmts: list[dict]) -> set[str]:
    out = set()
    for s in stmts:
        out |= {s["Action"]} if isinstance(s["Action"], str) else set(s["Action"])
    return out


def function(asm, handler: str) -> dict:
    [found] = [
        r["Properties"]
        for r in asm.resources("AWS::Lambda::Function").values()
        if r["Properties"]["Handler"] == handler
    ]
    return found


def arn_text(value: object) -> str:
    """An ARN of the template as text, intrinsics as ``<Id.Attr>``/``<Id>`` (cdk-nag's spelling)."""
    if isinstance(value, str):
        return value
    assert isinstance(value, dict) and len(value) == 1, value
    [(function, argument)] = value.items()
    if function == "Fn::Join":
        return str(argument[0]).join(arn_text(v) for v in argument[1])
    if function == "Fn::GetAtt":
        return f"<{argument[0]}.{argument[1]}>"
    assert function == "Ref", value
    return f"<{argument}>"


def resources_of(stmts: list[dict]) -> set[str]:
    return {
        arn_text(r)
        for s in stmts
        for r in (s["Resource"] if isinstance(s["Resource"], list) else [s["Resource"]])
    }


def on(stmts: list[dict], service: str) -> list[dict]:
    """The statements granting actions of ``service``."""
    return [s for s in stmts if all(a.startswith(f"{service}:") for a in actions([s]))]


def role_of_task(asm, container_name: str) -> str:
    for td in asm.resources("AWS::ECS::TaskDefinition").values():
        if any(c["Name"] == container_name for c in td["Properties"]["ContainerDefinitions"]):
            return logical_id(td["Properties"]["TaskRoleArn"])
    raise AssertionError(f"no task definition with container {container_name}")


# ── the table ────────────────────────────────────────────────────────────────────────────────
def _keys(schema):
    return sorted((k["AttributeName"], k["KeyType"]) for k in schema)


def _index(i):
    p = i["Projection"]
    return (i["IndexName"], _keys(i["KeySchema"]), p["ProjectionType"], sorted(p.get("NonKeyAttributes", [])))


def test_the_table_is_the_stores_definition_on_demand_encrypted_with_pitr_ttl_and_retained(full, local):
    expected = table_definition(shop.settings.table_name)
    for asm in (full, local):
        [(_, resource)] = asm.resources("AWS::DynamoDB::Table").items()
        table = resource["Properties"]
        assert table["TableName"] == expected["TableName"]
        assert table["BillingMode"] == expected["BillingMode"] == "PAY_PER_REQUEST"
        assert _keys(table["KeySchema"]) == _keys(expected["KeySchema"])
        assert sorted(map(json.dumps, table["AttributeDefinitions"])) == sorted(
            map(json.dumps, expected["AttributeDefinitions"])
        )
        assert sorted(map(_index, table["GlobalSecondaryIndexes"])) == sorted(
            map(_index, expected["GlobalSecondaryIndexes"])
        )
        assert table["TimeToLiveSpecification"] == {"AttributeName": TTL_ATTRIBUTE, "Enabled": True}
        assert table["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
        assert table["SSESpecification"]["SSEEnabled"] is True
        assert table["DeletionProtectionEnabled"] is True
        assert resource["DeletionPolicy"] == resource["UpdateReplacePolicy"] == "Retain"


# ── queues ───────────────────────────────────────────────────────────────────────────────────
def test_each_queue_has_an_encrypted_tls_only_dlq_with_a_redrive_above_every_max_attempts(full, local):
    settings = shop.settings
    count = redrive_count(settings, shop.registry)
    assert count > shop.registry.max_attempts()
    for asm in (full, local):
        ids = queue_ids(asm)
        assert set(ids) == {settings.queue_name(q) for q in QUEUES} | {settings.dlq_name(q) for q in QUEUES}
        queues = asm.resources("AWS::SQS::Queue")
        for q in QUEUES:
            main = queues[ids[settings.queue_name(q)]]["Properties"]
            assert main["RedrivePolicy"]["maxReceiveCount"] == count
            assert logical_id(main["RedrivePolicy"]["deadLetterTargetArn"]) == ids[settings.dlq_name(q)]
        for props in (r["Properties"] for r in queues.values()):
            assert props["SqsManagedSseEnabled"] is True or "KmsMasterKeyId" in props
        # ... and every queue refuses requests without TLS
        tls_only = set()
        for policy in asm.resources("AWS::SQS::QueuePolicy").values():
            for s in policy["Properties"]["PolicyDocument"]["Statement"]:
                if s["Effect"] == "Deny" and s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}:
                    tls_only |= {logical_id(r) for r in policy["Properties"]["Queues"]}
        assert tls_only == set(queues)


def test_every_queue_and_dlq_keeps_its_messages_14_days(full, local, options):
    # A message is gone this long after its first send: SQS's default (4 days) would lose the message of
    # a record that still says its job is on its way (a long retry span, a pause, a backlog).
    for asm in (full, local, options):
        queues = asm.resources("AWS::SQS::Queue")
        assert queues
        for props in (q["Properties"] for q in queues.values()):
            assert props.get("MessageRetentionPeriod") == MAX_MESSAGE_RETENTION_S, props["QueueName"]


# ── the payload bucket ───────────────────────────────────────────────────────────────────────
def as_request_rule(rule: dict) -> dict:
    """A CloudFormation lifecycle rule in the shape of PutBucketLifecycleConfiguration's (objects.lifecycle)."""
    assert set(rule) <= {"Id", "Prefix", "Status", "ExpirationInDays", "AbortIncompleteMultipartUpload"}, rule
    out = {"ID": rule["Id"], "Filter": {"Prefix": rule["Prefix"]}, "Status": rule["Status"]}
    if "ExpirationInDays" in rule:
        out["Expiration"] = {"Days": rule["ExpirationInDays"]}
    if "AbortIncompleteMultipartUpload" in rule:
        out["AbortIncompleteMultipartUpload"] = rule["AbortIncompleteMultipartUpload"]
    return out


def test_the_payload_bucket_is_private_encrypted_tls_only_retained_and_expires_as_provision_says(full, local):
    expected_rules = objects.lifecycle(shop.settings)["LifecycleConfiguration"]["Rules"]
    for asm in (full, local):
        [(bucket_id, resource)] = asm.resources("AWS::S3::Bucket").items()
        bucket = resource["Properties"]
        # CloudFormation names it: bucket names are global, and the App does not name one
        assert "BucketName" not in bucket
        assert [as_request_rule(r) for r in bucket["LifecycleConfiguration"]["Rules"]] == expected_rules
        assert bucket["BucketEncryption"]["ServerSideEncryptionConfiguration"] == [
            {"ServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}
        ]
        assert bucket["PublicAccessBlockConfiguration"] == PUBLIC_ACCESS_BLOCKED
        assert "VersioningConfiguration" not in bucket
        assert resource["DeletionPolicy"] == resource["UpdateReplacePolicy"] == "Retain"
        # ... and its policy refuses every request without TLS, on the bucket and its objects
        [policy] = asm.resources("AWS::S3::BucketPolicy").values()
        assert logical_id(policy["Properties"]["Bucket"]) == bucket_id
        [deny] = policy["Properties"]["PolicyDocument"]["Statement"]
        assert (deny["Effect"], deny["Principal"], deny["Action"]) == ("Deny", {"AWS": "*"}, "s3:*")
        assert deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
        assert resources_of([deny]) == {f"<{bucket_id}.Arn>", f"<{bucket_id}.Arn>/*"}


def test_every_deployed_process_and_the_outputs_name_the_bucket_cloudformation_made(full, local):
    for asm in (full, local):
        [bucket_id] = asm.resources("AWS::S3::Bucket")
        environments = [
            f["Properties"]["Environment"]["Variables"]
            for f in asm.resources("AWS::Lambda::Function").values()
        ]
        environments += [env_of(c) for c in containers(asm).values()]
        # ECS worker, ECS sweeper, Lambda worker, API function; locally the Lambda worker and sweeper
        assert len(environments) == (4 if asm is full else 2)
        for env in environments:
            assert env["SQSJOBS_PAYLOAD_BUCKET"] == {"Ref": bucket_id}  # not the default name
        [output] = [
            o for o in asm.template["Outputs"].values() if o.get("Description") == "SQSJOBS_PAYLOAD_BUCKET"
        ]
        assert output["Value"] == {"Ref": bucket_id}


def test_workers_read_and_write_only_the_two_key_prefixes_of_the_bucket(full, local):
    for asm in (full, local):
        [bucket_id] = asm.resources("AWS::S3::Bucket")
        roles = [logical_id(function(asm, HANDLER)["Role"])]
        if asm is full:
            roles.append(role_of_task(asm, "worker"))
        for role in roles:
            granted = on(statements(asm, role), "s3")
            assert actions(granted) == set(WORKER_ACTIONS["s3"]) == {"s3:GetObject", "s3:PutObject"}
            assert resources_of(granted) == {
                f"<{bucket_id}.Arn>/{prefix}*" for prefix in (objects.PAYLOADS, objects.RESULTS)
            }
        # ... and nothing else in the stack may touch it but the API's function (checked in
        # test_the_api_function_...) and the sweeper, which writes the payload of a batch's completion
        # callback too large for its record when its repair completes the batch
        if asm is full:
            roles.append(logical_id(function(asm, API_HANDLER)["Role"]))
        readers = {
            logical_id(role)
            for p in asm.resources("AWS::IAM::Policy").values()
            if on(p["Properties"]["PolicyDocument"]["Statement"], "s3")
            for role in p["Properties"]["Roles"]
        }
        sweepers = {r for r in readers if "Sweeper" in r}  # its Fargate task or its Lambda function
        assert len(sweepers) == 1 and readers - sweepers == set(roles)


def test_an_app_that_names_its_bucket_gets_that_name_and_an_existing_bucket_is_used_as_it_is(options):
    lambda_env = {
        f["Properties"]["Environment"]["Variables"]["SQSJOBS_APP"]: f["Properties"]["Environment"][
            "Variables"
        ]
        for f in options.resources("AWS::Lambda::Function").values()
    }
    # GIVEN an App with payload_bucket= set: the bucket has that name (its processes would use it anyway)
    [(bucket_id, bucket)] = options.resources("AWS::S3::Bucket").items()
    assert bucket["Properties"]["BucketName"] == synth_example.NAMED.settings.payload_bucket
    assert lambda_env["tests.infra.synth_example:NAMED"]["SQSJOBS_PAYLOAD_BUCKET"] == {"Ref": bucket_id}
    # GIVEN an existing bucket passed as payload_bucket=: no bucket is made, its name is the env's
    imported = lambda_env["tests.infra.synth_example:IMPORTED"]
    assert imported["SQSJOBS_PAYLOAD_BUCKET"] == synth_example.EXISTING_BUCKET
    [imported_worker] = [
        logical_id(f["Properties"]["Role"])
        for f in options.resources("AWS::Lambda::Function").values()
        if f["Properties"]["Handler"] == HANDLER
        and f["Properties"]["Environment"]["Variables"]["SQSJOBS_APP"].endswith(":IMPORTED")
    ]
    assert resources_of(on(statements(options, imported_worker), "s3")) == {
        f"arn:<AWS::Partition>:s3:::{synth_example.EXISTING_BUCKET}/{prefix}*"
        for prefix in (objects.PAYLOADS, objects.RESULTS)
    }


#: Run by the CDK venv: what the construct refuses before anything is synthesized.
REFUSALS = """
import sys
from aws_cdk import App, Stack, aws_s3 as s3
from sqsjobs.errors import ConfigurationError
from sqsjobs.transport import objects
from sqsjobs_cdk import LambdaWorker, SqsJobs
from sqsjobs_cdk.bucket import lifecycle_rules
from tests.infra import synth_example

request = objects.lifecycle(synth_example.NAMED.settings)
request["LifecycleConfiguration"]["Rules"][0]["Transitions"] = [{"Days": 1, "StorageClass": "GLACIER"}]
try:
    lifecycle_rules(request)
except ConfigurationError as exc:
    print("lifecycle:", exc)
stack = Stack(App(), "S")
try:
    SqsJobs(
        stack, "Jobs", app=synth_example.NAMED, app_path="tests.infra.synth_example:NAMED",
        lambda_worker=LambdaWorker(code_path=sys.argv[1], timeout_s=synth_example.FUNCTION_TIMEOUT_S),
        payload_bucket=s3.Bucket.from_bucket_name(stack, "Other", "some-other-bucket"),
    )
except ConfigurationError as exc:
    print("bucket:", exc)
"""


@pytest.mark.slow
def test_a_lifecycle_key_infra_cannot_translate_and_a_bucket_the_app_would_not_use_are_refused(synth):
    done = subprocess.run(
        [str(cdk_python()), "-c", REFUSALS, str(synth.lambda_zip)],
        cwd=REPO_ROOT,
        env={**synth_env(), "PYTHONPATH": f"{REPO_ROOT / 'infra'}:{REPO_ROOT}"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    refusals = dict(line.split(": ", 1) for line in done.stdout.splitlines())
    # a rule objects.lifecycle() might grow is an error naming it, never silently left out
    assert "['Transitions']" in refusals["lifecycle"] and "bucket.py" in refusals["lifecycle"]
    # an App that names its bucket would use it whatever SQSJOBS_PAYLOAD_BUCKET says
    assert repr(synth_example.NAMED.settings.payload_bucket) in refusals["bucket"]
    assert "'some-other-bucket'" in refusals["bucket"]


def test_grant_enqueue_grants_a_producer_what_an_enqueue_calls_on_what_it_touches(options):
    ids = {v["Properties"]["QueueName"]: k for k, v in options.resources("AWS::SQS::Queue").items()}
    tables = {v["Properties"]["TableName"]: k for k, v in options.resources("AWS::DynamoDB::Table").items()}
    [named_bucket] = options.resources("AWS::S3::Bucket")
    buckets = {
        "Named": f"<{named_bucket}.Arn>",
        "Imported": f"arn:<AWS::Partition>:s3:::{synth_example.EXISTING_BUCKET}",
    }
    for construct, app in (("Named", synth_example.NAMED), ("Imported", synth_example.IMPORTED)):
        settings = app.settings
        [producer] = [k for k in options.resources("AWS::IAM::Role") if k.startswith(f"{construct}Producer")]
        granted = statements(options, producer)
        # THEN it may do exactly what an enqueue does (rules.PRODUCER_ACTIONS, checked against the code)...
        assert actions(granted) == {a for names in PRODUCER_ACTIONS.values() for a in names}
        # ... on the App's table, its queues (and, to resolve their URLs, their DLQs), and payloads/ only
        by_action = {a: resources_of([s]) for s in granted for a in actions([s])}
        table = {f"<{tables[settings.table_name]}.Arn>"}
        queue = {f"<{ids[settings.queue_name('default')]}.Arn>"}
        dlq = {f"<{ids[settings.dlq_name('default')]}.Arn>"}
        assert by_action == {
            "dynamodb:PutItem": table,
            "dynamodb:PartiQLInsert": table,
            "dynamodb:UpdateItem": table,  # a transactional enqueue clears its sent records
            "dynamodb:ConditionCheckItem": table,  # a batch's completion, when a producer's seal completes it
            "dynamodb:BatchWriteItem": table,  # a tagged job's tag items
            "sqs:SendMessage": queue,
            "sqs:GetQueueUrl": queue | dlq,
            "s3:PutObject": {f"{buckets[construct]}/{objects.PAYLOADS}*"},
        }


# ── jobs from AWS services (docs/enqueue-from-aws.md) ───────────────────────────────────────────
def render_input_template(transformer: dict, event: dict) -> str:
    """What EventBridge delivers: each ``<name>`` replaced by the value at its path, JSON-encoded (a string
    in a value position gets its quotes: AWS guide, "Amazon EventBridge input transformation")."""
    values = {}
    for name, path in transformer["InputPathsMap"].items():
        value = event
        for part in path.removeprefix("$.").split("."):
            value = value[part]
        values[name] = value
    return re.sub(r"<([\w.-]+)>", lambda m: json.dumps(values[m.group(1)]), transformer["InputTemplate"])


def queue_policy(asm, queue_id: str) -> list[dict]:
    [policy] = [
        p["Properties"]["PolicyDocument"]["Statement"]
        for p in asm.resources("AWS::SQS::QueuePolicy").values()
        if [logical_id(q) for q in p["Properties"]["Queues"]] == [queue_id]
    ]
    return policy


def allowed_sources(statements: list[dict], service: str) -> set[str]:
    """The ``aws:SourceArn`` values a service principal may send from (each an Allow of sqs:SendMessage)."""
    return {
        arn_text(s["Condition"]["ArnEquals"]["aws:SourceArn"])
        for s in statements
        if s["Effect"] == "Allow"
        and s.get("Principal") == {"Service": f"{service}.amazonaws.com"}
        and "sqs:SendMessage" in actions([s])
    }


def test_an_event_rule_sends_each_match_to_the_queue_as_the_message_the_worker_reads(options):
    settings = synth_example.NAMED.settings
    ids = queue_ids(options)
    queue, dlq = ids[settings.queue_name("default")], ids[settings.dlq_name("default")]
    [(rule_id, rule)] = [
        (k, v)
        for k, v in options.resources("AWS::Events::Rule").items()
        if "Sweeper" not in k and "JobEvents" not in k
    ]
    props = rule["Properties"]
    assert props["EventPattern"] == {
        "source": [synth_example.EVENT_SOURCE],
        "detail-type": [synth_example.EVENT_DETAIL_TYPE],
    }
    [target] = props["Targets"]
    # the job type's queue, with its DLQ for what EventBridge cannot deliver
    assert (logical_id(target["Arn"]), logical_id(target["DeadLetterConfig"]["Arn"])) == (queue, dlq)
    # WHEN EventBridge renders a matching event through the input transformer
    event = {
        "version": "0",
        "id": "6a7e8feb-b491-4cf7-a9f1-bf3703467718",
        "detail-type": "OrderPlaced",
        "source": "shop.orders",
        "account": "111122223333",
        "time": "2026-11-23T01:00:00Z",
        "region": "us-east-1",
        "resources": [],
        "detail": {"order_id": 7, "tenant": "acme"},
    }
    body = render_input_template(target["InputTransformer"], event)
    # THEN the worker reads the job the rule stands for, keyed by the event's id
    assert parse(body) == Foreign(
        "named.check",
        event["detail"],
        idempotency_key=event["id"],
        tenant="acme",
        delay_s=synth_example.RULE_DELAY_S,
    )
    # ... and this rule, no other, may send to the queue and its DLQ
    rule_arn = f"<{rule_id}.Arn>"
    assert allowed_sources(queue_policy(options, queue), "events") == {rule_arn}
    assert allowed_sources(queue_policy(options, dlq), "events") == {rule_arn}


def test_a_topic_delivers_raw_messages_to_the_queue_and_what_it_cannot_deliver_to_the_dlq(options):
    settings = synth_example.NAMED.settings
    ids = queue_ids(options)
    queue, dlq = ids[settings.queue_name("default")], ids[settings.dlq_name("default")]
    [topic_id] = [k for k in options.resources("AWS::SNS::Topic") if k.startswith("OrdersTopic")]
    [subscription] = options.resources("AWS::SNS::Subscription").values()
    props = subscription["Properties"]
    # raw delivery: the queue gets the published message as the publisher wrote it
    assert (props["Protocol"], props["RawMessageDelivery"]) == ("sqs", True)
    assert (logical_id(props["TopicArn"]), logical_id(props["Endpoint"])) == (topic_id, queue)
    assert logical_id(props["RedrivePolicy"]["deadLetterTargetArn"]) == dlq
    # ... and this topic, no other, may send to the queue and its DLQ
    assert allowed_sources(queue_policy(options, queue), "sns") == {f"<{topic_id}>"}
    assert allowed_sources(queue_policy(options, dlq), "sns") == {f"<{topic_id}>"}


#: Run by the CDK venv: the job types and queues the helpers refuse at synth time.
SOURCE_REFUSALS = """
from aws_cdk import App, Stack, aws_events as events, aws_sns as sns
from sqsjobs import App as JobsApp
from sqsjobs.errors import ConfigurationError
from sqsjobs_cdk import LambdaWorker, SqsJobs
import sys

jobs_app = JobsApp("refusals")
jobs_app.job("a.one")(lambda payload, ctx: None)
jobs_app.job("b.other", queue="other")(lambda payload, ctx: None)
stack = Stack(App(), "S")
jobs = SqsJobs(stack, "Jobs", app=jobs_app, app_path="x:jobs_app",
               lambda_worker=LambdaWorker(code_path=sys.argv[1], timeout_s=5))
topic = sns.Topic(stack, "T")
pattern = events.EventPattern(source=["s"])
for name, attempt in {
    "unknown type": lambda: jobs.enqueue_from_rule(pattern, job_type="a.onee"),
    "two queues": lambda: jobs.enqueue_from_topic(topic, job_types=["a.one", "b.other"]),
    "unknown queue": lambda: jobs.enqueue_from_topic(topic, job_types="a.one", queue="nope"),
    "delay": lambda: jobs.enqueue_from_rule(pattern, job_type="a.one", delay_s=-1),
}.items():
    try:
        attempt()
    except ConfigurationError as exc:
        print(f"{name}: {exc}")
"""


@pytest.mark.slow
def test_the_helpers_refuse_a_job_type_or_queue_the_app_does_not_have_at_synth_time(synth):
    done = subprocess.run(
        [str(cdk_python()), "-c", SOURCE_REFUSALS, str(synth.lambda_zip)],
        cwd=REPO_ROOT,
        env={**synth_env(), "PYTHONPATH": f"{REPO_ROOT / 'infra'}:{REPO_ROOT}"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    refusals = dict(line.split(": ", 1) for line in done.stdout.splitlines())
    assert refusals["unknown type"].startswith("App 'refusals' has no handler for ['a.onee']")
    assert (
        refusals["two queues"]
        == "job types ['a.one', 'b.other'] use queues ['default', 'other']: name the queue="
    )
    assert refusals["unknown queue"].startswith("queue 'nope' is not one of this deployment's")
    assert refusals["delay"].startswith("delay_s must be from 0 to")


# ── workers ──────────────────────────────────────────────────────────────────────────────────
def test_the_lambda_worker_reports_item_failures_caps_concurrency_and_fits_the_visibility(full, local):
    for asm in (full, local):
        worker = function(asm, HANDLER)
        mappings = asm.resources("AWS::Lambda::EventSourceMapping")
        queues = asm.resources("AWS::SQS::Queue")
        assert {logical_id(m["Properties"]["EventSourceArn"]) for m in mappings.values()} == {
            queue_ids(asm)[shop.settings.queue_name(q)] for q in QUEUES
        }
        for m in mappings.values():
            esm = m["Properties"]
            assert esm["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
            assert 2 <= esm["ScalingConfig"]["MaximumConcurrency"] <= 1000
            assert 1 <= esm["BatchSize"] <= 10
            visibility = queues[logical_id(esm["EventSourceArn"])]["Properties"]["VisibilityTimeout"]
            assert visibility >= LAMBDA_VISIBILITY_FACTOR * worker["Timeout"]
            # ... and the function's settings agree with the queue it reads
            assert int(worker["Environment"]["Variables"]["SQSJOBS_VISIBILITY_TIMEOUT_S"]) == visibility
        # ... and its timeout lets the deadline guard start every job type of those queues
        longest = max(spec.timeout_s for spec in shop.registry if spec.queue in QUEUES)
        assert worker["Timeout"] > longest + DEADLINE_MARGIN_S
        assert worker["Environment"]["Variables"]["SQSJOBS_APP"] == "examples.shop:app"


def test_the_ecs_worker_outlives_its_drain_and_the_sweeper_runs_on_a_schedule(full):
    by_name = containers(full)
    worker, sweeper = by_name["worker"], by_name["sweeper"]
    env = env_of(worker)
    assert worker["Command"] == ["worker"]
    assert float(env["SQSJOBS_DRAIN_TIMEOUT_S"]) < worker["StopTimeout"] <= FARGATE_MAX_STOP_TIMEOUT_S
    assert env["SQSJOBS_TABLE"] == shop.settings.table_name
    assert env["SQSJOBS_QUEUE_PREFIX"] == shop.settings.queue_prefix
    assert env["SQSJOBS_APP"] == "examples.shop:app"
    assert sweeper["Command"] == ["sweep", "--once"]
    for c in (worker, sweeper):
        assert c["ReadonlyRootFilesystem"] is True
        assert c["LinuxParameters"]["InitProcessEnabled"] is True
    [rule] = full.resources("AWS::Events::Rule").values()
    assert re.fullmatch(r"rate\(\d+ minutes?\)", rule["Properties"]["ScheduleExpression"])
    sweeper_task = next(
        k
        for k, v in full.resources("AWS::ECS::TaskDefinition").items()
        if v["Properties"]["ContainerDefinitions"][0]["Name"] == "sweeper"
    )
    [target] = rule["Properties"]["Targets"]
    assert logical_id(target["EcsParameters"]["TaskDefinitionArn"]) == sweeper_task
    service = full.one("AWS::ECS::Service")
    assert service["NetworkConfiguration"]["AwsvpcConfiguration"]["AssignPublicIp"] == "DISABLED"


def test_the_worker_service_scales_on_backlog_per_running_task(full):
    target = full.one("AWS::ApplicationAutoScaling::ScalableTarget")
    assert 1 <= target["MinCapacity"] <= target["MaxCapacity"]
    policy = full.one("AWS::ApplicationAutoScaling::ScalingPolicy")
    assert policy["PolicyType"] == "TargetTrackingScaling"
    config = policy["TargetTrackingScalingPolicyConfiguration"]
    metrics = {m["Id"]: m for m in config["CustomizedMetricSpecification"]["Metrics"]}
    [result] = [m for m in metrics.values() if m["ReturnData"]]
    divisor = result["Expression"].rsplit("/", 1)[1].strip()
    assert metrics[divisor]["MetricStat"]["Metric"]["MetricName"] == "RunningTaskCount"
    queue_metrics = [
        m for m in metrics.values() if m.get("MetricStat", {}).get("Metric", {}).get("Namespace") == "AWS/SQS"
    ]
    ids = queue_ids(full)
    assert {logical_id(m["MetricStat"]["Metric"]["Dimensions"][0]["Value"]) for m in queue_metrics} == {
        ids[shop.settings.queue_name(q)] for q in QUEUES
    }
    assert all(m["Id"] in result["Expression"] for m in queue_metrics)
    assert config["TargetValue"] > 0


# ── least privilege ──────────────────────────────────────────────────────────────────────────
def test_no_iam_statement_has_a_wildcard_action_or_a_managed_policy(full, local):
    for asm in (full, local):
        for policy in asm.resources("AWS::IAM::Policy").values():
            for s in policy["Properties"]["PolicyDocument"]["Statement"]:
                assert not any("*" in a for a in actions([s])), s
                if s["Resource"] == "*":  # only actions IAM accepts nothing narrower for
                    assert actions([s]) in ({"ecr:GetAuthorizationToken"}, {"cloudwatch:GetMetricData"}), s
        for role in asm.resources("AWS::IAM::Role").values():
            assert "ManagedPolicyArns" not in role["Properties"]


def test_each_principal_gets_exactly_its_action_list(full):
    def listed(spec):
        return {a for names in spec.values() for a in names}

    # ... and the task scale-in protection the ECS agent sets for it (test_capacity_options.py)
    worker = listed(WORKER_ACTIONS) | set(TASK_PROTECTION_ACTIONS)
    assert actions(statements(full, role_of_task(full, "worker"))) == worker
    # ... the sweeper reads the workers' JobRunTime metric too (the slow-run baselines: slow_runs/plugin.py)
    sweeper = listed(SWEEPER_ACTIONS) | {"cloudwatch:GetMetricData"}
    assert actions(statements(full, role_of_task(full, "sweeper"))) == sweeper
    lambda_actions = actions(statements(full, logical_id(function(full, HANDLER)["Role"])))
    consume = {
        "sqs:ReceiveMessage",
        "sqs:DeleteMessage",
        "sqs:ChangeMessageVisibility",
        "sqs:GetQueueAttributes",
    }
    assert lambda_actions == listed(WORKER_ACTIONS) | consume | {
        "sqs:GetQueueUrl",
        "logs:CreateLogStream",
        "logs:PutLogEvents",
    }
    [(scheduler_id, scheduler_role)] = [
        (k, v)
        for k, v in full.resources("AWS::IAM::Role").items()
        if v["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]["Principal"]
        == {"Service": "scheduler.amazonaws.com"}
    ]
    assert actions(statements(full, scheduler_id)) == listed(SCHEDULER_ACTIONS)
    trust = scheduler_role["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]
    assert "aws:SourceAccount" in trust["Condition"]["StringEquals"]
    # ... the sweeper reads the attention index by name, never index/*
    sweeper_resources = json.dumps([s["Resource"] for s in statements(full, role_of_task(full, "sweeper"))])
    assert "/index/attention" in sweeper_resources
    assert "index/*" not in json.dumps(full.template)


def test_without_ecs_the_sweeper_is_a_scheduled_function_with_the_sweeper_actions(local):
    sweeper = function(local, "sqsjobs.runtime.lambda_handlers.sweeper")
    assert actions(statements(local, logical_id(sweeper["Role"]))) == {
        a for names in SWEEPER_ACTIONS.values() for a in names
    } | {"logs:CreateLogStream", "logs:PutLogEvents", "cloudwatch:GetMetricData"}
    [rule] = local.resources("AWS::Events::Rule").values()
    assert re.fullmatch(r"rate\(\d+ minutes?\)", rule["Properties"]["ScheduleExpression"])
    [target] = rule["Properties"]["Targets"]
    sweeper_id = next(
        k
        for k, v in local.resources("AWS::Lambda::Function").items()
        if v["Properties"]["Handler"] == "sqsjobs.runtime.lambda_handlers.sweeper"
    )
    assert logical_id(target["Arn"]) == sweeper_id


# ── the HTTP API ─────────────────────────────────────────────────────────────────────────────
def test_the_api_function_runs_the_worker_zip_behind_an_iam_authorised_http_api(full, local):
    api = function(full, API_HANDLER)
    worker = function(full, HANDLER)
    # the same zip as the Lambda worker, within API Gateway's 30 s
    assert api["Code"] == worker["Code"] and api["Timeout"] <= 29
    assert api["Environment"]["Variables"]["SQSJOBS_APP"] == "examples.shop:app"
    # ... behind one HTTP API whose every route is IAM-authorised and proxies to it, but the routes
    # that carry their own credential (a wait token's answer URL), each a route of its own
    http_api = full.one("AWS::ApiGatewayV2::Api")
    assert http_api["ProtocolType"] == "HTTP"
    routes = {
        r["Properties"]["RouteKey"]: r["Properties"]
        for r in full.resources("AWS::ApiGatewayV2::Route").values()
    }
    open_keys = {f"{method} {path}" for method, path in OPEN_ROUTES}
    assert set(routes) == {"$default"} | open_keys
    assert {k: r["AuthorizationType"] for k, r in routes.items()} == {
        "$default": "AWS_IAM",
        **dict.fromkeys(open_keys, "NONE"),
    }
    integration = full.one("AWS::ApiGatewayV2::Integration")
    [integration_id] = full.resources("AWS::ApiGatewayV2::Integration")
    assert all(integration_id in json.dumps(r["Target"]) for r in routes.values())  # one function
    assert integration["IntegrationType"] == "AWS_PROXY" and integration["PayloadFormatVersion"] == "2.0"
    [api_id] = [
        k
        for k, v in full.resources("AWS::Lambda::Function").items()
        if v["Properties"]["Handler"] == API_HANDLER
    ]
    assert logical_id(integration["IntegrationUri"]) == api_id
    # ... a throttled $default stage writing an access log of context variables only (no body)
    stage = full.one("AWS::ApiGatewayV2::Stage")
    assert stage["StageName"] == "$default" and stage["AutoDeploy"] is True
    assert stage["DefaultRouteSettings"]["ThrottlingRateLimit"] > 0
    access = json.loads(stage["AccessLogSettings"]["Format"])
    assert all(v.startswith("$context.") for v in access.values())
    assert "body" not in stage["AccessLogSettings"]["Format"].lower()
    assert any(o["Description"] == "the HTTP API (IAM)" for o in full.template["Outputs"].values())
    # ... its role may do exactly API_ACTIONS (checked against the code), on the table and the
    # attention index by name, the queues and DLQs
    granted = statements(full, logical_id(api["Role"]))
    assert actions(granted) == {a for names in API_ACTIONS.values() for a in names} | {
        "logs:CreateLogStream",
        "logs:PutLogEvents",
        "cloudwatch:GetMetricData",  # the dashboard's charts on AWS; it takes only resource *
        "iam:PassRole",  # runtime schedules name the Scheduler role (to scheduler.amazonaws.com only)
    }
    [pass_role] = on(granted, "iam")
    assert pass_role["Condition"] == {"StringEquals": {"iam:PassedToService": "scheduler.amazonaws.com"}}
    [metric_reads] = on(granted, "cloudwatch")
    assert metric_reads["Action"] == "cloudwatch:GetMetricData" and metric_reads["Resource"] == "*"
    dynamo = resources_of(on(granted, "dynamodb"))
    assert any(r.endswith("/index/attention") for r in dynamo)
    queues = {logical_id(r) for s in on(granted, "sqs") for r in s["Resource"]}
    assert queues == set(queue_ids(full).values())
    # ... and it reads the key HTTP workers' leases are signed with from its one generated secret
    [secret_id] = full.resources("AWS::SecretsManager::Secret")
    assert logical_id(api["Environment"]["Variables"][LEASE_KEY_SECRET_ENV]) == secret_id
    [secret_read] = on(granted, "secretsmanager")
    assert secret_read["Action"] == "secretsmanager:GetSecretValue"
    assert logical_id(secret_read["Resource"]) == secret_id
    secret = full.resources("AWS::SecretsManager::Secret")[secret_id]["Properties"]
    assert "GenerateSecretString" in secret and "SecretString" not in secret  # never in the template
    # ... and locally (emulators lack API Gateway v2) there is none
    assert not local.resources("AWS::ApiGatewayV2::Api")


def test_grant_invoke_api_lets_a_caller_invoke_the_api_and_the_body_limit_reaches_the_function(options):
    [caller] = [k for k in options.resources("AWS::IAM::Role") if k.startswith("ApiCaller")]
    granted = statements(options, caller)
    assert actions(granted) == {"execute-api:Invoke"}
    [api_id] = options.resources("AWS::ApiGatewayV2::Api")
    assert resources_of(granted) == {
        f"arn:<AWS::Partition>:execute-api:<AWS::Region>:<AWS::AccountId>:<{api_id}>/*/*/*"
    }
    api = function(options, API_HANDLER)
    assert api["Environment"]["Variables"][API_MAX_BODY_ENV] == "65536"


# ── schedules, alarms, dashboard ─────────────────────────────────────────────────────────────
def test_the_schedule_group_and_role_are_exported_for_the_schedules_cli(full, local):
    for asm in (full, local):
        groups = {g["Properties"]["Name"] for g in asm.resources("AWS::Scheduler::ScheduleGroup").values()}
        # the declared schedules' group (schedules apply), and the runtime one's (app.schedules.create)
        assert groups == {shop.settings.schedule_group, shop.settings.runtime_schedule_group}
        outputs = asm.template["Outputs"]
        assert any(o.get("Description") == "SQSJOBS_SCHEDULER_ROLE_ARN" for o in outputs.values())


def test_alarms_cover_message_age_dlq_depth_and_worker_errors_and_notify(full):
    alarms = [a["Properties"] for a in full.resources("AWS::CloudWatch::Alarm").values()]
    ids = queue_ids(full)
    by_metric: dict[str, list[dict]] = {}
    for a in alarms:
        by_metric.setdefault(a["MetricName"], []).append(a)
        assert a["AlarmActions"]
        # missing data is an alarm only for the heartbeat: its silence is the failure
        assert a["TreatMissingData"] == ("breaching" if a["MetricName"] == HEARTBEAT else "notBreaching")

    def queues_watched(metric):
        return {logical_id(a["Dimensions"][0]["Value"]) for a in by_metric[metric]}

    assert queues_watched("ApproximateAgeOfOldestMessage") == {
        ids[shop.settings.queue_name(q)] for q in QUEUES
    }
    # visible messages: every DLQ at its first message, and every queue's depth that stays high
    dlqs = {ids[shop.settings.dlq_name(q)] for q in QUEUES}
    assert queues_watched("ApproximateNumberOfMessagesVisible") == dlqs | {
        ids[shop.settings.queue_name(q)] for q in QUEUES
    }
    for visible in by_metric["ApproximateNumberOfMessagesVisible"]:
        on_dlq = logical_id(visible["Dimensions"][0]["Value"]) in dlqs
        assert (visible["Threshold"], visible["ComparisonOperator"]) == (
            1 if on_dlq else 1000,  # the depth alarm's default (tests/infra/test_depth_alarm.py)
            "GreaterThanOrEqualToThreshold",
        )
    assert by_metric["WorkerErrors"] and by_metric["Errors"]  # log ERROR lines; Lambda invocation errors
    # ... counted on every log group a worker or sweeper writes (all but the VPC flow logs)
    filters = {  # the per-type alarms' filters (poison jobs, breakers) are test_job_alarms.py's
        k: f
        for k, f in full.resources("AWS::Logs::MetricFilter").items()
        if f["Properties"]["MetricTransformations"][0]["MetricName"] == "WorkerErrors"
    }
    assert all('$.level = "ERROR"' in f["Properties"]["FilterPattern"] for f in filters.values())
    flow_logs = {
        logical_id(f["Properties"]["LogGroupName"]) for f in full.resources("AWS::EC2::FlowLog").values()
    }
    watched = {logical_id(f["Properties"]["LogGroupName"]) for f in filters.values()}
    api_logs = {k for k in full.resources("AWS::Logs::LogGroup") if k.startswith("JobsApi")}
    assert len(api_logs) == 2  # the API's function and its access log: not workers
    assert watched == set(full.resources("AWS::Logs::LogGroup")) - flow_logs - api_logs
    assert len(watched) == 3  # ECS worker, ECS sweeper, Lambda worker
    full.one("AWS::CloudWatch::Dashboard")


def test_a_heartbeat_gap_of_the_ecs_workers_fires_an_alarm_and_the_lambda_only_variant_has_none(full, local):
    # GIVEN the ECS worker's heartbeat metric, as the worker writes it (EMF, per service)
    lines: list[str] = []
    JobMetrics(shop.name, write=lines.append).worker_heartbeat()
    emf = json.loads(lines[0])
    (directive,) = emf["_aws"]["CloudWatchMetrics"]
    (gap,) = [
        a["Properties"]
        for a in full.resources("AWS::CloudWatch::Alarm").values()
        if a["Properties"]["MetricName"] == HEARTBEAT
    ]
    # THEN the alarm watches exactly that metric: namespace, name and service dimension
    assert (gap["Namespace"], gap["Dimensions"]) == (
        directive["Namespace"],
        [{"Name": "service", "Value": emf["service"]}],
    )
    # AND fires when no beat arrives in 3 consecutive minutes, a missing metric counting as none
    assert (gap["Statistic"], gap["Period"], gap["EvaluationPeriods"]) == ("Sum", 60, 3)
    assert (gap["ComparisonOperator"], gap["Threshold"]) == ("LessThanThreshold", 1)
    assert gap["TreatMissingData"] == "breaching" and gap["AlarmActions"] and gap["OKActions"]
    # AND the refresh cannot be rarer than the period (a worker beats at least once a minute)
    assert Settings("x").registry_interval_s <= MAX_REGISTRY_INTERVAL_S == gap["Period"]
    # AND a deployment without an ECS service (Lambda only) has no heartbeat to miss
    assert not [
        a
        for a in local.resources("AWS::CloudWatch::Alarm").values()
        if a["Properties"]["MetricName"] == HEARTBEAT
    ]


def test_the_local_variant_leaves_out_what_emulators_cannot_run(local):
    kinds = {v["Type"] for v in local.template["Resources"].values()}
    assert not {
        k for k in kinds if k.startswith(("AWS::ECS::", "AWS::EC2::", "AWS::ApplicationAutoScaling::"))
    }
    assert {"AWS::Lambda::Function", "AWS::Lambda::EventSourceMapping", "AWS::DynamoDB::Table"} <= kinds


# ── cdk-nag and cfn-lint ─────────────────────────────────────────────────────────────────────
def acknowledgements(asm) -> dict[str, str]:
    found = {}
    for entries in asm.json(f"{asm.template_path.stem.split('.')[0]}.metadata.json").values():
        for entry in entries:
            if entry["type"] == "aws:cdk:acknowledged-rules":
                for rule, reason in entry["data"].items():
                    _source, _, rule_id = rule.partition("::")
                    if rule_id.startswith("AwsSolutions-"):  # not CDK's own CloudFormation-Validate ones
                        found[rule_id] = reason
    return found


def test_cdk_nag_finds_nothing_unacknowledged_and_every_acknowledgement_has_a_reason(full, local, options):
    for asm in (full, local, options):
        report = asm.json("validation-report.json")
        violations = [v for r in report["pluginReports"] for v in r.get("violations", [])]
        assert violations == []
        acks = acknowledgements(asm)
        assert all(len(reason) >= 20 for reason in acks.values()), acks
        unexpected = {
            r
            for r in acks
            if r not in ACKNOWLEDGED and not any(re.fullmatch(p, r) for p in ACKNOWLEDGED_PATTERNS)
        }
        assert unexpected == set()
    assert set(acknowledgements(full)) >= ACKNOWLEDGED


@pytest.mark.slow
def test_cfn_lint_finds_no_errors(full, local, options):
    done = subprocess.run(
        [
            str(CDK_VENV / "bin" / "cfn-lint"),
            str(full.template_path),
            str(local.template_path),
            str(options.template_path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    # cfn-lint's exit code is a bit field: 2 = errors, 4 = warnings, 8 = informational.
    assert done.returncode & 2 == 0 and done.returncode < 16, done.stdout + done.stderr


# ── the worker image ─────────────────────────────────────────────────────────────────────────
def test_the_image_asset_holds_only_what_the_dockerfile_needs(full):
    [image] = full.json(f"{full.template_path.stem.split('.')[0]}.assets.json")["dockerImages"].values()
    assert image["source"]["dockerFile"] == "Dockerfile"
    staged = full.directory / image["source"]["directory"]
    names = {p.relative_to(staged).as_posix() for p in staged.rglob("*")}
    assert {"Dockerfile", "pyproject.toml", "README.md", "sqsjobs/__init__.py", "examples/shop.py"} <= names
    assert not {n for n in names if n.startswith((".venv", ".git", "tests", "infra", "bench", "cdk.out"))}
    # The vendored API docs' bundles (swagger-ui, redoc: 3 MB) and the package's sources (2.3 MB): a
    # stray virtualenv or cdk.out would be hundreds of MB.
    assert sum(p.stat().st_size for p in staged.rglob("*") if p.is_file()) < 6 * 1024 * 1024


def test_the_dockerfile_runs_sqsjobs_worker_as_non_root_with_signals_reaching_python():
    lines = [ln.strip() for ln in (REPO_ROOT / "Dockerfile").read_text().splitlines()]
    final = lines[max(i for i, ln in enumerate(lines) if ln.startswith("FROM ")) :]
    user = [ln.split()[1] for ln in final if ln.startswith("USER ")]
    assert user and user[-1] not in ("root", "0")
    [entrypoint] = [ln for ln in final if ln.startswith("ENTRYPOINT ")]
    # Exec form (a JSON array), so `sqsjobs` gets SIGTERM itself; shell form would put sh in between.
    assert json.loads(entrypoint.removeprefix("ENTRYPOINT ")) == ["sqsjobs"]
    [cmd] = [ln for ln in final if ln.startswith("CMD ")]
    assert json.loads(cmd.removeprefix("CMD ")) == ["worker"]
    assert not any(ln.startswith("SHELL ") for ln in final)
    assert (REPO_ROOT / ".dockerignore").read_text().splitlines()[2] == "*"
