"""Traces to X-Ray from the deployed workers (``SqsJobs(tracing=Tracing(...))``; docs/observability.md).

sqsjobs makes OpenTelemetry spans whenever its process has an SDK; this module gives each deployed
process one and a way out, and grants exactly what that way needs:

- **Lambda** (the worker, the Lambda sweeper, the HTTP API function): X-Ray active tracing (the
  invocation's segment, and the ``AWSTraceHeader`` link SQS gives it), the ADOT Python layer named by
  ``lambda_layer_arn`` with its wrapper (``AWS_LAMBDA_EXEC_WRAPPER=/opt/otel-instrument``), which
  installs the SDK before the handler module loads and exports to X-Ray.
- **ECS worker**: an ADOT collector sidecar that receives OTLP on the task's loopback and sends it to
  X-Ray's OTLP endpoint, signed with the task role (SigV4). The worker container gets the standard
  ``OTEL_*`` variables pointing at it; its image brings the SDK (``ecs_entry_point`` can run it
  under ``opentelemetry-instrument``).

IAM: ``xray:PutTraceSegments`` and ``xray:PutTelemetryRecords`` (what Lambda's active tracing and
the X-Ray endpoints take), on ``*``: X-Ray has no resource-level permissions for them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from aws_cdk import Aws
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs

from sqsjobs.errors import ConfigurationError

from .nag import acknowledge

if TYPE_CHECKING:
    from collections.abc import Sequence

    from constructs import Construct

#: The construct ids of the functions ``SqsJobs`` makes: the Lambda worker, the Lambda sweeper, the API's.
FUNCTIONS = ("LambdaWorker", "LambdaSweeper", "ApiFunction")
#: The X-Ray actions a traced process calls; neither takes a resource narrower than ``*``.
XRAY_ACTIONS = ("xray:PutTelemetryRecords", "xray:PutTraceSegments")
#: Where the ADOT layer's wrapper lives (``AWS_LAMBDA_EXEC_WRAPPER``).
ADOT_WRAPPER = "/opt/otel-instrument"
#: The collector's OTLP/HTTP port on the task's loopback (awsvpc: the containers share it).
OTLP_HTTP_PORT = 4318
#: The collector's configuration: OTLP in on loopback, batched, OTLP out to X-Ray, SigV4-signed.
#: X-Ray's OTLP endpoint takes W3C trace ids as they are (no X-Ray id generator) and needs
#: CloudWatch Transaction Search turned on in the account.
COLLECTOR_CONFIG = """\
extensions:
  sigv4auth:
    region: {region}
    service: xray
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:{port}
processors:
  batch: {{}}
exporters:
  otlphttp/xray:
    traces_endpoint: https://xray.{region}.amazonaws.com/v1/traces
    compression: gzip
    auth:
      authenticator: sigv4auth
service:
  extensions: [sigv4auth]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [otlphttp/xray]
"""


@dataclass(frozen=True)
class Tracing:
    """Send the workers' OpenTelemetry traces to X-Ray (Lambda: ADOT layer; ECS: an ADOT collector sidecar)."""

    #: The ADOT Python layer for the functions' region and architecture (AWS publishes its ARN per
    #: region, ``aws-otel-python-<arch>-ver-<version>``). None: active tracing only, and the zip
    #: brings its own SDK set-up.
    lambda_layer_arn: str | None = None
    #: The ECS worker's collector image; pin a released tag in production.
    collector_image: str = "public.ecr.aws/aws-observability/aws-otel-collector:latest"
    collector_cpu: int = 64
    collector_memory_mib: int = 128
    #: Run the worker under this entry point (e.g. ``("opentelemetry-instrument", "sqsjobs")`` for an
    #: image with ``aws-opentelemetry-distro``); None keeps the image's (its App then sets the SDK up).
    ecs_entry_point: Sequence[str] | None = None
    #: ``OTEL_SERVICE_NAME`` of every traced process; None: the App's name.
    service_name: str | None = None


def grant_xray(role: iam.IRole) -> None:
    """``XRAY_ACTIONS`` for ``role``, acknowledged to cdk-nag with the reason it is ``*``."""
    added = role.add_to_principal_policy(iam.PolicyStatement(actions=list(XRAY_ACTIONS), resources=["*"]))
    if not added.statement_added:
        raise ConfigurationError(f"cannot add the X-Ray actions to {role}: it is immutable")
    acknowledge(
        role,
        "AwsSolutions-IAM5[Resource::*]",
        "xray:PutTraceSegments and xray:PutTelemetryRecords accept no resource narrower than * "
        "(X-Ray has no resource-level permissions for them); the statement names only those two.",
    )


def trace_function(function: lambda_.Function, tracing: Tracing, service_name: str) -> None:
    """Active tracing, the ADOT layer and its wrapper on ``function``, and the X-Ray actions for its role."""
    cfn = function.node.default_child
    assert isinstance(cfn, lambda_.CfnFunction)
    cfn.tracing_config = lambda_.CfnFunction.TracingConfigProperty(mode="Active")
    if tracing.lambda_layer_arn:
        function.add_layers(
            lambda_.LayerVersion.from_layer_version_arn(function, "AdotLayer", tracing.lambda_layer_arn)
        )
        function.add_environment("AWS_LAMBDA_EXEC_WRAPPER", ADOT_WRAPPER)
    function.add_environment("OTEL_SERVICE_NAME", service_name)
    assert function.role is not None
    grant_xray(function.role)


def collector_sidecar(
    scope: Construct,
    task: ecs.FargateTaskDefinition,
    worker: ecs.ContainerDefinition,
    *,
    tracing: Tracing,
    service_name: str,
    log_group: logs.ILogGroup,
) -> ecs.ContainerDefinition:
    """The ADOT collector beside ``worker`` in ``task``, the worker pointed at it, the task role granted."""
    collector = task.add_container(
        "otel-collector",
        image=ecs.ContainerImage.from_registry(tracing.collector_image),
        cpu=tracing.collector_cpu,
        memory_limit_mib=tracing.collector_memory_mib,
        # A collector that stops must not stop the jobs: traces are lost, work is not.
        essential=False,
        readonly_root_filesystem=True,
        environment={"AOT_CONFIG_CONTENT": COLLECTOR_CONFIG.format(region=Aws.REGION, port=OTLP_HTTP_PORT)},
        logging=ecs.LogDrivers.aws_logs(stream_prefix="otel-collector", log_group=log_group),
    )
    # Started first and stopped last: the worker's last spans (its drain) still reach it.
    worker.add_container_dependencies(
        ecs.ContainerDependency(container=collector, condition=ecs.ContainerDependencyCondition.START)
    )
    for name, value in {
        "OTEL_SERVICE_NAME": service_name,
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_METRICS_EXPORTER": "none",
        "OTEL_LOGS_EXPORTER": "none",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{OTLP_HTTP_PORT}",
    }.items():
        worker.add_environment(name, value)
    if tracing.ecs_entry_point:
        # The L2 container takes its entry point only when made; the worker is the task's first container.
        cfn = task.node.default_child
        assert isinstance(cfn, ecs.CfnTaskDefinition)
        cfn.add_property_override("ContainerDefinitions.0.EntryPoint", list(tracing.ecs_entry_point))
    grant_xray(task.task_role)
    return collector


def trace_deployment(
    jobs: Construct, tracing: Tracing, *, service_name: str, service: ecs.FargateService | None
) -> None:
    """Trace every function ``jobs`` (an ``SqsJobs``) made and its ECS worker service (not the sweeper task)."""
    name = tracing.service_name or service_name
    for construct_id in FUNCTIONS:
        function = jobs.node.try_find_child(construct_id)
        if isinstance(function, lambda_.Function):
            trace_function(function, tracing, name)
    if service is not None:
        task = service.task_definition
        worker = task.default_container
        log_group = jobs.node.try_find_child("WorkerLogs")
        assert isinstance(task, ecs.FargateTaskDefinition) and worker is not None
        assert isinstance(log_group, logs.LogGroup)
        collector_sidecar(jobs, task, worker, tracing=tracing, service_name=name, log_group=log_group)
