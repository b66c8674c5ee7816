"""The jobs table, translated from ``sqsjobs.store.requests.table_definition`` (never written twice).

The store's CreateTable request is the one definition of keys, attribute types and indexes;
``sqsjobs provision`` sends it as it is, and this module turns the same dict into a CDK table. A key
it does not know how to translate is an error, not something silently dropped, so a new
definition feature cannot drift away from production unnoticed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aws_cdk import RemovalPolicy
from aws_cdk import aws_dynamodb as dynamodb

from sqsjobs.errors import ConfigurationError

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from constructs import Construct

_ATTRIBUTE_TYPES = {
    "S": dynamodb.AttributeType.STRING,
    "N": dynamodb.AttributeType.NUMBER,
    "B": dynamodb.AttributeType.BINARY,
}
_PROJECTIONS = {
    "ALL": dynamodb.ProjectionType.ALL,
    "KEYS_ONLY": dynamodb.ProjectionType.KEYS_ONLY,
    "INCLUDE": dynamodb.ProjectionType.INCLUDE,
}
_TABLE_KEYS = {"TableName", "BillingMode", "KeySchema", "AttributeDefinitions", "GlobalSecondaryIndexes"}
_INDEX_KEYS = {"IndexName", "KeySchema", "Projection"}


def jobs_table(
    scope: Construct, construct_id: str, definition: Mapping[str, Any], *, ttl_attribute: str
) -> dynamodb.Table:
    """On-demand, encrypted (AWS-managed KMS key), PITR, TTL, deletion-protected and retained."""
    _only(definition, _TABLE_KEYS, "table_definition")
    if definition.get("BillingMode") != "PAY_PER_REQUEST":
        raise ConfigurationError(f"infra builds on-demand tables only, got {definition.get('BillingMode')!r}")
    types = {
        a["AttributeName"]: _ATTRIBUTE_TYPES[a["AttributeType"]] for a in definition["AttributeDefinitions"]
    }
    partition, sort = _keys(definition["KeySchema"], types)
    table = dynamodb.Table(
        scope,
        construct_id,
        table_name=definition["TableName"],
        partition_key=partition,
        sort_key=sort,
        billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
        encryption=dynamodb.TableEncryption.AWS_MANAGED,
        point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
            point_in_time_recovery_enabled=True
        ),
        time_to_live_attribute=ttl_attribute,
        deletion_protection=True,
        # The table is the source of truth (docs/lifecycle.md): deleting the stack must not delete the jobs.
        removal_policy=RemovalPolicy.RETAIN,
    )
    for index in definition.get("GlobalSecondaryIndexes", []):
        _only(index, _INDEX_KEYS, f"index {index.get('IndexName')}")
        partition, sort = _keys(index["KeySchema"], types)
        projection = index["Projection"]
        table.add_global_secondary_index(
            index_name=index["IndexName"],
            partition_key=partition,
            sort_key=sort,
            projection_type=_PROJECTIONS[projection["ProjectionType"]],
            non_key_attributes=projection.get("NonKeyAttributes"),
        )
    return table


def index_names(definition: Mapping[str, Any]) -> list[str]:
    """Every index of the definition, for IAM resources that name them one by one (no ``index/*``)."""
    return [i["IndexName"] for i in definition.get("GlobalSecondaryIndexes", [])]


def _keys(
    schema: Sequence[Mapping[str, str]], types: Mapping[str, dynamodb.AttributeType]
) -> tuple[dynamodb.Attribute, dynamodb.Attribute | None]:
    by_role = {
        k["KeyType"]: dynamodb.Attribute(name=k["AttributeName"], type=types[k["AttributeName"]])
        for k in schema
    }
    return by_role["HASH"], by_role.get("RANGE")


def _only(mapping: Mapping[str, Any], known: set[str], what: str) -> None:
    unknown = sorted(set(mapping) - known)
    if unknown:
        raise ConfigurationError(
            f"{what} has {unknown}, which infra/sqsjobs_cdk/table.py does not translate yet; add it there "
            "so the deployed table matches what `sqsjobs provision` creates"
        )
