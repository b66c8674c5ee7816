"""A run's payload and result, wherever they live: inline, or S3 objects (the claim-check).

The worker reads a payload from S3 only after its claim succeeded, so a duplicate or stale
message costs no GET; it checks the object against the payload hash the record and the message
carry, so a job never runs with bytes it was not enqueued with. A result over
``inline_result_bytes`` is written to S3 under the run's claim token before the finish that names
it, so the record never points at an object that is not there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic_core import to_jsonable_python

from sqsjobs.envelope import read_json
from sqsjobs.errors import MalformedJson, ObjectStoreError, PayloadInvalid, PayloadMissing
from sqsjobs.store import sealing
from sqsjobs.store.codec import SEALED, canonical_hash, canonical_json, sealed_key
from sqsjobs.transport import objects

if TYPE_CHECKING:
    from sqsjobs._aws import AsyncRunner, Flow
    from sqsjobs.config import Settings
    from sqsjobs.job import Job


async def load(arun: AsyncRunner, table: str, job: Job) -> Any:
    """The payload of a claimed ``job``: its own, or its S3 object's once checked against its hash.

    A sealed payload (``sqsjobs.store.sealing``, wherever it came from) is opened here and checked
    against the keyed hash; one that cannot be opened (the key is gone, disabled or not this role's)
    is ``PayloadInvalid`` with the reason ``payload cannot be decrypted``: the job ends dead.
    ``PayloadMissing``: the object is gone or is not the job's payload (the job cannot run).
    ``ObjectStoreError``, ``EncryptionError``: S3 or KMS did not answer (a passing fault: retried).
    """
    if job.payload_ref is None:
        if sealed_key(job.payload) is None:
            return job.payload
        body = await arun(_opened(table, job, job.payload))
        return read_json(body, what="payload", max_bytes=None)
    body = await arun(objects.get_flow(job.payload_ref))
    if body.startswith(SEALED_PREFIX):
        sealed = read_json(body, what="payload object", max_bytes=None)
        body = await arun(_opened(table, job, sealed))
    elif canonical_hash(job.type, job.payload_version, body) != job.payload_hash:
        raise PayloadMissing(f"{job.payload_ref} does not hold the payload job {job.id} was enqueued with")
    try:  # its hash matched: only a payload enqueued before the depth bound can fail here
        return read_json(body, what="payload object", max_bytes=None)
    except MalformedJson as exc:
        raise PayloadInvalid(f"job {job.id}: {exc}", reason="payload object is not readable JSON") from None


#: How a sealed payload's canonical JSON begins (its one member's name).
SEALED_PREFIX = ('{"' + SEALED + '"').encode()


def _opened(table: str, job: Job, sealed: Any) -> Flow[bytes]:
    return sealing.open_payload_flow(table, job.id, job.type, job.payload_version, job.payload_hash, sealed)


def unusable(exc: PayloadInvalid | PayloadMissing) -> str:
    """The record's reason for a job whose payload cannot be run (an invalid one says why itself)."""
    return "payload object missing" if isinstance(exc, PayloadMissing) else exc.reason


@dataclass(frozen=True)
class StoredResult:
    """What the finish writes: the result itself, or the reference of its S3 object."""

    value: Any = None
    ref: str | None = None


def storable_result(result: Any, max_bytes: int) -> tuple[Any, str]:
    """A handler's return value as JSON-compatible data and its canonical JSON, or a note saying why not.

    A result that cannot be stored must not lose the success, so this never raises.
    """
    try:
        stored = to_jsonable_python(result)
        text = canonical_json(stored)
    except Exception as exc:
        note = {"sqsjobs_note": f"result not JSON-serialisable: {type(exc).__name__}: {exc}"[:500]}
        return note, canonical_json(note)
    if len(text) > max_bytes:
        note = {"sqsjobs_note": f"result of {len(text)} bytes omitted (max_result_bytes {max_bytes})"}
        return note, canonical_json(note)
    return stored, text


async def store_result(
    arun: AsyncRunner, settings: Settings, job: Job, result: Any, *, encrypt: str | None = None
) -> StoredResult:
    """Keep ``result`` for the finish of this run: inline when small, else as this run's S3 object.

    ``encrypt``: the KMS key of the job's type (``sealing.key_of``): the result is sealed first, and
    what is kept, inline or in S3, is the sealed value.
    """
    value, text = storable_result(result, settings.max_result_bytes)
    if encrypt is not None and value is not None:
        value = await arun(sealing.seal_result_flow(settings.table_name, encrypt, job.id, value))
        text = canonical_json(value)
    if value is None or len(text) <= settings.inline_result_bytes:
        return StoredResult(value=value)
    reference = objects.result_ref(settings.payload_bucket, job.id, str(job.claim_token))
    try:
        await arun(objects.put_flow(reference, text.encode()))
    except ObjectStoreError as exc:
        # The handler's work is done: rerunning it for want of a place to keep its result would
        # repeat its side effects. The success is recorded with a note saying what was lost.
        return StoredResult(value={"sqsjobs_note": f"result of {len(text)} bytes not stored: {exc}"[:500]})
    return StoredResult(ref=reference)
