"""What an App that encrypts payloads needs in AWS: its KMS keys' data-key actions, on those keys only.

``rules.ENCRYPTION_ACTIONS`` (``tests/unit/test_deployment.py`` keeps it equal to the calls
``sqsjobs.store.sealing`` makes): ``kms:GenerateDataKey`` (a producer seals) and ``kms:Decrypt`` (a
worker opens, a reader of results), on each key the App names (``Settings.encrypt``, a type's
``PayloadVersion(encrypt=)``), and ``dynamodb:GetItem``/``PutItem`` of the hash key's item
(``sealkey#...``), narrowed by ``dynamodb:LeadingKeys``. A key named by ARN or id is granted as that
key; one named by alias as the account's keys carrying that alias (``kms:ResourceAliases``), as the
KMS developer guide grants by alias: the alias may move to another key without a new deployment.
An App that encrypts nothing is granted none of it. docs/encryption.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aws_cdk import Stack
from aws_cdk import aws_iam as iam
from constructs import Construct

from sqsjobs.deploy.rules import ENCRYPTION_ACTIONS
from sqsjobs.store.sealing import HASH_KEY_PREFIX

from .nag import acknowledge, wildcard_resource_finding

if TYPE_CHECKING:
    from sqsjobs import App


def keys_of(app: App) -> list[str]:
    """The KMS keys the App seals with: its own and its types', each once."""
    named = [app.settings.encrypt, *(spec.encrypt or "" for spec in app.registry)]
    return sorted({k for k in named if k})


def grant_encryption(scope: Construct, role: iam.IPrincipal, app: App, table_arn: str) -> None:
    """Give ``role`` what sealing and opening ``app``'s payloads call (nothing when it encrypts nothing)."""
    keys = keys_of(app)
    if not keys:
        return
    stack = Stack.of(scope)
    any_key = f"arn:{stack.partition}:kms:{stack.region}:{stack.account}:key/*"
    kms_actions = list(ENCRYPTION_ACTIONS["kms"])
    arns = [_key_arn(stack, k) for k in keys if "alias/" not in k]
    aliases = [k.split(":")[-1] for k in keys if "alias/" in k]  # alias/pii, or its ARN's last part
    if arns:
        role.add_to_principal_policy(iam.PolicyStatement(actions=kms_actions, resources=arns))
    if aliases:
        role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=kms_actions,
                resources=[any_key],
                conditions={"ForAnyValue:StringEquals": {"kms:ResourceAliases": aliases}},
            )
        )
        acknowledge(
            role if isinstance(role, Construct) else scope,
            wildcard_resource_finding(scope, any_key),
            "KMS keys granted by alias (kms:ResourceAliases): only the keys that carry the App's aliases "
            "can be used, whichever key an alias points to.",
        )
    role.add_to_principal_policy(
        iam.PolicyStatement(
            actions=list(ENCRYPTION_ACTIONS["dynamodb"]),
            resources=[table_arn],
            conditions={"ForAllValues:StringLike": {"dynamodb:LeadingKeys": [f"{HASH_KEY_PREFIX}*"]}},
        )
    )


def _key_arn(stack: Stack, key: str) -> str:
    """A key's ARN (a bare key id is one of this account's, in this region)."""
    return (
        key
        if key.startswith("arn:")
        else f"arn:{stack.partition}:kms:{stack.region}:{stack.account}:key/{key}"
    )
