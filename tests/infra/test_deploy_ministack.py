"""The synthesized (local) template deployed through MiniStack's CloudFormation, and a job run by it.

The closest thing to ``cdk deploy`` this machine can do (EMULATORS.md "CloudFormation"): stand in
for ``cdk bootstrap`` and asset publishing (the SSM version parameter, the assets bucket, the
Lambda zip uploaded under its hash), create the stack from the template as synthesized, then:
``sqsjobs provision`` finds nothing to create (infra and provision agree), and a job enqueued by
the App is run by the deployed Lambda worker through its event source mapping, one of them with
a payload and a result large enough to go through the payload bucket CloudFormation named. The
local variant has no VPC, ECS or autoscaling (MiniStack rejects the latter and only records the
former).
"""

from __future__ import annotations

import json
import time

import boto3
import pytest

from examples.shop import app as shop
from sqsjobs import App, JobStatus
from sqsjobs.deploy.packaging import HANDLER
from sqsjobs.store.schema import HELD, PENDING
from sqsjobs.transport import objects
from sqsjobs.transport.sqs import MAX_DELAY_S
from tests.emulators import MiniStack
from tests.infra.conftest import STACK

BOOTSTRAP_VERSION_PARAMETER = "/cdk-bootstrap/hnb659fds/version"
DEPLOY_TIMEOUT_S = 60
JOB_TIMEOUT_S = 60
#: Payloads over this go to S3 (the producer's setting); the deployed worker's result limit is the
#: default ``inline_result_bytes`` (8 KiB), so a receipt sent to a longer address goes there too.
INLINE_PAYLOAD_BYTES = 4096
LONG_EMAIL = "a" * 20_000 + "@example.com"


@pytest.fixture
def ministack():
    server = MiniStack()
    server.start()
    try:
        yield server
    finally:
        server.stop()


def publish_assets(aws: dict, local) -> None:
    """What ``cdk deploy`` does before the stack: bootstrap version, assets bucket, file assets."""
    boto3.client("ssm", **aws).put_parameter(
        Name=BOOTSTRAP_VERSION_PARAMETER, Value="30", Type="String", Overwrite=True
    )
    s3 = boto3.client("s3", **aws)
    manifest = local.json(f"{STACK}.assets.json")
    assert not manifest.get("dockerImages"), "the local variant must not need an image"
    for asset in manifest["files"].values():
        body = (local.directory / asset["source"]["path"]).read_bytes()
        for destination in asset["destinations"].values():
            bucket = destination["bucketName"].replace("${AWS::AccountId}", "000000000000")
            bucket = bucket.replace("${AWS::Region}", aws["region_name"])
            if bucket not in {b["Name"] for b in s3.list_buckets()["Buckets"]}:
                s3.create_bucket(Bucket=bucket)
            s3.put_object(Bucket=bucket, Key=destination["objectKey"], Body=body)


def redrive(attributes: dict[str, str]) -> tuple[str, int]:
    """(DLQ ARN, maxReceiveCount): AWS returns the count as a number whatever was sent; MiniStack
    echoes what it was given (a number from CloudFormation, a string from provision)."""
    policy = json.loads(attributes["RedrivePolicy"])
    return policy["deadLetterTargetArn"], int(policy["maxReceiveCount"])


def attention_kind(ddb, app: App, job_id: str) -> str:
    """The kind of the record's ``attention`` entry: ``held`` while no SQS message carries it yet."""
    item = ddb.get_item(TableName=app.settings.table_name, Key={"id": {"S": job_id}}, ConsistentRead=True)
    return str(item["Item"]["attn"]["S"]).split("#")[0]


def test_the_local_template_deploys_and_its_lambda_worker_runs_a_job(local, ministack, monkeypatch):
    url = ministack.endpoint_url
    aws = {"endpoint_url": url, "region_name": "us-east-1"}
    cfn = boto3.client("cloudformation", **aws)
    # GIVEN the assets published and the stack created from the synthesized template
    publish_assets(aws, local)
    # Sent compact: CloudFormation takes a TemplateBody of at most 51,200 bytes, which the indented
    # template passes with an alarm pair per job type (`cdk deploy` sends a template over 50 KiB
    # through the assets bucket instead); whitespace is all the two forms differ in.
    body = json.dumps(json.loads(local.template_path.read_text()), separators=(",", ":"))
    assert len(body.encode()) <= 51_200, len(body.encode())
    cfn.create_stack(
        StackName=STACK,
        TemplateBody=body,
        Capabilities=["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM"],
    )
    deadline = time.monotonic() + DEPLOY_TIMEOUT_S
    while (stack := cfn.describe_stacks(StackName=STACK)["Stacks"][0])["StackStatus"].endswith("IN_PROGRESS"):
        assert time.monotonic() < deadline, stack
        time.sleep(0.2)
    failed = [
        (e["LogicalResourceId"], e.get("ResourceStatusReason"))
        for e in cfn.describe_stack_events(StackName=STACK)["StackEvents"]
        if e["ResourceStatus"].endswith("FAILED")
    ]
    assert stack["StackStatus"] == "CREATE_COMPLETE", (stack.get("StackStatusReason"), failed)

    # ... a process configured exactly as the deployed function is (its environment as deployed:
    # CloudFormation resolved the payload bucket's name into it, the name the stack outputs)
    lam = boto3.client("lambda", **aws)
    functions = {f["Handler"]: f["FunctionName"] for f in lam.list_functions()["Functions"]}
    deployed = lam.get_function_configuration(FunctionName=functions[HANDLER])["Environment"]["Variables"]
    outputs = {o.get("Description"): o["OutputValue"] for o in stack["Outputs"]}
    bucket = outputs["SQSJOBS_PAYLOAD_BUCKET"]
    assert deployed["SQSJOBS_PAYLOAD_BUCKET"] == bucket != shop.settings.payload_bucket
    for name, value in deployed.items():
        if name.startswith("SQSJOBS_"):
            monkeypatch.setenv(name, value)
    app = App(shop.name, endpoint_url=url, receive_wait_s=1, inline_payload_bytes=INLINE_PAYLOAD_BYTES)
    app.registry.include(shop.registry)
    sqs = boto3.client("sqs", **aws)
    queue_url = sqs.get_queue_url(QueueName=app.settings.queue_name("default"))["QueueUrl"]
    before = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["All"])["Attributes"]
    ddb = boto3.client("dynamodb", **aws)
    s3 = boto3.client("s3", **aws)
    # ... the bucket private and TLS-only (MiniStack ignores LifecycleConfiguration and
    # BucketEncryption in a template: those are checked in test_template.py)
    block = s3.get_public_access_block(Bucket=bucket)["PublicAccessBlockConfiguration"]
    assert all(block.values()) and len(block) == 4
    [deny] = json.loads(s3.get_bucket_policy(Bucket=bucket)["Policy"])["Statement"]
    assert (deny["Effect"], deny["Condition"]) == ("Deny", {"Bool": {"aws:SecureTransport": "false"}})
    existing = (
        ddb.list_tables()["TableNames"],
        sorted(sqs.list_queues()["QueueUrls"]),
        sorted(b["Name"] for b in s3.list_buckets()["Buckets"]),
    )

    # WHEN `sqsjobs provision` runs against the deployed stack
    report = app.provision()
    # THEN it finds everything in place and changes nothing: infra and provision agree. (Its
    # `created` list is no witness: CreateQueue of an existing queue with the same attributes
    # succeeds, on AWS too, and provision counts that as created.)
    assert app.settings.table_name not in report.created
    assert report.bucket == bucket  # not a `<app>-payloads` bucket of its own
    assert (
        ddb.list_tables()["TableNames"],
        sorted(sqs.list_queues()["QueueUrls"]),
        sorted(b["Name"] for b in s3.list_buckets()["Buckets"]),
    ) == existing
    assert set(report.queue_urls.values()) | set(report.dlq_urls.values()) <= set(existing[1])
    after = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["All"])["Attributes"]
    assert after["VisibilityTimeout"] == before["VisibilityTimeout"]
    assert redrive(after) == redrive(before)

    # WHEN a job is enqueued
    job = app.enqueue("receipts.send", {"order_id": "o-7", "email": "a@example.com"})
    # THEN the deployed Lambda worker (CloudFormation's function + event source mapping) runs it
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while (record := app.get(job)).status is not JobStatus.SUCCEEDED:
        assert time.monotonic() < deadline, (
            f"{record.status} after {JOB_TIMEOUT_S} s:\n{ministack.log_tail(60)}"
        )
        time.sleep(0.3)
    assert record.result == {"sent_to": "a@example.com"}
    assert record.attempt == 1

    # WHEN a job's payload is too large for the message, and its result for the record
    large = app.enqueue("receipts.send", {"order_id": "o-8", "email": LONG_EMAIL})
    # THEN the producer wrote the payload to the deployed bucket, and the deployed worker read it
    # there and wrote the result beside it
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while (record := app.get(large)).status is not JobStatus.SUCCEEDED:
        assert time.monotonic() < deadline, (
            f"{record.status} after {JOB_TIMEOUT_S} s:\n{ministack.log_tail(60)}"
        )
        time.sleep(0.3)
    assert record.result == {"sent_to": LONG_EMAIL}
    assert record.result_ref is not None and record.result_ref.startswith(
        objects.ref(bucket, f"{objects.RESULTS}{large}/")
    )
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix=objects.PAYLOADS)["Contents"]] == [
        objects.parse_ref(str(record.payload_ref))[1]
    ]

    # WHEN a job is held beyond the SQS delay cap, and the deployed sweeper function runs once due
    held = app.enqueue("reminders.send", {"email": "a@example.com"}, delay=MAX_DELAY_S + 1)
    assert attention_kind(ddb, app, held) == HELD
    time.sleep(1.5)  # now due within the delay cap
    answer = lam.invoke(FunctionName=functions["sqsjobs.runtime.lambda_handlers.sweeper"], Payload=b"{}")
    # THEN it hands the job to SQS (its record is no longer held: pending until a claim takes it)
    assert "FunctionError" not in answer, answer["Payload"].read()
    assert json.loads(answer["Payload"].read())["dispatched_held"] == 1
    assert attention_kind(ddb, app, held) == PENDING
    app.close()
