"""``SqsJobs``: everything one sqsjobs App needs in AWS, derived from the App itself.

Add it to your own CDK stack::

    from examples.shop import app as shop
    from sqsjobs_cdk import FargateWorker, SqsJobs

    SqsJobs(stack, "Jobs", app=shop, fargate=FargateWorker(image=ecs.ContainerImage.from_asset(repo)))

Derived, never restated: table keys and indexes (``table_definition``), TTL attribute, queue and
DLQ names (``Settings``), the redrive count (``provision.redrive_count``), the visibility timeout,
the ECS stop timeout (``deployment.stop_timeout_s``), the payload bucket's lifecycle and key
prefixes (``sqsjobs.transport.objects``) and every IAM action list (``sqsjobs.deploy.rules``). What
``sqsjobs provision`` creates on an emulator is what this creates in AWS.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from aws_cdk import CfnOutput
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_sns as sns
from constructs import Construct

from sqsjobs import App
from sqsjobs.deploy.provision import redrive_count
from sqsjobs.deploy.rules import (
    API_ACTIONS,
    PRODUCER_ACTIONS,
    SWEEPER_ACTIONS,
    WORKER_ACTIONS,
    check_lambda_timeout,
    check_lambda_visibility,
    lambda_timeout_s,
    queues_of,
    runtime_environment,
    stop_timeout_s,
)
from sqsjobs.errors import ConfigurationError
from sqsjobs.remote.lease import LEASE_KEY_SECRET_ENV
from sqsjobs.store.schema import TTL_ATTRIBUTE, table_definition
from sqsjobs.transport.objects import ARCHIVE

from . import fargate as fg
from .api import grant_metric_reads
from .api import http_api as build_http_api
from .archive_relay import ArchiveRelay
from .bucket import object_arns, payload_arns
from .bucket import payload_bucket as build_payload_bucket
from .encryption import grant_encryption
from .iam import allow
from .job_alarms import job_alarms_and_widgets
from .job_events import JobEvents, JobEventsRelay
from .lambda_worker import lambda_sweeper as build_lambda_sweeper
from .lambda_worker import lambda_worker as build_lambda_worker
from .monitoring import alarms_and_dashboard
from .nag import acknowledge, wildcard_resource_finding
from .options import FargateWorker, HttpApi, LambdaWorker, Monitoring, Sweeper
from .outbox_alarm import outbox_dead_alarm, outbox_lag_alarm
from .queues import job_queues
from .scheduler import (
    grant_pass_role,
    runtime_schedule_arns,
    runtime_schedule_group,
    schedule_group,
    scheduler_role,
)
from .sources import add_rule_target, rule_input, subscribe, target_queue
from .table import index_names, jobs_table
from .tracing import Tracing, trace_deployment

if TYPE_CHECKING:
    from collections.abc import Sequence

    from aws_cdk import aws_apigatewayv2 as apigwv2
    from aws_cdk import aws_ecs as ecs
    from aws_cdk import aws_lambda as lambda_
    from aws_cdk import aws_s3 as s3
    from aws_cdk import aws_sns_subscriptions as subscriptions

#: The one producer action a DLQ needs: the App resolves a queue's DLQ URL with its own.
_RESOLVE_URL = "sqs:GetQueueUrl"
_DEFAULT_SWEEPER = Sweeper()
_DEFAULT_MONITORING = Monitoring()


class SqsJobs(Construct):
    """Table, queues + DLQs, payload bucket, workers (ECS and/or Lambda), sweeper, Scheduler group, alarms."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        app: App | str,
        app_path: str | None = None,
        queues: Sequence[str] = (),
        fargate: FargateWorker | None = None,
        lambda_worker: LambdaWorker | None = None,
        sweeper: Sweeper | None = _DEFAULT_SWEEPER,
        monitoring: Monitoring = _DEFAULT_MONITORING,
        vpc: ec2.IVpc | None = None,
        alarm_topic: sns.ITopic | None = None,
        payload_bucket: s3.IBucket | None = None,
        api: HttpApi | None = None,
        tracing: Tracing | None = None,
        job_events: JobEvents | None = None,
    ) -> None:
        """Build the deployment of ``app``.

        Args:
            scope: Parent construct (usually your Stack).
            construct_id: Construct id.
            app: The App, or its dotted path (``shop.jobs:app``).
            app_path: How deployed processes import the App (``SQSJOBS_APP``); found in
                ``sys.modules`` when ``app`` is an object.
            queues: Logical queues beyond those the App's handlers name.
            fargate: The ECS worker service; None for none.
            lambda_worker: The Lambda worker; None for none (e.g. no deployment package built).
            sweeper: The scheduled sweeper: a Fargate task with ``fargate``, else a Lambda function
                from the ``lambda_worker``'s package; None for none (then run ``sqsjobs sweep``
                elsewhere: without a sweeper, lost hints and held jobs are never dispatched).
            monitoring: Alarm thresholds and log retention.
            vpc: Where the Fargate tasks run; a new two-AZ VPC when None.
            alarm_topic: Where alarms go; a new topic when None.
            payload_bucket: An existing bucket for large payloads and results (its lifecycle is
                then yours to set: ``sqsjobs.transport.objects.lifecycle``); a new one when None.
            api: The HTTP API (``sqsjobs.api``) as a function behind an IAM-authorised API Gateway
                HTTP API, from the ``lambda_worker``'s zip unless it names its own; None for none.
            tracing: Send the workers' and the API's OpenTelemetry traces to X-Ray (``Tracing``:
                Lambda active tracing and the ADOT layer, a collector beside the ECS worker); None: no traces.
            job_events: Publish job events on a bus from the table's change stream, with a
                function from the ``lambda_worker``'s zip (``job_events.py``); None for none.
        """
        super().__init__(scope, construct_id)
        if isinstance(app, str):
            app_path, app = app, App.from_path(app)
        self.app = app
        self.app_path = app_path or _find_app_path(app)
        self._rules = 0  # rules made by enqueue_from_rule, for their construct ids
        settings = app.settings
        self._app = app
        if fargate is None and lambda_worker is None:
            raise ConfigurationError(
                "nothing would run the jobs: pass fargate=..., lambda_worker=... or both"
            )

        names = queues_of(app.registry, queues)
        # External types' queues are leased by HTTP workers through the API (docs/http-workers.md):
        # neither worker consumes them.
        external = app.registry.external_queues()
        consumed = [n for n in names if n not in external]
        lambda_queues: list[str] = []
        if lambda_worker is not None:
            lambda_queues = _pick(lambda_worker.queues or consumed, names, "lambda_worker", external)
        fargate_queues: list[str] = []
        if fargate is not None:
            fargate_queues = _pick(
                fargate.queues or [n for n in consumed if n not in lambda_queues], names, "fargate", external
            )
            if not fargate_queues:
                raise ConfigurationError(
                    "every queue goes to the Lambda worker; name fargate.queues explicitly"
                )
        function_timeout_s = 0
        if lambda_worker is not None:
            function_timeout_s = lambda_worker.timeout_s or lambda_timeout_s(app.registry, lambda_queues)
            check_lambda_timeout(app.registry, lambda_queues, function_timeout_s)
            for name in lambda_queues:
                check_lambda_visibility(
                    name,
                    visibility_timeout_s=settings.visibility_timeout_s,
                    function_timeout_s=function_timeout_s,
                )

        # ── state: table, queues and payload bucket ────────────────────────────────────────
        definition = table_definition(settings.table_name)
        self.table = jobs_table(self, "Table", definition, ttl_attribute=TTL_ATTRIBUTE)
        table_arns = [self.table.table_arn]
        index_arns = [f"{self.table.table_arn}/index/{name}" for name in index_names(definition)]
        self.queues = job_queues(
            self, settings, names, max_receive_count=redrive_count(settings, app.registry)
        )
        queue_arns = [arn for jq in self.queues.values() for arn in jq.arns]
        self.payload_bucket = bucket = build_payload_bucket(
            self, "PayloadBucket", settings, existing=payload_bucket
        )
        bucket_arns = object_arns(bucket)
        # The bucket's real name (CloudFormation may have generated it), not the settings' default.
        environment = {
            **runtime_environment(settings, self.app_path),
            "SQSJOBS_PAYLOAD_BUCKET": bucket.bucket_name,
        }

        # ── workers ────────────────────────────────────────────────────────────────────────
        retention = _retention(monitoring.log_retention_days)
        worker_logs: list[logs.ILogGroup] = []
        self.service: ecs.FargateService | None = None
        self.function: lambda_.Function | None = None
        if fargate is not None:
            self.vpc = vpc or fg.network(self, retention)
            self.cluster = fg.cluster(self, self.vpc)
            security_group = ec2.SecurityGroup(
                self, "TasksSecurityGroup", vpc=self.vpc, description="sqsjobs tasks: outbound only"
            )
            worker_role = _task_role(self, "WorkerTaskRole", "sqsjobs ECS worker")
            allow(
                worker_role,
                WORKER_ACTIONS,  # the Lambda worker's: the same state machine, plus its registry item
                table_arns=table_arns,
                queue_arns=queue_arns,
                object_arns=bucket_arns,
            )
            grant_encryption(self, worker_role, app, self.table.table_arn)
            worker_log = logs.LogGroup(self, "WorkerLogs", retention=retention)
            worker_logs.append(worker_log)
            self.service = fg.worker_service(
                self,
                cluster=self.cluster,
                options=fargate,
                environment=environment,
                task_role=worker_role,
                log_group=worker_log,
                stop_timeout_s=stop_timeout_s(settings.drain_timeout_s),
                queues=[q for n in fargate_queues for _, q in self.queues[n].consumed],
                security_group=security_group,
            )
            if sweeper is not None:
                sweeper_role = _task_role(self, "SweeperTaskRole", "sqsjobs sweeper")
                allow(
                    sweeper_role,
                    SWEEPER_ACTIONS,
                    table_arns=[*table_arns, *index_arns],
                    queue_arns=queue_arns,
                    object_arns=bucket_arns,
                )
                grant_metric_reads(sweeper_role)  # the slow-run baselines: the workers' JobRunTime
                self.sweeper_schedule = fg.sweeper_task(
                    self,
                    cluster=self.cluster,
                    image=fargate.image,
                    options=sweeper,
                    environment=environment,
                    task_role=sweeper_role,
                    log_group=_sweeper_logs(self, retention, worker_logs),
                    security_group=security_group,
                    architecture=fargate.cpu_architecture,
                )
        if lambda_worker is not None:
            function_log = logs.LogGroup(self, "LambdaWorkerLogs", retention=retention)
            worker_logs.append(function_log)
            self.function = function = build_lambda_worker(
                self,
                options=lambda_worker,
                timeout_s=function_timeout_s,
                environment=environment,
                queues=[pair for n in lambda_queues for pair in self.queues[n].consumed],
                log_group=function_log,
            )
            assert function.role is not None
            allow(
                function.role,
                WORKER_ACTIONS,
                table_arns=table_arns,
                queue_arns=queue_arns,
                object_arns=bucket_arns,
            )
            grant_encryption(self, function.role, app, self.table.table_arn)
            if sweeper is not None and fargate is None:
                swept = build_lambda_sweeper(
                    self,
                    options=lambda_worker,
                    sweeper=sweeper,
                    environment=environment,
                    log_group=_sweeper_logs(self, retention, worker_logs),
                )
                assert swept.role is not None
                allow(
                    swept.role,
                    SWEEPER_ACTIONS,
                    table_arns=[*table_arns, *index_arns],
                    queue_arns=queue_arns,
                    object_arns=bucket_arns,
                )
                grant_metric_reads(swept.role)  # the slow-run baselines: the workers' JobRunTime

        # ── the HTTP API ───────────────────────────────────────────────────────────────────
        self.api_function: lambda_.Function | None = None
        self.http_api: apigwv2.HttpApi | None = None
        if api is not None:
            code_path = api.code_path or (lambda_worker.code_path if lambda_worker else None)
            if code_path is None:
                raise ConfigurationError(
                    "api=HttpApi(...) needs a deployment zip: give it code_path=, or a lambda_worker"
                )
            self.api_function, self.http_api = build_http_api(
                self,
                options=api,
                code_path=code_path,
                environment=environment,
                log_group=logs.LogGroup(self, "ApiLogs", retention=retention),
                access_log_group=logs.LogGroup(self, "ApiAccessLogs", retention=retention),
            )
            assert self.api_function.role is not None
            # The key HTTP workers' leases are signed with: one secret every API instance reads at
            # its start, so a lease one instance issued is honoured by the next (docs/http-workers.md).
            self.lease_key = secretsmanager.Secret(
                self,
                "LeaseKey",
                description="sqsjobs: the key HTTP workers' leases are signed with",
                generate_secret_string=secretsmanager.SecretStringGenerator(
                    password_length=64, exclude_punctuation=True
                ),
            )
            acknowledge(
                self.lease_key,
                "AwsSolutions-SMG4",
                "Rotating the lease key ends every open lease (409); their jobs come back when their "
                "leases run out. Rotate it by hand at a quiet time instead.",
            )
            self.api_function.add_environment(LEASE_KEY_SECRET_ENV, self.lease_key.secret_arn)
            allow(
                self.api_function.role,
                API_ACTIONS,
                table_arns=[*table_arns, *index_arns],
                queue_arns=queue_arns,
                object_arns=bucket_arns,
                secret_arns=[self.lease_key.secret_arn],
                schedule_arns=(schedule_arns := runtime_schedule_arns(self, settings.runtime_schedule_group)),
            )
            acknowledge(
                self.api_function.role,
                wildcard_resource_finding(self, schedule_arns[-1]),
                "The schedules of the runtime group only (schedule/<group>/*): the API creates, changes and "
                "deletes schedules an application names at runtime, whose names it cannot know in advance.",
            )
            grant_metric_reads(self.api_function.role)
            grant_encryption(self, self.api_function.role, app, self.table.table_arn)
            CfnOutput(self, "ApiUrl", value=self.http_api.api_endpoint, description="the HTTP API (IAM)")

        if tracing is not None:  # after every function and the worker service exist
            trace_deployment(self, tracing, service_name=app.name, service=self.service)

        # ── schedules ──────────────────────────────────────────────────────────────────────
        self.schedule_group = schedule_group(self, settings.schedule_group)
        self.runtime_schedule_group = runtime_schedule_group(self, settings.runtime_schedule_group)
        self.scheduler_role = scheduler_role(self, queue_arns)
        if self.api_function is not None:  # the API makes runtime schedules naming this role
            assert self.api_function.role is not None
            grant_pass_role(self.api_function.role, self.scheduler_role)
            self.api_function.add_environment("SQSJOBS_SCHEDULER_ROLE_ARN", self.scheduler_role.role_arn)

        # ── monitoring ─────────────────────────────────────────────────────────────────────
        if alarm_topic is None:
            alarm_topic = sns.Topic(
                self, "Alarms", display_name=f"sqsjobs {app.name} alarms", enforce_ssl=True
            )
            acknowledge(
                alarm_topic,
                "AwsSolutions-SNS2",
                "Alarm notifications carry alarm names only, no job data; CloudWatch cannot publish to a "
                "topic encrypted with the AWS-managed SNS key. Pass alarm_topic= to use a topic with your own CMK.",
            )
        self.alarm_topic = alarm_topic
        self.alarms, self.dashboard = alarms_and_dashboard(
            self,
            app_name=app.name,
            options=monitoring,
            topic=alarm_topic,
            queues=self.queues,
            worker_logs=worker_logs,
            service=self.service,
            function=self.function,
        )

        self.alarms += job_alarms_and_widgets(
            self,
            app_name=app.name,
            registry=app.registry,
            options=monitoring,
            topic=alarm_topic,
            worker_logs=worker_logs,
            dashboard=self.dashboard,
        )
        if monitoring.outbox_max_lag_s is not None:
            self.alarms.append(
                outbox_lag_alarm(
                    self, app_name=app.name, topic=alarm_topic, max_lag_s=monitoring.outbox_max_lag_s
                )
            )
            self.alarms.append(outbox_dead_alarm(self, app_name=app.name, topic=alarm_topic))

        # ── job events (docs/events.md) ────────────────────────────────────────────────────
        self.job_events: JobEventsRelay | None = None
        if job_events is not None:
            if lambda_worker is None:
                raise ConfigurationError(
                    "job_events=JobEvents(...) runs from the lambda_worker's zip: give one"
                )
            self.job_events = JobEventsRelay(
                self,
                "JobEvents",
                app_name=app.name,
                options=job_events,
                table=self.table,
                code=lambda_worker,
                environment=environment,
                log_group=logs.LogGroup(self, "JobEventsLogs", retention=retention),
            )
            CfnOutput(
                self,
                "EventBusName",
                value=self.job_events.bus.event_bus_name,
                description="SQSJOBS_EVENT_BUS",
            )

        # ── the archive (docs/archive.md) ─────────────────────────────────────────────────────
        self.archive: ArchiveRelay | None = None
        if settings.archive_days > 0:
            if lambda_worker is None:
                raise ConfigurationError(
                    "archive_days archives from the table's change stream with a function from the "
                    "lambda_worker's zip: give one"
                )
            self.archive = ArchiveRelay(
                self,
                "Archive",
                app_name=app.name,
                table=self.table,
                bucket=bucket,
                code=lambda_worker,
                environment=environment,
                log_group=logs.LogGroup(self, "ArchiveLogs", retention=retention),
            )
            if self.api_function is not None and self.api_function.role is not None:  # jobs get, archived
                self.api_function.role.add_to_principal_policy(
                    iam.PolicyStatement(
                        actions=["s3:GetObject"], resources=[bucket.arn_for_objects(f"{ARCHIVE}*")]
                    )
                )

        # ── outputs: what the CLI and the scheduler helper read ────────────────────────────
        CfnOutput(self, "TableName", value=self.table.table_name, description="SQSJOBS_TABLE")
        CfnOutput(
            self,
            "PayloadBucketName",
            value=bucket.bucket_name,
            description="SQSJOBS_PAYLOAD_BUCKET",
        )
        CfnOutput(
            self,
            "SchedulerRoleArn",
            value=self.scheduler_role.role_arn,
            description="SQSJOBS_SCHEDULER_ROLE_ARN",
        )
        CfnOutput(
            self, "ScheduleGroupName", value=settings.schedule_group, description="SQSJOBS_SCHEDULE_GROUP"
        )
        CfnOutput(self, "AlarmTopicArn", value=alarm_topic.topic_arn)
        for name, jq in self.queues.items():
            CfnOutput(self, f"QueueUrl-{name}", value=jq.queue.queue_url, description=f"queue {name}")
            CfnOutput(self, f"DlqUrl-{name}", value=jq.dlq.queue_url, description=f"DLQ of queue {name}")

    def grant_enqueue(self, grantee: iam.IGrantable) -> None:
        """Let ``grantee`` (a producer service's role, function, task definition...) enqueue jobs.

        ``sqsjobs.deploy.rules.PRODUCER_ACTIONS``, each on what an enqueue touches: send to the job
        queues, resolve their URLs and their DLQs' (the App resolves both), put records (one
        ``PutItem``, or ``enqueue_many``'s PartiQL INSERTs) in the table and clear the records a
        transactional enqueue sent (``UpdateItem``), and write payloads too
        large for a message under ``payloads/`` of the bucket. Reading jobs back (``App.get``) or
        cancelling them needs more; this grants enqueueing only. Give the producer's App the
        bucket's name too: ``SQSJOBS_PAYLOAD_BUCKET`` from the ``PayloadBucketName`` output.
        """
        principal = grantee.grant_principal
        sqs_actions = PRODUCER_ACTIONS["sqs"]
        allow(
            principal,
            {k: v for k, v in PRODUCER_ACTIONS.items() if k != "sqs"},
            table_arns=[self.table.table_arn],
            object_arns=payload_arns(self.payload_bucket),
        )
        allow(
            principal,
            {"sqs": [a for a in sqs_actions if a != _RESOLVE_URL]},
            queue_arns=[q.queue_arn for jq in self.queues.values() for _, q in jq.consumed],
        )
        allow(
            principal,
            {"sqs": [a for a in sqs_actions if a == _RESOLVE_URL]},
            queue_arns=[arn for jq in self.queues.values() for arn in jq.arns],
        )
        grant_encryption(self, principal, self._app, self.table.table_arn)  # it seals what it enqueues

    def enqueue_from_rule(
        self,
        rule: events.Rule | events.EventPattern,
        *,
        job_type: str,
        payload_path: str = "$.detail",
        idempotency_key_path: str | None = "$.id",
        tenant_path: str | None = None,
        delay_s: float | None = None,
        queue: str | None = None,
        event_bus: events.IEventBus | None = None,
    ) -> events.Rule:
        """Each event the rule matches enqueues one ``job_type`` job (docs/enqueue-from-aws.md).

        An input transformer builds ``{"sqsjobs": 1, "type", "payload": <payload_path>,
        "idempotency_key": <idempotency_key_path>, ...}``. The default key is the event's id, which
        EventBridge keeps when it delivers an event twice, so a repeated delivery is the same job.
        ``delay_s`` is fixed per rule (EventBridge cannot set DelaySeconds; the worker honours it).

        Args:
            rule: An existing rule, or an event pattern for a new rule on ``event_bus`` (default bus).
            job_type: A job type of the App (checked now).
            payload_path: JSONPath of the payload in the event.
            idempotency_key_path: JSONPath of the key (a string); None keys the job by the SQS message.
            tenant_path: JSONPath of the tenant (a string), if any.
            delay_s: Seconds after the event that the job may start.
            queue: The queue to send to; the job type's queue when None.
            event_bus: The bus of a rule made from a pattern.
        """
        job_queue = target_queue(self.app, self.queues, [job_type], queue)
        if not isinstance(rule, events.Rule):
            self._rules += 1
            rule = events.Rule(
                self,
                f"EnqueueRule{self._rules}",
                event_pattern=rule,
                event_bus=event_bus,
                description=f"enqueue {job_type} jobs ({self.app.name})",
            )
        message = rule_input(
            job_type,
            payload_path=payload_path,
            idempotency_key_path=idempotency_key_path,
            tenant_path=tenant_path,
            delay_s=delay_s,
        )
        add_rule_target(rule, job_queue, message)
        return rule

    def enqueue_from_topic(
        self, topic: sns.ITopic, *, job_types: str | Sequence[str], queue: str | None = None
    ) -> subscriptions.SqsSubscription:
        """Subscribe the queue of ``job_types`` to ``topic`` with raw message delivery.

        Raw delivery hands the queue the published message unchanged, so the publisher writes the
        whole job message: ``{"sqsjobs": 1, "type": ..., "payload": ..., "idempotency_key": ...}``
        (docs/enqueue-from-aws.md). SNS delivers at least once: publish a key. Anything else
        published to the topic reaches the DLQ with the reason.

        Args:
            topic: The topic whose messages are jobs.
            job_types: The job types published there (checked now; they choose the queue).
            queue: The queue to subscribe; the job types' one queue when None.
        """
        types = [job_types] if isinstance(job_types, str) else list(job_types)
        return subscribe(topic, target_queue(self.app, self.queues, types, queue))

    def grant_invoke_api(self, grantee: iam.IGrantable) -> None:
        """Let ``grantee`` call the HTTP API (``execute-api:Invoke`` on every route of its stage)."""
        if self.http_api is None:
            raise ConfigurationError("this SqsJobs has no HTTP API: pass api=HttpApi(...)")
        principal = grantee.grant_principal
        arn = self.http_api.arn_for_execute_api()  # <api id>/*/*/*: any method and path of its stage
        principal.add_to_principal_policy(
            iam.PolicyStatement(actions=["execute-api:Invoke"], resources=[arn])
        )
        if isinstance(principal, Construct):
            acknowledge(
                principal,
                wildcard_resource_finding(principal, arn),
                "The API is one catch-all route of one stage whose function checks each request; the "
                "statement names that API, and callers of it may call every route of it.",
            )


def _sweeper_logs(
    scope: Construct, retention: logs.RetentionDays, error_sources: list[logs.ILogGroup]
) -> logs.LogGroup:
    """The sweeper's log group; its ERROR lines count as worker errors too."""
    group = logs.LogGroup(scope, "SweeperLogs", retention=retention)
    error_sources.append(group)
    return group


def _task_role(scope: Construct, construct_id: str, description: str) -> iam.Role:
    return iam.Role(
        scope,
        construct_id,
        description=description,
        assumed_by=iam.ServicePrincipal("ecs-tasks.amazonaws.com"),
    )


def _pick(
    chosen: Sequence[str], names: Sequence[str], option: str, external: Sequence[str] = ()
) -> list[str]:
    unknown = sorted(set(chosen) - set(names))
    if unknown:
        raise ConfigurationError(
            f"{option}.queues names {unknown}, which the App does not have (it has {list(names)})"
        )
    if leased := sorted(set(chosen) & set(external)):
        raise ConfigurationError(
            f"{option}.queues names {leased}, which carry external job types: HTTP workers lease them "
            "through the API (docs/http-workers.md), no Python worker consumes them"
        )
    return list(chosen)


#: CloudWatch Logs accepts only these retentions (days -> the CDK enum's member).
_RETENTION = {
    1: "ONE_DAY",
    3: "THREE_DAYS",
    5: "FIVE_DAYS",
    7: "ONE_WEEK",
    14: "TWO_WEEKS",
    30: "ONE_MONTH",
    60: "TWO_MONTHS",
    90: "THREE_MONTHS",
    180: "SIX_MONTHS",
    365: "ONE_YEAR",
    731: "TWO_YEARS",
}


def _retention(days: int) -> logs.RetentionDays:
    if days in _RETENTION:
        return getattr(logs.RetentionDays, _RETENTION[days])  # type: ignore[no-any-return]
    raise ConfigurationError(
        f"log_retention_days must be one CloudWatch accepts (1, 3, 5, 7, 14, 30, ...), got {days}"
    )


def _find_app_path(app: App) -> str:
    """``module:attribute`` of an imported App object, for ``SQSJOBS_APP``."""
    for module_name, module in list(sys.modules.items()):
        if module_name == "__main__" or module is None:
            continue
        for attribute, value in list(vars(module).items()):
            if value is app:
                return f"{module_name}:{attribute}"
    raise ConfigurationError(
        f"cannot tell how to import App {app.name!r}: define it in an importable module or pass app_path="
    )
