"""Job events in AWS: the table's change stream, a Lambda that publishes on a bus, and two example rules.

docs/events.md says why the stream and not the worker. Here:

- the table gets a ``NEW_AND_OLD_IMAGES`` stream (``sqsjobs.events.setup.STREAM_VIEW``; set on the
  table's CloudFormation resource, so ``table.py`` keeps translating the store's definition alone);
- ``sqsjobs.events.stream_relay.handler`` (the Lambda worker's zip) reads it through an event source
  mapping filtered to the records that can be an event (a terminal job state, a completed batch, a
  chain that left ``running``), bisects a failing batch, and sends what still fails to an encrypted
  DLQ; it may only ``PutEvents`` on the bus and read the stream;
- ``notify``: a rule sends those event names to an SNS topic (encrypted with its own rotated key);
- ``webhook_url``: a rule sends them to an HTTPS endpoint through an API destination whose
  connection adds a secret header (the ``x-sqsjobs-signature`` API key, kept in Secrets Manager),
  with retries and a DLQ.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from aws_cdk import Duration
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as sources
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from sqsjobs.events.catalogue import ALL_EVENTS, SOURCE
from sqsjobs.events.setup import STREAM_VIEW
from sqsjobs.job import TERMINAL
from sqsjobs.ops.digest import DIGEST_ACTIONS, DIGEST_EVENT, DIGEST_HANDLER
from sqsjobs.store.schema import ATTENTION_INDEX

from .lambda_worker import _function
from .nag import acknowledge, wildcard_resource_finding

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from aws_cdk import aws_logs as logs

    from .options import LambdaWorker

#: The header the webhook's connection adds, its value the secret (an API key the endpoint checks).
SIGNATURE_HEADER = "x-sqsjobs-signature"
RELAY_HANDLER = "sqsjobs.events.stream_relay.handler"


@dataclass(frozen=True)
class JobEvents:
    """``SqsJobs(job_events=JobEvents(...))``: publish the App's job events (docs/events.md)."""

    #: The bus's name; ``<app>-events`` when empty (also the App's ``SQSJOBS_EVENT_BUS``).
    bus_name: str = ""
    #: Events the deployed App publishes (``SQSJOBS_EVENTS``): names or ``all``.
    events: str = "all"
    #: Event names an SNS topic gets (a new topic, encrypted); empty: no topic.
    notify: Sequence[str] = ("JobDead",)
    #: An HTTPS endpoint the ``notify`` events are sent to as well (API destination); None: none.
    webhook_url: str | None = None
    #: Records per invocation of the relay function.
    batch_size: int = 100
    #: When the dead-job digest is published (``sqsjobs digest --publish`` as a function, a
    #: ``DeadJobsDigest`` event on the bus); None: no schedule.
    digest_schedule: str | None = "cron(0 7 * * ? *)"


class JobEventsRelay(Construct):
    """The stream, the bus, the relay function and the example rules."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        app_name: str,
        options: JobEvents,
        table: dynamodb.Table,
        code: LambdaWorker,
        environment: Mapping[str, str],
        log_group: logs.ILogGroup,
    ) -> None:
        super().__init__(scope, construct_id)
        self._app_name = app_name
        unknown = {n for n in options.notify if n not in ALL_EVENTS | {DIGEST_EVENT}}
        if unknown:
            raise ValueError(f"JobEvents.notify names unknown events {sorted(unknown)}")
        cfn_table = table.node.default_child
        assert isinstance(cfn_table, dynamodb.CfnTable)
        cfn_table.stream_specification = dynamodb.CfnTable.StreamSpecificationProperty(
            stream_view_type=STREAM_VIEW
        )
        stream_arn = cfn_table.attr_stream_arn
        self.bus = events.EventBus(self, "Bus", event_bus_name=options.bus_name or f"{app_name}-events")
        self.function = _function(
            self,
            "Relay",
            options=code,
            handler=RELAY_HANDLER,
            timeout_s=60,
            memory_mib=256,
            environment={
                **environment,
                "SQSJOBS_EVENT_BUS": self.bus.event_bus_name,
                "SQSJOBS_EVENTS": options.events,
            },
            log_group=log_group,
            description="sqsjobs job events: the table's change stream to the event bus",
        )
        role = self.function.role
        assert role is not None
        self.bus.grant_put_events_to(role)
        # What a Lambda function reading a DynamoDB stream needs, as the DynamoDB developer guide lists it
        # ("IAM policy to allow an AWS Lambda function to access DynamoDB stream records"): GetRecords,
        # GetShardIterator, DescribeStream and ListStreams, on the table's streams. The three that
        # read take this stream's own ARN; ListStreams, as the guide shows it, the table's ``stream/*``.
        role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator"],
                resources=[stream_arn],
            )
        )
        streams = f"{table.table_arn}/stream/*"
        role.add_to_principal_policy(
            iam.PolicyStatement(actions=["dynamodb:ListStreams"], resources=[streams])
        )
        acknowledge(
            role,
            wildcard_resource_finding(self, streams),
            "dynamodb:ListStreams on this table's streams only (stream/* is how the DynamoDB developer "
            "guide grants it to a stream-reading function); no other table's stream is listed.",
        )
        self.failed = _dlq(self, "RelayDlq", f"{app_name}-events-relay-dlq")
        self.mapping = lambda_.EventSourceMapping(
            self,
            "Stream",
            target=self.function,
            event_source_arn=stream_arn,
            starting_position=lambda_.StartingPosition.TRIM_HORIZON,
            batch_size=options.batch_size,
            bisect_batch_on_error=True,
            retry_attempts=10,
            on_failure=sources.SqsDlq(self.failed),
            filters=[lambda_.FilterCriteria.filter(p) for p in _patterns()],
        )
        self.failed.grant_send_messages(role)
        self.topic: sns.Topic | None = None
        if options.notify:
            self._rules(options)
        self.digest: lambda_.Function | None = None
        if options.digest_schedule is not None:
            self._digest(options.digest_schedule, table, code, environment, log_group)

    def _digest(
        self,
        schedule: str,
        table: dynamodb.Table,
        code: LambdaWorker,
        environment: Mapping[str, str],
        log_group: logs.ILogGroup,
    ) -> None:
        """``sqsjobs.ops.digest.handler`` on ``schedule``: reads the dead jobs, publishes one event."""
        self.digest = _function(
            self,
            "Digest",
            options=code,
            handler=DIGEST_HANDLER,
            timeout_s=300,
            memory_mib=256,
            environment={**environment, "SQSJOBS_EVENT_BUS": self.bus.event_bus_name},
            log_group=log_group,
            description="sqsjobs dead-job digest (scheduled)",
        )
        role = self.digest.role
        assert role is not None
        reads = {
            "dynamodb:Query": [f"{table.table_arn}/index/{ATTENTION_INDEX}"],
            "dynamodb:BatchGetItem": [table.table_arn],
            "events:PutEvents": [self.bus.event_bus_arn],
        }
        assert set(reads) == set(DIGEST_ACTIONS)
        for action, resources in reads.items():
            role.add_to_principal_policy(iam.PolicyStatement(actions=[action], resources=resources))
        events.Rule(
            self,
            "DigestSchedule",
            description="sqsjobs dead-job digest",
            schedule=events.Schedule.expression(schedule),
            targets=[targets.LambdaFunction(self.digest, retry_attempts=2)],
        )

    def _rules(self, options: JobEvents) -> None:
        pattern = events.EventPattern(source=[SOURCE], detail_type=list(options.notify))
        key = kms.Key(self, "TopicKey", enable_key_rotation=True, description="sqsjobs job events topic")
        key.grant_encrypt_decrypt(iam.ServicePrincipal("events.amazonaws.com"))
        self.topic = sns.Topic(
            self, "Topic", master_key=key, enforce_ssl=True, display_name="sqsjobs job events"
        )
        rule_dlq = _dlq(self, "RuleDlq", f"{self._app_name}-events-rules-dlq")
        events.Rule(
            self,
            "ToTopic",
            event_bus=self.bus,
            event_pattern=pattern,
            description="sqsjobs job events to SNS",
            targets=[targets.SnsTopic(self.topic, dead_letter_queue=rule_dlq, retry_attempts=8)],
        )
        if options.webhook_url is None:
            return
        if not options.webhook_url.startswith("https://"):
            raise ValueError(f"JobEvents.webhook_url must be https://, got {options.webhook_url!r}")
        secret = secretsmanager.Secret(
            self,
            "WebhookSecret",
            description="the x-sqsjobs-signature header the job events webhook checks",
            generate_secret_string=secretsmanager.SecretStringGenerator(exclude_punctuation=True),
        )
        acknowledge(
            secret,
            "AwsSolutions-SMG4",
            "The webhook's shared secret is rotated with the endpoint that checks it, by its owner; an "
            "automatic rotation would break the endpoint until it learns the new value.",
        )
        connection = events.Connection(
            self,
            "WebhookConnection",
            description="sqsjobs job events webhook",
            authorization=events.Authorization.api_key(SIGNATURE_HEADER, secret.secret_value),
        )
        destination = events.ApiDestination(
            self,
            "Webhook",
            connection=connection,
            endpoint=options.webhook_url,
            http_method=events.HttpMethod.POST,
            rate_limit_per_second=10,
            description="sqsjobs job events webhook",
        )
        events.Rule(
            self,
            "ToWebhook",
            event_bus=self.bus,
            event_pattern=pattern,
            description="sqsjobs job events to the webhook",
            targets=[targets.ApiDestination(destination, dead_letter_queue=rule_dlq, retry_attempts=8)],
        )


def _patterns() -> list[dict[str, object]]:
    """The stream records the relay is invoked for: those ``events_of`` can turn into an event."""
    terminal = sorted(s.value for s in TERMINAL)
    return [
        {"dynamodb": {"NewImage": {"status": {"S": terminal}, "type": {"S": [{"exists": True}]}}}},
        {"dynamodb": {"NewImage": {"status": {"S": ["complete"]}, "id": {"S": [{"prefix": "batch#"}]}}}},
        {"dynamodb": {"NewImage": {"chain_state": {"S": [{"anything-but": ["running"]}]}}}},
    ]


def _dlq(scope: Construct, construct_id: str, name: str) -> sqs.Queue:
    queue = sqs.Queue(
        scope,
        construct_id,
        queue_name=name,
        encryption=sqs.QueueEncryption.SQS_MANAGED,
        enforce_ssl=True,
        retention_period=Duration.days(14),
    )
    acknowledge(
        queue,
        "AwsSolutions-SQS3",
        "This queue is itself a dead-letter queue: what the relay or a rule could not deliver.",
    )
    return queue
