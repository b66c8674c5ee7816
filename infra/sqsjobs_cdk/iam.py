"""Least privilege: each principal gets the action lists of ``sqsjobs.deploy.rules``, on named resources.

No ``grant_read_write_data``-style helpers (they grant far more than the runtime calls) and no
wildcard actions; index ARNs are listed one by one rather than as ``index/*``. The one wildcard is
in S3 object ARNs (``<bucket>/payloads/*``): objects are named after the job that writes them, so
IAM can only name the key prefix of the one bucket, never the objects themselves.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aws_cdk import aws_iam as iam
from constructs import Construct

from sqsjobs.errors import ConfigurationError

from .nag import acknowledge, wildcard_resource_finding

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence


def allow(
    principal: iam.IPrincipal,
    actions: Mapping[str, Sequence[str]],
    *,
    table_arns: Sequence[str] = (),
    queue_arns: Sequence[str] = (),
    object_arns: Sequence[str] = (),
    secret_arns: Sequence[str] = (),
    schedule_arns: Sequence[str] = (),
) -> None:
    """Add one statement per service: its actions on the table (and indexes), the queues, or the objects.

    ``object_arns`` are key-prefix ARNs of the payload bucket (``bucket.object_arns``); their
    wildcard is acknowledged to cdk-nag on ``principal`` (when it is a construct of this app).
    """
    resources = {
        "dynamodb": list(table_arns),
        "sqs": list(queue_arns),
        "s3": list(object_arns),
        "secretsmanager": list(secret_arns),
        "scheduler": list(schedule_arns),
    }
    for service, names in actions.items():
        bad = [a for a in names if "*" in a or not a.startswith(f"{service}:")]
        if bad:
            raise ConfigurationError(f"IAM actions must be explicit {service}: actions, got {bad}")
        if service not in resources:
            raise ConfigurationError(f"no resources known for service {service!r}")
        if not resources[service]:
            continue
        added = principal.add_to_principal_policy(
            iam.PolicyStatement(actions=sorted(names), resources=resources[service])
        )
        if not added.statement_added:
            raise ConfigurationError(
                f"cannot add a policy to {principal}: it is immutable (an imported role?); grant "
                f"{sorted(names)} on {service} to it where it is defined"
            )
    if isinstance(principal, Construct) and "s3" in actions:
        for arn in object_arns:
            acknowledge(
                principal,
                wildcard_resource_finding(principal, arn),
                "S3 object keys carry the job id (payloads/<job id>/<hash>, results/<job id>/<claim>), "
                "so IAM can only name the key prefix; the statement is that prefix of the one bucket.",
            )
