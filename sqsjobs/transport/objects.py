"""The S3 claim-check: payloads and results too large for the message or the record are objects.

A message or a record then carries a reference (``s3://bucket/key``) and the payload's hash, never
the data. Keys are chosen so that no write can replace an object another write relies on:

- ``payloads/<job id>/<payload hash>``: content-addressed. Repeating an enqueue writes the same
  bytes again; a conflicting enqueue under the same idempotency key (refused by the record) writes
  another object, which nobody reads and which expires.
- ``results/<job id>/<claim token>``: each run writes its own. A stale run whose finish is fenced
  out cannot overwrite the result the record names.

Objects expire by the bucket's lifecycle rules on the two prefixes (``lifecycle``), which
``sqsjobs provision`` and ``infra/`` apply: an object orphaned by a crash (written, then the
process died before its job was) is harmless and goes away on its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqsjobs._aws import Call, Flow
from sqsjobs.errors import ObjectStoreError, PayloadMissing

if TYPE_CHECKING:
    from sqsjobs.config import Settings

PAYLOADS = "payloads/"
RESULTS = "results/"
#: Finished records, archived (``sqsjobs.archive``): kept ``archive_days``.
ARCHIVE = "archive/"
_SCHEME = "s3://"
#: Answers that mean the object (or its bucket) is not there.
MISSING_CODES = frozenset({"NoSuchKey", "404", "NoSuchBucket", "NotFound"})


def ref(bucket: str, key: str) -> str:
    """The reference a message or a record carries."""
    return f"{_SCHEME}{bucket}/{key}"


def parse_ref(reference: str) -> tuple[str, str]:
    """(bucket, key) of a reference; ``PayloadMissing`` when it is not one."""
    bucket, _, key = reference.removeprefix(_SCHEME).partition("/")
    if not reference.startswith(_SCHEME) or not bucket or not key:
        raise PayloadMissing(f"not an S3 reference: {reference[:120]!r}")
    return bucket, key


def payload_ref(bucket: str, job_id: str, digest: str) -> str:
    """Where the payload of ``job_id`` with hash ``digest`` lives."""
    return ref(bucket, f"{PAYLOADS}{job_id}/{digest}")


def result_ref(bucket: str, job_id: str, claim_token: str) -> str:
    """Where the result of the run that holds ``claim_token`` lives."""
    return ref(bucket, f"{RESULTS}{job_id}/{claim_token}")


def put_flow(reference: str, body: bytes) -> Flow[None]:
    """Write one object (a bucket that does not exist says what to do)."""
    bucket, key = parse_ref(reference)
    try:
        yield Call(
            "s3",
            "put_object",
            {"Bucket": bucket, "Key": key, "Body": body, "ContentType": "application/json"},
        )
    except ObjectStoreError as exc:
        if exc.code == "NoSuchBucket":
            raise ObjectStoreError(
                f"S3 bucket {bucket!r} does not exist: run `sqsjobs provision` (or deploy infra/), "
                "or set payload_bucket (SQSJOBS_PAYLOAD_BUCKET) to the bucket made for sqsjobs",
                code=exc.code,
                response=exc.response,
            ) from exc
        raise


def get_flow(reference: str) -> Flow[bytes]:
    """Read one object whole; ``PayloadMissing`` when it is gone (expired or deleted)."""
    bucket, key = parse_ref(reference)
    try:
        response = yield Call("s3", "get_object", {"Bucket": bucket, "Key": key})
    except ObjectStoreError as exc:
        if exc.code in MISSING_CODES:
            raise PayloadMissing(
                f"{reference} is gone ({exc.code}): S3 objects expire after the bucket's lifecycle "
                "days (payload_object_days), or it was deleted"
            ) from exc
        raise
    body: bytes = response["Body"]
    return body


def lifecycle(settings: Settings) -> dict[str, Any]:
    """``PutBucketLifecycleConfiguration``: payloads, results (``payload_object_days``), the archive expire.

    Results are written when their job finishes, so they outlive the record (whose TTL is the
    retention after the finish) by the same days; a payload is written at enqueue, so its job must
    have started within the days less the retention.
    """
    kept: tuple[tuple[str, int], ...] = (
        (PAYLOADS, settings.payload_object_days),
        (RESULTS, settings.payload_object_days),
    )
    kept += ((ARCHIVE, settings.archive_days),) if settings.archive_days > 0 else ()
    return {
        "Bucket": settings.payload_bucket,
        "LifecycleConfiguration": {
            "Rules": [
                {
                    "ID": f"sqsjobs-expire-{prefix.rstrip('/')}",
                    "Filter": {"Prefix": prefix},
                    "Status": "Enabled",
                    "Expiration": {"Days": days},
                    "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 1},
                }
                for prefix, days in kept
            ]
        },
    }
