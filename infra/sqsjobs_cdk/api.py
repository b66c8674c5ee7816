"""The HTTP API (``sqsjobs.api``) as a Lambda function behind API Gateway's HTTP API, authorised with IAM.

Every request (the ``$default`` route) must be signed (SigV4) by a principal allowed
``execute-api:Invoke`` on the API (``SqsJobs.grant_invoke_api``), but on the routes that carry their
own credential (``sqsjobs.deploy.rules.OPEN_ROUTES``: a wait token's answer URL and its key), each a
route of its own that API Gateway leaves to the function; the function runs the same zip as
the Lambda worker, whose dependencies include the ``api`` extra's (``sqsjobs.deploy.packaging``).
Its role gets ``sqsjobs.deploy.rules.API_ACTIONS``, on the table, the attention index, the queues
and DLQs and the payload bucket's two prefixes, and ``cloudwatch:GetMetricData``: the dashboard's
charts read the workers' metrics from CloudWatch on AWS (docs/dashboard.md). The stage writes a JSON
access log line per request (who, what, status; never a body).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from aws_cdk import aws_apigatewayv2 as apigwv2
from aws_cdk import aws_apigatewayv2_authorizers as authorizers
from aws_cdk import aws_apigatewayv2_integrations as integrations
from aws_cdk import aws_iam as iam

from sqsjobs.deploy.rules import OPEN_ROUTES
from sqsjobs.errors import ConfigurationError
from sqsjobs.runtime.lambda_handlers import API_HANDLER, API_MAX_BODY_ENV

from .lambda_worker import _function
from .nag import acknowledge
from .options import LambdaWorker

if TYPE_CHECKING:
    from collections.abc import Mapping

    from aws_cdk import aws_lambda as lambda_
    from aws_cdk import aws_logs as logs
    from constructs import Construct

    from .bundling import LocalBundle
    from .options import HttpApi

#: What the charts read (``sqsjobs.ops.cloudwatch_series``): the workers' EMF metrics and SQS's own.
METRIC_READS = ("cloudwatch:GetMetricData",)
#: API Gateway ends an HTTP API's integration after 30 s; the function stops before it.
MAX_TIMEOUT_S = 29
#: The access log line: HTTP API context variables only (no body, no query string).
ACCESS_LOG = {
    "requestId": "$context.requestId",
    "time": "$context.requestTime",
    "ip": "$context.identity.sourceIp",
    "caller": "$context.identity.userArn",
    "method": "$context.httpMethod",
    "path": "$context.path",
    "status": "$context.status",
    "latencyMs": "$context.responseLatency",
    "responseLength": "$context.responseLength",
    "integrationError": "$context.integrationErrorMessage",
}


def http_api(
    scope: Construct,
    *,
    options: HttpApi,
    code_path: str | LocalBundle,
    environment: Mapping[str, str],
    log_group: logs.ILogGroup,
    access_log_group: logs.ILogGroup,
) -> tuple[lambda_.Function, apigwv2.HttpApi]:
    """The API function and the IAM-authorised HTTP API in front of it."""
    if not 1 <= options.timeout_s <= MAX_TIMEOUT_S:
        raise ConfigurationError(
            f"HttpApi.timeout_s must be 1..{MAX_TIMEOUT_S} (API Gateway gives up after 30 s), got {options.timeout_s}"
        )
    env = dict(environment)
    if options.max_body_bytes is not None:
        env[API_MAX_BODY_ENV] = str(options.max_body_bytes)
    function = _function(
        scope,
        "ApiFunction",
        options=LambdaWorker(code_path=code_path, runtime=options.runtime, architecture=options.architecture),
        handler=API_HANDLER,
        timeout_s=options.timeout_s,
        memory_mib=options.memory_mib,
        environment=env,
        log_group=log_group,
        description="sqsjobs HTTP API (API Gateway, IAM-authorised)",
    )
    integration = integrations.HttpLambdaIntegration("ApiIntegration", function)
    api = apigwv2.HttpApi(
        scope,
        "HttpApi",
        description="sqsjobs HTTP API: enqueue, jobs, queues, DLQ (IAM-authorised)",
        create_default_stage=False,
        default_integration=integration,
        default_authorizer=authorizers.HttpIamAuthorizer(),
    )
    for method, path in OPEN_ROUTES:
        for route in api.add_routes(
            path=path,
            methods=[apigwv2.HttpMethod(method)],
            integration=integration,
            authorizer=apigwv2.HttpNoneAuthorizer(),
        ):
            acknowledge(
                route,
                "AwsSolutions-APIG4",
                f"{method} {path} carries its own credential: a wait token's 192-bit key in the URL, "
                "compared in constant time by the function (docs/api.md); IAM cannot sign a webhook's call.",
            )
    # The stage as CloudFormation has it (the L2 stage takes its access log settings as a jsii
    # interface only): $default, deployed on every change, throttled, one JSON line per request.
    apigwv2.CfnStage(
        scope,
        "HttpApiStage",
        api_id=api.api_id,
        stage_name="$default",
        auto_deploy=True,
        default_route_settings=apigwv2.CfnStage.RouteSettingsProperty(
            throttling_rate_limit=options.rate_limit, throttling_burst_limit=options.burst_limit
        ),
        access_log_settings=apigwv2.CfnStage.AccessLogSettingsProperty(
            destination_arn=access_log_group.log_group_arn, format=json.dumps(ACCESS_LOG)
        ),
    )
    return function, api


def grant_metric_reads(role: iam.IRole) -> None:
    """``METRIC_READS`` for ``role`` (the API's, the sweeper's), acknowledged to cdk-nag with the reason it is ``*``."""
    added = role.add_to_principal_policy(iam.PolicyStatement(actions=list(METRIC_READS), resources=["*"]))
    if not added.statement_added:
        raise ConfigurationError(f"cannot add {METRIC_READS} to {role}: it is immutable")
    acknowledge(
        role,
        "AwsSolutions-IAM5[Resource::*]",
        "cloudwatch:GetMetricData takes no resource narrower than * (CloudWatch has no resource-level "
        "permissions for it); the statement names only that read, for the dashboard's charts and the "
        "sweeper's slow-run baselines.",
    )
