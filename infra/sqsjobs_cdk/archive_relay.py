"""The archive in AWS: a Lambda on the table's change stream writes finished records to S3 (docs/archive.md).

Built when the App archives (``archive_days`` > 0) and a ``lambda_worker`` zip is given: the table
gets its ``NEW_AND_OLD_IMAGES`` stream (the one the job events read: one stream serves both), and
``sqsjobs.archive.plugin.handler`` reads it through an event source mapping filtered to job records
in an end state; a failing batch is retried (bisected), and what still fails goes to an encrypted
DLQ. The function may read the stream, put objects under ``archive/`` and write the pointers
(``BatchWriteItem`` on the table): ``rules.ARCHIVE_ACTIONS``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as sources
from constructs import Construct

from sqsjobs.events.setup import STREAM_VIEW
from sqsjobs.job import TERMINAL
from sqsjobs.transport.objects import ARCHIVE

from .job_events import _dlq
from .lambda_worker import _function
from .nag import acknowledge, wildcard_resource_finding

if TYPE_CHECKING:
    from collections.abc import Mapping

    from aws_cdk import aws_logs as logs
    from aws_cdk import aws_s3 as s3

    from .options import LambdaWorker

ARCHIVE_HANDLER = "sqsjobs.archive.plugin.handler"


class ArchiveRelay(Construct):
    """The stream, the archiving function, its mapping and DLQ."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        app_name: str,
        table: dynamodb.Table,
        bucket: s3.IBucket,
        code: LambdaWorker,
        environment: Mapping[str, str],
        log_group: logs.ILogGroup,
        batch_size: int = 1000,
    ) -> None:
        super().__init__(scope, construct_id)
        cfn_table = table.node.default_child
        assert isinstance(cfn_table, dynamodb.CfnTable)
        cfn_table.stream_specification = dynamodb.CfnTable.StreamSpecificationProperty(
            stream_view_type=STREAM_VIEW
        )
        stream_arn = cfn_table.attr_stream_arn
        self.function = _function(
            self,
            "Archiver",
            options=code,
            handler=ARCHIVE_HANDLER,
            timeout_s=120,
            memory_mib=512,
            environment=dict(environment),
            log_group=log_group,
            description="sqsjobs archive: finished records from the change stream to S3",
        )
        role = self.function.role
        assert role is not None
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
        role.add_to_principal_policy(
            iam.PolicyStatement(actions=["dynamodb:BatchWriteItem"], resources=[table.table_arn])
        )
        archive_objects = bucket.arn_for_objects(f"{ARCHIVE}*")
        role.add_to_principal_policy(
            iam.PolicyStatement(actions=["s3:PutObject"], resources=[archive_objects])
        )
        acknowledge(
            role,
            wildcard_resource_finding(self, streams),
            "dynamodb:ListStreams on this table's streams only (stream/* is how the DynamoDB developer "
            "guide grants it to a stream-reading function); no other table's stream is listed.",
        )
        acknowledge(
            role,
            wildcard_resource_finding(self, archive_objects),
            "s3:PutObject under the archive/ prefix of the App's own bucket: the archiver writes one "
            "object per day, job type and stream page, whose keys it cannot know in advance.",
        )
        self.failed = _dlq(self, "ArchiveDlq", f"{app_name}-archive-dlq")
        terminal = sorted(s.value for s in TERMINAL)
        self.mapping = lambda_.EventSourceMapping(
            self,
            "Stream",
            target=self.function,
            event_source_arn=stream_arn,
            starting_position=lambda_.StartingPosition.TRIM_HORIZON,
            batch_size=batch_size,
            bisect_batch_on_error=True,
            retry_attempts=10,
            on_failure=sources.SqsDlq(self.failed),
            filters=[
                lambda_.FilterCriteria.filter(
                    {"dynamodb": {"NewImage": {"status": {"S": terminal}, "type": {"S": [{"exists": True}]}}}}
                )
            ],
        )
        self.failed.grant_send_messages(role)
