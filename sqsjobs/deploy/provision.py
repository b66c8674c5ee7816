"""Create (or bring in line) the table, queues, DLQs and payload bucket an App needs; safe to run again.

Used by ``sqsjobs provision``, ``sqsjobs dev`` and the tests; infra/ creates the same resources
with CloudFormation for production.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import tenacity

from sqsjobs._aws import Call, Flow, retrying
from sqsjobs._client_config import region_of
from sqsjobs.config import MAX_MESSAGE_RETENTION_S
from sqsjobs.errors import ConfigurationError, ObjectStoreError, StoreError, TransportError
from sqsjobs.events import setup as events_setup
from sqsjobs.store import schema
from sqsjobs.transport import objects, routes, sqs

if TYPE_CHECKING:
    from sqsjobs.config import Settings
    from sqsjobs.registry import Registry

#: A new table takes seconds on AWS (emulators make it ACTIVE at once): look every second for up
#: to two minutes; then go on, and the next call says what is wrong.
_UNTIL_ACTIVE = tenacity.Retrying(
    stop=tenacity.stop_after_attempt(120),
    wait=tenacity.wait_fixed(1.0),
    retry=tenacity.retry_if_result(lambda active: not active),
    retry_error_callback=lambda state: False,
)


#: Every DLQ keeps its messages as long as SQS allows, so an operator has time to look (and a
#: standard DLQ counts a message's age from its first send to the source queue).
#: A DLQ keeps what its queue held as long as SQS allows, and takes messages as large.
_DLQ_RETENTION = {"MessageRetentionPeriod": str(MAX_MESSAGE_RETENTION_S)} | sqs.MESSAGE_SIZE


def _retention(settings: Settings) -> dict[str, str]:
    """Every queue a job's message travels in keeps it ``message_retention_s`` (14 days by default).

    Without it SQS keeps 4 days, and a retry span, a pause or a backlog longer than that would lose
    the message of a record that still says the job is on its way.
    """
    return {"MessageRetentionPeriod": str(settings.message_retention_s)}


@dataclass
class ProvisionReport:
    """What exists after provisioning."""

    table: str
    queue_urls: dict[str, str] = field(default_factory=dict)
    dlq_urls: dict[str, str] = field(default_factory=dict)
    #: The extra queues of priority levels and serialize keys, by route (``sqsjobs.transport.routes``).
    route_urls: dict[str, str] = field(default_factory=dict)
    max_receive_count: int = 0
    created: list[str] = field(default_factory=list)
    #: The claim-check bucket of large payloads and results.
    bucket: str = ""


def redrive_count(settings: Settings, registry: Registry) -> int:
    """MaxReceiveCount for the backstop: above every job type's max attempts.

    Lower, SQS would dead-letter a job that still has attempts left.
    """
    largest = registry.max_attempts()
    count = settings.max_receive_count or largest + settings.receive_slack
    if count <= largest:
        raise ConfigurationError(
            f"max_receive_count={count} must exceed the largest max_attempts ({largest}); otherwise SQS "
            "dead-letters jobs that still have attempts left"
        )
    return count


def provision_flow(
    settings: Settings, registry: Registry, queues: list[str] | None = None
) -> Flow[ProvisionReport]:
    """Create what is missing; update queue attributes that drifted."""
    report = ProvisionReport(table=settings.table_name, max_receive_count=redrive_count(settings, registry))
    try:
        yield Call("dynamodb", "create_table", schema.table_definition(settings.table_name))
        report.created.append(settings.table_name)
    except StoreError as exc:
        if exc.code != "ResourceInUseException":
            raise

    def active() -> Flow[bool]:
        described = yield Call("dynamodb", "describe_table", {"TableName": settings.table_name})
        return bool(described["Table"]["TableStatus"] == "ACTIVE")

    yield from retrying(active, _UNTIL_ACTIVE)
    try:
        yield Call(
            "dynamodb",
            "update_time_to_live",
            {
                "TableName": settings.table_name,
                "TimeToLiveSpecification": {"Enabled": True, "AttributeName": "expires_at"},
            },
        )
    except StoreError as exc:
        if "already enabled" not in str(exc) and exc.code != "ValidationException":
            raise
    report.created += yield from events_setup.ensure_flow(settings)  # the stream and bus of job events
    for queue in sorted(set(queues or []) | set(registry.queues()) or {"default"}):
        dlq = yield from _ensure_queue(settings.dlq_name(queue), _DLQ_RETENTION, report)
        attrs = yield Call("sqs", "get_queue_attributes", {"QueueUrl": dlq, "AttributeNames": ["QueueArn"]})
        main_attrs = sqs.queue_attributes(
            visibility_timeout_s=settings.visibility_timeout_s,
            dlq_arn=attrs["Attributes"]["QueueArn"],
            max_receive_count=report.max_receive_count,
        ) | _retention(settings)
        url = yield from _ensure_queue(settings.queue_name(queue), main_attrs, report)
        report.queue_urls[queue] = url
        report.dlq_urls[queue] = dlq
        yield from _ensure_routes(settings, queue, main_attrs, report)
    yield from _ensure_bucket(settings, report)
    return report


def _ensure_routes(
    settings: Settings, queue: str, attrs: dict[str, str], report: ProvisionReport
) -> Flow[None]:
    """The extra SQS queues of a queue with priority levels or serialize keys (``transport.routes``).

    Levels share the logical queue's DLQ; a FIFO queue's redrive backstop must be FIFO itself.
    """
    for key in routes.routes_of(settings, queue):
        level = routes.split(key)[1]
        if level == routes.NORMAL:
            continue
        level_attrs = attrs
        if level == routes.FIFO:
            fifo = {"FifoQueue": "true", **_DLQ_RETENTION}
            backstop = yield from _ensure_queue(routes.fifo_dlq_name(settings, queue), fifo, report)
            described = yield Call(
                "sqs", "get_queue_attributes", {"QueueUrl": backstop, "AttributeNames": ["QueueArn"]}
            )
            level_attrs = {
                "FifoQueue": "true",
                **sqs.queue_attributes(
                    visibility_timeout_s=settings.visibility_timeout_s,
                    dlq_arn=described["Attributes"]["QueueArn"],
                    max_receive_count=report.max_receive_count,
                ),
                **_retention(settings),
            }
        report.route_urls[key] = yield from _ensure_queue(
            routes.queue_name(settings, key), level_attrs, report
        )


def _ensure_bucket(settings: Settings, report: ProvisionReport) -> Flow[None]:
    """The claim-check bucket: private, encrypted at rest, its objects expiring (``objects.lifecycle``)."""
    bucket = settings.payload_bucket
    create: dict[str, object] = {"Bucket": bucket}
    region = region_of(settings)
    if region and region != "us-east-1":  # us-east-1 refuses a location constraint naming itself
        create["CreateBucketConfiguration"] = {"LocationConstraint": region}
    try:
        yield Call("s3", "create_bucket", create)
        report.created.append(bucket)
    except ObjectStoreError as exc:
        if exc.code != "BucketAlreadyOwnedByYou":
            raise ConfigurationError(
                f"cannot create the payload bucket {bucket!r} ({exc.code}); bucket names are global: "
                "set payload_bucket (SQSJOBS_PAYLOAD_BUCKET) to a name of your own"
            ) from exc
    block = dict.fromkeys(
        ("BlockPublicAcls", "IgnorePublicAcls", "BlockPublicPolicy", "RestrictPublicBuckets"), True
    )
    yield Call("s3", "put_public_access_block", {"Bucket": bucket, "PublicAccessBlockConfiguration": block})
    encryption = {"Rules": [{"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]}
    yield Call(
        "s3", "put_bucket_encryption", {"Bucket": bucket, "ServerSideEncryptionConfiguration": encryption}
    )
    yield Call("s3", "put_bucket_lifecycle_configuration", objects.lifecycle(settings))
    report.bucket = bucket


def _ensure_queue(name: str, attributes: dict[str, str], report: ProvisionReport) -> Flow[str]:
    try:
        response = yield Call("sqs", "create_queue", {"QueueName": name, "Attributes": attributes})
        report.created.append(name)
        return str(response["QueueUrl"])
    except TransportError as exc:
        if exc.code not in (
            "QueueAlreadyExists",
            "QueueNameExists",
            "AWS.SimpleQueueService.QueueNameExists",
        ):
            raise
    response = yield Call("sqs", "get_queue_url", {"QueueName": name})
    url = str(response["QueueUrl"])
    # FifoQueue is fixed at creation: SetQueueAttributes refuses it.
    changeable = {k: v for k, v in attributes.items() if k != "FifoQueue"}
    yield Call("sqs", "set_queue_attributes", {"QueueUrl": url, "Attributes": changeable})
    return url


def parse_redrive(attributes: dict[str, str]) -> dict[str, str]:
    """The RedrivePolicy attribute as a dict (empty when unset)."""
    raw = attributes.get("RedrivePolicy")
    return dict(json.loads(raw)) if raw else {}
