"""Least privilege: each principal gets the action lists of ``sqsjobs.deploy.rules``, on named resources.

No ``grant_read_write_data``-style helpers (they grant far more than the runtime calls) and no
wildcard actions; index ARNs are listed one by one rather than as ``index/*``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aws_cdk import aws_iam as iam

from sqsjobs.errors import ConfigurationError

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence


def allow(
    principal: iam.IPrincipal,
    actions: Mapping[str, Sequence[str]],
    *,
    table_arns: Sequence[str] = (),
    queue_arns: Sequence[str] = (),
) -> None:
    """Add one statement per service: its actions on the table (and indexes) or on the queues."""
    resources = {"dynamodb": list(table_arns), "sqs": list(queue_arns)}
    for service, names in actions.items():
        bad = [a for a in names if "*" in a or not a.startswith(f"{service}:")]
        if bad:
            raise ConfigurationError(f"IAM actions must be explicit {service}: actions, got {bad}")
        if service not in resources:
            raise ConfigurationError(f"no resources known for service {service!r}")
        if not resources[service]:
            continue
        principal.add_to_principal_policy(
            iam.PolicyStatement(actions=sorted(names), resources=resources[service])
        )
