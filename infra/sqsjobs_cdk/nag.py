"""cdk-nag acknowledgements: each one names the rule and says why the finding is accepted."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from aws_cdk import Acknowledgment, Stack, Validations

if TYPE_CHECKING:
    from constructs import IConstruct


def acknowledge(construct: IConstruct, rule: str, reason: str) -> None:
    """Accept ``rule`` (``AwsSolutions-IAM5[Resource::*]`` for one finding) on ``construct`` and below."""
    if len(reason) < 20:
        raise ValueError(f"give {rule} a real reason, not {reason!r}")
    Validations.of(construct).acknowledge(Acknowledgment(id=rule, reason=reason))


def wildcard_resource_finding(scope: IConstruct, arn: str) -> str:
    """The AwsSolutions-IAM5 finding cdk-nag reports for a statement on ``arn`` (a token or a string).

    cdk-nag names the resource by flattening its CloudFormation value (``flattenCfnReference``:
    ``Fn::GetAtt`` → ``<Id.Attr>``, ``Ref`` → ``<Id>``, joins joined), so one acknowledgement
    accepts that resource and no other.
    """
    return f"AwsSolutions-IAM5[Resource::{_flatten(Stack.of(scope).resolve(arn))}]"


def _flatten(node: Any) -> str:
    if isinstance(node, str):
        return node.replace("${", "<").replace("}", ">")
    if isinstance(node, dict) and len(node) == 1:
        [(function, value)] = node.items()
        if function == "Fn::Join":
            delimiter, items = value
            return str(delimiter).join(_flatten(i) for i in items)
        if function in ("Fn::Sub", "Fn::ImportValue"):
            return _flatten(value)
        if function == "Fn::GetAtt":
            resource, attribute = value
            return f"<{_flatten(resource)}.{_flatten(attribute)}>"
        if function == "Ref":
            return f"<{_flatten(value)}>"
    return json.dumps(node, separators=(",", ":"))
