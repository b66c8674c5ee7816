"""The claim-check bucket: payloads and results too large for a message or a record (``objects``).

Its lifecycle is translated from ``sqsjobs.transport.objects.lifecycle`` (the request ``sqsjobs
provision`` sends), never written twice: a key this module does not know how to translate is an
error, not something silently dropped, as for the table (``table.py``). Its key layout (the
``payloads/`` and ``results/`` prefixes IAM is scoped to) comes from the same module.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from aws_cdk import Duration, RemovalPolicy, Token
from aws_cdk import aws_s3 as s3

from sqsjobs.errors import ConfigurationError
from sqsjobs.transport import objects

from .nag import acknowledge

if TYPE_CHECKING:
    from collections.abc import Mapping

    from constructs import Construct

    from sqsjobs.config import Settings

_REQUEST_KEYS = {"Bucket", "LifecycleConfiguration"}
_CONFIGURATION_KEYS = {"Rules"}
_RULE_KEYS = {"ID", "Filter", "Status", "Expiration", "AbortIncompleteMultipartUpload"}
_FILTER_KEYS = {"Prefix"}
_EXPIRATION_KEYS = {"Days"}
_ABORT_KEYS = {"DaysAfterInitiation"}
_STATUS = {"Enabled": True, "Disabled": False}


def payload_bucket(
    scope: Construct, construct_id: str, settings: Settings, *, existing: s3.IBucket | None = None
) -> s3.IBucket:
    """The App's bucket: ``existing`` if given, else a new private, encrypted, TLS-only, retained one.

    Named as the App names it when it names one (``payload_bucket`` / ``SQSJOBS_PAYLOAD_BUCKET`` at
    synth time, as the table is named); otherwise CloudFormation generates a name, since bucket names
    are global and ``<app>-payloads`` is likely taken in some other account. Deployed processes get
    the real name in ``SQSJOBS_PAYLOAD_BUCKET`` (``SqsJobs`` overrides the settings' default).
    """
    chosen = chosen_name(settings)
    if existing is not None:
        if chosen and not Token.is_unresolved(existing.bucket_name) and existing.bucket_name != chosen:
            raise ConfigurationError(
                f"the App names payload bucket {chosen!r} but payload_bucket= is {existing.bucket_name!r}; "
                "an App's explicit setting wins over the deployed SQSJOBS_PAYLOAD_BUCKET, so they must agree"
            )
        return existing
    bucket = s3.Bucket(
        scope,
        construct_id,
        bucket_name=chosen,
        encryption=s3.BucketEncryption.S3_MANAGED,
        block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
        enforce_ssl=True,
        # No versioning: every key is written with one content only (payloads/<id>/<hash> is
        # content-addressed, results/<id>/<claim token> is one run's), so there is no overwrite to
        # undo, and versions would outlive the lifecycle expiry (it only adds delete markers),
        # keeping payloads, which may hold personal data, beyond payload_object_days.
        versioned=False,
        lifecycle_rules=lifecycle_rules(objects.lifecycle(settings)),
        # Records (retained with the table) name these objects: deleting the stack must not break
        # them. Objects still expire by the lifecycle rules, so a retained bucket empties itself.
        removal_policy=RemovalPolicy.RETAIN,
    )
    acknowledge(
        bucket,
        "AwsSolutions-S1",
        "Every object is a job's payload or result, read and written only by this deployment's roles; "
        "server access logs would add a log object per job. Audit with CloudTrail S3 data events, or "
        "pass payload_bucket= with a bucket that logs.",
    )
    return bucket


def chosen_name(settings: Settings) -> str | None:
    """The bucket name the App chose, or None when it has the default (``<app>-payloads``)."""
    default = dataclasses.replace(settings, payload_bucket="").payload_bucket
    return None if settings.payload_bucket == default else settings.payload_bucket


def object_arns(bucket: s3.IBucket) -> list[str]:
    """The key prefixes a worker reads and writes: ``payloads/*`` and ``results/*`` of ``bucket``."""
    return [bucket.arn_for_objects(f"{prefix}*") for prefix in (objects.PAYLOADS, objects.RESULTS)]


def payload_arns(bucket: s3.IBucket) -> list[str]:
    """The key prefix a producer writes: ``payloads/*`` of ``bucket``."""
    return [bucket.arn_for_objects(f"{objects.PAYLOADS}*")]


def lifecycle_rules(request: Mapping[str, Any]) -> list[s3.LifecycleRule]:
    """``PutBucketLifecycleConfiguration``'s rules as CDK lifecycle rules (the bucket name is not used)."""
    _only(request, _REQUEST_KEYS, "objects.lifecycle()")
    configuration = request["LifecycleConfiguration"]
    _only(configuration, _CONFIGURATION_KEYS, "LifecycleConfiguration")
    return [_rule(rule) for rule in configuration["Rules"]]


def _rule(rule: Mapping[str, Any]) -> s3.LifecycleRule:
    what = f"lifecycle rule {rule.get('ID')!r}"
    _only(rule, _RULE_KEYS, what)
    if rule["Status"] not in _STATUS:
        raise ConfigurationError(f"{what} has Status {rule['Status']!r}, not Enabled or Disabled")
    _only(rule.get("Filter", {}), _FILTER_KEYS, f"{what} Filter")
    expiration = rule.get("Expiration")
    abort = rule.get("AbortIncompleteMultipartUpload")
    _only(expiration or {}, _EXPIRATION_KEYS, f"{what} Expiration")
    _only(abort or {}, _ABORT_KEYS, f"{what} AbortIncompleteMultipartUpload")
    return s3.LifecycleRule(
        id=rule["ID"],
        enabled=_STATUS[rule["Status"]],
        prefix=rule.get("Filter", {}).get("Prefix"),
        expiration=Duration.days(expiration["Days"]) if expiration else None,
        abort_incomplete_multipart_upload_after=(
            Duration.days(abort["DaysAfterInitiation"]) if abort else None
        ),
    )


def _only(mapping: Mapping[str, Any], known: set[str], what: str) -> None:
    unknown = sorted(set(mapping) - known)
    if unknown:
        raise ConfigurationError(
            f"{what} has {unknown}, which infra/sqsjobs_cdk/bucket.py does not translate yet; add it there "
            "so the deployed bucket's lifecycle matches what `sqsjobs provision` applies"
        )
