"""The ECS side: network, cluster, the worker service scaled on backlog per task, and the sweeper task.

The worker runs ``sqsjobs worker`` from the repo's Dockerfile. Its ``stopTimeout`` comes from
``sqsjobs.deploy.rules.stop_timeout_s`` (the drain deadline plus a margin), so ECS's SIGKILL always
comes after the worker has released what it could not finish (docs/operations.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aws_cdk import Duration, Stack
from aws_cdk import aws_applicationautoscaling as appscaling
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs

from sqsjobs.deploy.rules import TASK_PROTECTION_ACTIONS
from sqsjobs.errors import ConfigurationError
from sqsjobs.runtime.health_probe import live_check_command

from .nag import acknowledge, wildcard_resource_finding

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from aws_cdk import aws_sqs as sqs
    from constructs import Construct

    from .options import FargateWorker, Sweeper

#: The worker container's health check on ``/live``: a task is replaced after about 1.5 minutes
#: of a stalled event loop (3 failed checks 30 s apart, after the start period).
HEALTH_INTERVAL_S, HEALTH_TIMEOUT_S, HEALTH_RETRIES, HEALTH_START_PERIOD_S = 30, 5, 3, 60

#: Container Insights publishes the running task count the scaling metric divides by.
#: https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/Container-Insights-metrics-ECS.html
INSIGHTS_NAMESPACE = "ECS/ContainerInsights"
_PRIVATE = ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS)


def network(scope: Construct, log_retention: logs.RetentionDays) -> ec2.Vpc:
    """Two AZs, tasks in private subnets behind one NAT gateway, DynamoDB through a gateway endpoint.

    Rejected traffic is logged (flow logs). Pass your own ``vpc`` to ``SqsJobs`` to use an existing one.
    """
    flow_logs = logs.LogGroup(scope, "VpcFlowLogs", retention=log_retention)
    vpc = ec2.Vpc(
        scope,
        "Vpc",
        max_azs=2,
        nat_gateways=1,
        subnet_configuration=[
            ec2.SubnetConfiguration(name="public", subnet_type=ec2.SubnetType.PUBLIC, cidr_mask=24),
            ec2.SubnetConfiguration(
                name="tasks", subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS, cidr_mask=22
            ),
        ],
        flow_logs={
            "rejected": ec2.FlowLogOptions(
                destination=ec2.FlowLogDestination.to_cloud_watch_logs(flow_logs),
                traffic_type=ec2.FlowLogTrafficType.REJECT,
            )
        },
    )
    # Job records are the hot path: keep them off the NAT gateway (free, and no per-GB charge).
    vpc.add_gateway_endpoint("DynamoDb", service=ec2.GatewayVpcEndpointAwsService.DYNAMODB)
    return vpc


def cluster(scope: Construct, vpc: ec2.IVpc) -> ecs.Cluster:
    """A Fargate cluster with Container Insights (the scaling policy reads its task count).

    Both Fargate capacity providers are enabled, so a ``FargateWorker(spot=True)`` can use Spot.
    """
    return ecs.Cluster(
        scope,
        "Cluster",
        vpc=vpc,
        container_insights_v2=ecs.ContainerInsights.ENABLED,
        enable_fargate_capacity_providers=True,
    )


def _capacity(options: FargateWorker) -> list[ecs.CapacityProviderStrategy] | None:
    """Spot for every task above ``on_demand_base``; None: the service's launch type, regular Fargate."""
    if not options.spot:
        if options.on_demand_base:
            raise ConfigurationError("on_demand_base applies only with spot=True")
        return None
    if options.on_demand_base < 0:
        raise ConfigurationError(f"on_demand_base must be >= 0, got {options.on_demand_base}")
    strategies = [ecs.CapacityProviderStrategy(capacity_provider="FARGATE_SPOT", weight=1)]
    if options.on_demand_base:
        strategies.append(
            ecs.CapacityProviderStrategy(capacity_provider="FARGATE", base=options.on_demand_base, weight=0)
        )
    return strategies


def _task_definition(
    scope: Construct,
    construct_id: str,
    *,
    cpu: int,
    memory_mib: int,
    architecture: str,
    task_role: iam.IRole,
) -> ecs.FargateTaskDefinition:
    try:
        arch = getattr(ecs.CpuArchitecture, architecture)
    except AttributeError:
        raise ConfigurationError(f"cpu_architecture must be X86_64 or ARM64, got {architecture!r}") from None
    task = ecs.FargateTaskDefinition(
        scope,
        construct_id,
        cpu=cpu,
        memory_limit_mib=memory_mib,
        task_role=task_role,
        runtime_platform=ecs.RuntimePlatform(
            cpu_architecture=arch, operating_system_family=ecs.OperatingSystemFamily.LINUX
        ),
    )
    # The root filesystem is read-only; /tmp is the one writable place (task-local scratch).
    task.add_volume(name="tmp")
    acknowledge(
        task,
        "AwsSolutions-ECS2",
        "The environment holds the App's dotted path, resource names and timeouts, no secrets; "
        "secrets belong in Secrets Manager, passed with the container's `secrets`.",
    )
    acknowledge(
        task,
        "AwsSolutions-IAM5[Resource::*]",
        "The execution role's ecr:GetAuthorizationToken cannot be scoped to a resource (IAM only "
        "accepts *); image pulls and log writes are scoped to the repository and log group.",
    )
    return task


def _container(
    scope: Construct,
    task: ecs.FargateTaskDefinition,
    *,
    image: ecs.ContainerImage,
    command: Sequence[str],
    environment: Mapping[str, str],
    log_group: logs.ILogGroup,
    stream_prefix: str,
    stop_timeout_s: int | None = None,
    health_port: int | None = None,
) -> ecs.ContainerDefinition:
    container = task.add_container(
        stream_prefix,
        image=image,
        command=list(command),
        environment=dict(environment),
        logging=ecs.LogDrivers.aws_logs(stream_prefix=stream_prefix, log_group=log_group),
        readonly_root_filesystem=True,
        stop_timeout=Duration.seconds(stop_timeout_s) if stop_timeout_s is not None else None,
        # The worker's /live (sqsjobs.runtime.health_probe): ECS replaces a task whose event loop stalled.
        health_check=(
            ecs.HealthCheck(
                command=["CMD", *live_check_command(health_port)],
                interval=Duration.seconds(HEALTH_INTERVAL_S),
                timeout=Duration.seconds(HEALTH_TIMEOUT_S),
                retries=HEALTH_RETRIES,
                start_period=Duration.seconds(HEALTH_START_PERIOD_S),
            )
            if health_port is not None
            else None
        ),
        # tini as PID 1 forwards SIGTERM to `sqsjobs` and reaps anything a handler spawns.
        linux_parameters=ecs.LinuxParameters(scope, f"{stream_prefix}Linux", init_process_enabled=True),
    )
    container.add_mount_points(ecs.MountPoint(container_path="/tmp", source_volume="tmp", read_only=False))
    return container


def worker_service(
    scope: Construct,
    *,
    cluster: ecs.Cluster,
    options: FargateWorker,
    environment: Mapping[str, str],
    task_role: iam.IRole,
    log_group: logs.ILogGroup,
    stop_timeout_s: int,
    queues: Sequence[sqs.IQueue],
    security_group: ec2.ISecurityGroup,
) -> ecs.FargateService:
    """``sqsjobs worker`` on Fargate, scaled on the visible backlog per running task."""
    if options.min_tasks < 1 or options.max_tasks < options.min_tasks:
        raise ConfigurationError(
            f"need 1 <= min_tasks <= max_tasks (the scaling metric divides by the running task count), "
            f"got {options.min_tasks}..{options.max_tasks}"
        )
    task = _task_definition(
        scope,
        "WorkerTask",
        cpu=options.cpu,
        memory_mib=options.memory_mib,
        architecture=options.cpu_architecture,
        task_role=task_role,
    )
    env = dict(environment)
    if options.concurrency is not None:
        env["SQSJOBS_CONCURRENCY"] = str(options.concurrency)
    if options.health_port is not None:
        env["SQSJOBS_HEALTH_PORT"] = str(options.health_port)
    _container(
        scope,
        task,
        image=options.image,
        command=["worker"],
        environment=env,
        log_group=log_group,
        stream_prefix="worker",
        stop_timeout_s=stop_timeout_s,
        health_port=options.health_port,
    )
    service = ecs.FargateService(
        scope,
        "Worker",
        cluster=cluster,
        task_definition=task,
        desired_count=options.min_tasks,
        min_healthy_percent=100,
        max_healthy_percent=200,
        circuit_breaker=ecs.DeploymentCircuitBreaker(rollback=True),
        capacity_provider_strategies=_capacity(options),
        vpc_subnets=_PRIVATE,
        security_groups=[security_group],
        assign_public_ip=False,
    )
    _backlog_scaling(scope, service, cluster, queues, options)
    _task_protection(task, cluster, task_role)
    return service


def _task_protection(task: ecs.FargateTaskDefinition, cluster: ecs.Cluster, task_role: iam.IRole) -> None:
    """Let the worker protect its own task from scale-in while it holds jobs (``runtime/protection.py``).

    The worker calls the ECS agent's endpoint; the agent calls ``UpdateTaskProtection`` with the task
    role's credentials, on the task's ARN, which exists only at run time: the cluster's task prefix.
    """
    task_arns = Stack.of(task).format_arn(
        service="ecs", resource="task", resource_name=f"{cluster.cluster_name}/*"
    )
    task_role.add_to_principal_policy(
        iam.PolicyStatement(actions=list(TASK_PROTECTION_ACTIONS), resources=[task_arns])
    )
    acknowledge(
        task_role,
        wildcard_resource_finding(task_role, task_arns),
        "A worker protects its own task from scale-in while it holds jobs; task ARNs exist only at "
        "run time, so the statement names the cluster's task ARN prefix.",
    )


def _backlog_scaling(
    scope: Construct,
    service: ecs.FargateService,
    cluster: ecs.Cluster,
    queues: Sequence[sqs.IQueue],
    options: FargateWorker,
) -> None:
    """Target tracking on (visible messages of every consumed queue) / (running tasks).

    The L2 target-tracking helper takes single metrics only, so the metric-math form AWS
    recommends for queue workers is written on the L1 policy.
    https://docs.aws.amazon.com/autoscaling/application/userguide/application-auto-scaling-target-tracking-metric-math.html
    """
    capacity = service.auto_scale_task_count(min_capacity=options.min_tasks, max_capacity=options.max_tasks)
    target = capacity.node.find_child("Target")
    P = appscaling.CfnScalingPolicy
    metrics = [
        P.TargetTrackingMetricDataQueryProperty(
            id=f"q{i}",
            return_data=False,
            metric_stat=P.TargetTrackingMetricStatProperty(
                stat="Sum",
                metric=P.TargetTrackingMetricProperty(
                    namespace="AWS/SQS",
                    metric_name="ApproximateNumberOfMessagesVisible",
                    dimensions=[
                        P.TargetTrackingMetricDimensionProperty(name="QueueName", value=q.queue_name)
                    ],
                ),
            ),
        )
        for i, q in enumerate(queues)
    ]
    metrics.append(
        P.TargetTrackingMetricDataQueryProperty(
            id="tasks",
            return_data=False,
            metric_stat=P.TargetTrackingMetricStatProperty(
                stat="Average",
                metric=P.TargetTrackingMetricProperty(
                    namespace=INSIGHTS_NAMESPACE,
                    metric_name="RunningTaskCount",
                    dimensions=[
                        P.TargetTrackingMetricDimensionProperty(
                            name="ClusterName", value=cluster.cluster_name
                        ),
                        P.TargetTrackingMetricDimensionProperty(
                            name="ServiceName", value=service.service_name
                        ),
                    ],
                ),
            ),
        )
    )
    backlog = " + ".join(f"q{i}" for i in range(len(queues)))
    metrics.append(
        P.TargetTrackingMetricDataQueryProperty(
            id="backlogPerTask",
            expression=f"({backlog}) / tasks",
            label="Visible messages per running worker task",
            return_data=True,
        )
    )
    appscaling.CfnScalingPolicy(
        capacity,
        "BacklogPerTask",
        policy_name="sqsjobs-backlog-per-task",
        policy_type="TargetTrackingScaling",
        scaling_target_id=target.scalable_target_id,  # type: ignore[attr-defined]
        target_tracking_scaling_policy_configuration=P.TargetTrackingScalingPolicyConfigurationProperty(
            target_value=float(options.backlog_per_task),
            scale_out_cooldown=60,
            scale_in_cooldown=300,
            customized_metric_specification=P.CustomizedMetricSpecificationProperty(metrics=metrics),
        ),
    )


def sweeper_task(
    scope: Construct,
    *,
    cluster: ecs.Cluster,
    image: ecs.ContainerImage,
    options: Sweeper,
    environment: Mapping[str, str],
    task_role: iam.IRole,
    log_group: logs.ILogGroup,
    security_group: ec2.ISecurityGroup,
    architecture: str,
) -> events.Rule:
    """``sqsjobs sweep --once`` every ``every_minutes``; overlapping sweeps are safe (conditional writes)."""
    if options.every_minutes < 1:
        raise ConfigurationError(f"the sweeper runs at most once a minute, got every {options.every_minutes}")
    task = _task_definition(
        scope,
        "SweeperTask",
        cpu=options.cpu,
        memory_mib=options.memory_mib,
        architecture=architecture,
        task_role=task_role,
    )
    _container(
        scope,
        task,
        image=image,
        command=["sweep", "--once"],
        environment=environment,
        log_group=log_group,
        stream_prefix="sweeper",
    )
    rule = events.Rule(
        scope,
        "SweeperSchedule",
        description="sqsjobs sweep --once",
        schedule=events.Schedule.rate(Duration.minutes(options.every_minutes)),
        targets=[
            targets.EcsTask(
                cluster=cluster,
                task_definition=task,
                launch_type=ecs.LaunchType.FARGATE,
                subnet_selection=_PRIVATE,
                security_groups=[security_group],
                assign_public_ip=False,
            )
        ],
    )
    acknowledge(
        task,
        f"AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ecs:<AWS::Region>:*:task/<{_logical_id(cluster)}>/*]",
        "EventBridge tags the sweeper tasks it starts; their ARNs exist only at run time, so the "
        "statement names the cluster's task ARN prefix.",
    )
    return rule


def _logical_id(construct: Construct) -> str:
    stack = Stack.of(construct)
    return str(stack.resolve(stack.get_logical_id(construct.node.default_child)))  # type: ignore[arg-type]
