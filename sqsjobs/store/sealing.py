"""Payload and result encryption: envelope encryption with AWS KMS data keys and AES-256-GCM.

Opt-in (``App(encrypt="alias/...")`` for every type, ``@job(version=PayloadVersion(n, encrypt=...))``
for one; docs/encryption.md). A sealed payload or result is a JSON object of one member, so every
path that carries a payload (the message, the S3 object, the record of a held or dead job) carries
it unchanged and never sees the plaintext::

    {"sqsjobs.sealed": {"v": 1, "key": <KMS key ARN>, "dk": <wrapped data key>, "iv": <nonce>, "ct": <AES-GCM>}}

- **The cipher** is ``cryptography``'s AESGCM (a 96-bit random nonce per seal, the 128-bit tag
  checked at open); its associated data binds a ciphertext to its job and its role
  (``sqsjobs:<job id>:payload``), so a sealed payload copied into another job, or a result into a
  payload, does not open. Nothing here is a cipher of our own.
- **Data keys** come from KMS ``GenerateDataKey`` (AES_256) and are unwrapped by ``Decrypt``, both as
  ``Call``s of the sans-I/O flows, so the asyncio worker never blocks on KMS and the endpoint is the
  App's like every other client's. The encryption context names the jobs table: a key wrapped for one
  App's table does not unwrap for another's, and CloudTrail shows which table asked.
- **The cache** (``Keys``, one per process): a data key seals at most ``KEY_MAX_USES`` payloads or
  results for at most ``KEY_MAX_AGE_S`` seconds, so a burst of enqueues costs one ``GenerateDataKey``;
  an unwrapped key is kept ``KEY_MAX_AGE_S`` seconds, at most ``OPENED_MAX`` of them, so a worker
  opens a producer's jobs with one ``Decrypt`` per data key.
- **The hash** a record and a message carry is an HMAC-SHA256 of the plaintext (type, version,
  canonical JSON) under a hash key of the KMS key, not a plain SHA-256: a low-entropy payload (a
  yes/no, a birth date) could otherwise be found by hashing candidates. It is the same for the same
  plaintext, so idempotency still tells the same job from a conflicting one. The hash key is made
  once per KMS key and table: 32 random bytes from ``GenerateDataKey``, kept wrapped in the jobs table
  (item ``sealkey#<key ARN>``, created with a conditional put, so concurrent first producers agree)
  and unwrapped once per process.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import hmac
import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from sqsjobs._aws import Call, Flow
from sqsjobs.errors import ConfigurationError, EncryptionError, PayloadInvalid
from sqsjobs.store.apply import Refused, apply
from sqsjobs.store.codec import SEALED, canonical_json, sealed_key
from sqsjobs.store.write import new_id_only

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sqsjobs.config import Settings
    from sqsjobs.registry import HandlerSpec
    from sqsjobs.store.enqueue import NewJob

#: A data key seals at most this many payloads and results (AES-GCM with random 96-bit nonces stays
#: far below NIST SP 800-38D's 2**32 per key) ...
KEY_MAX_USES = 10_000
#: ... for at most this long; an unwrapped key is kept as long. It bounds how long a key disabled in
#: KMS still seals or opens in a running process.
KEY_MAX_AGE_S = 300.0
#: Unwrapped data keys a process keeps (least recently used first out): one per producer process
#: and 5 minutes that a worker sees jobs from.
OPENED_MAX = 512
#: The hash key's item in the jobs table (``id`` = this + the KMS key ARN).
HASH_KEY_PREFIX = "sealkey#"
#: What a sealed value is: a reason a job cannot run with it records.
UNOPENABLE = "payload cannot be decrypted"
#: KMS answers that no retry will change: the key is gone, disabled, another's, or refuses this role.
#: Any other (throttling, an outage) is a passing fault, retried like an S3 one.
PERMANENT_CODES = frozenset(
    {
        "AccessDeniedException",
        "NotFoundException",
        "DisabledException",
        "KMSInvalidStateException",
        "InvalidCiphertextException",
        "IncorrectKeyException",
        "InvalidKeyUsageException",
        "KeyUnavailableException",
        "ValidationException",
    }
)


def key_of(spec: HandlerSpec | None, settings: Settings) -> str | None:
    """The KMS key a type's payloads and results are sealed with: the type's own, else the App's, else none."""
    own = spec.encrypt if spec is not None else None
    return own or settings.encrypt or None


def aad(job_id: str, role: str) -> bytes:
    """AES-GCM's associated data: the ciphertext opens only as ``role`` (payload, result) of ``job_id``."""
    return f"sqsjobs:{job_id}:{role}".encode()


def sealed_size(plain_bytes: int) -> int:
    """An upper bound of a sealed value's canonical JSON length, for where it goes (message, S3).

    Base64 of the ciphertext and its tag, plus the wrapped key, the ARN and the names (a KMS
    ciphertext blob is under 400 bytes).
    """
    return 4 * ((plain_bytes + 16 + 2) // 3) + 1024


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def _context(table: str) -> dict[str, str]:
    return {"sqsjobs:table": table}


@dataclass
class _DataKey:
    arn: str
    plaintext: bytes
    wrapped: bytes
    made_at: float
    uses: int = 0


class Keys:
    """A process's data keys: the one each KMS key seals with, the ones unwrapped, the hash keys. Thread safe."""

    def __init__(self, clock: Any = time.monotonic) -> None:
        """``clock``: monotonic seconds (a test may pass its own)."""
        self._clock = clock
        self._lock = threading.Lock()
        self._sealing: dict[tuple[str, str], _DataKey] = {}
        self._opened: OrderedDict[bytes, tuple[bytes, float]] = OrderedDict()
        self._hash: dict[tuple[str, str], bytes] = {}

    def take(self, table: str, key_id: str) -> _DataKey | None:
        """The data key ``key_id`` seals with now, counted as used; None when there is none fresh."""
        with self._lock:
            found = self._sealing.get((table, key_id))
            if found is None or found.uses >= KEY_MAX_USES or self._clock() - found.made_at > KEY_MAX_AGE_S:
                return None
            found.uses += 1
            return found

    def keep(self, table: str, key_id: str, arn: str, plaintext: bytes, wrapped: bytes) -> _DataKey:
        """A new data key for ``key_id``, used once already; also kept as an unwrapped one."""
        made = _DataKey(arn, plaintext, wrapped, self._clock(), uses=1)
        with self._lock:
            self._sealing[(table, key_id)] = made
        self.opened(wrapped, plaintext)
        return made

    def opened(self, wrapped: bytes, plaintext: bytes | None = None) -> bytes | None:
        """Keep ``plaintext`` as ``wrapped``'s, or find it (None when not kept or too old)."""
        with self._lock:
            if plaintext is not None:
                self._opened[wrapped] = (plaintext, self._clock())
                while len(self._opened) > OPENED_MAX:
                    self._opened.popitem(last=False)
                return plaintext
            found = self._opened.get(wrapped)
            if found is None or self._clock() - found[1] > KEY_MAX_AGE_S:
                self._opened.pop(wrapped, None)
                return None
            self._opened.move_to_end(wrapped)
            return found[0]

    def forget(self) -> None:
        """Drop every key kept (a test's process then meets KMS as a fresh worker would)."""
        with self._lock:
            self._sealing.clear()
            self._opened.clear()
            self._hash.clear()

    def hash_key(self, table: str, arn: str, key: bytes | None = None) -> bytes | None:
        """Keep or find the hash key of ``arn`` for ``table`` (it never changes: kept for the process)."""
        with self._lock:
            if key is not None:
                self._hash[(table, arn)] = key
            return self._hash.get((table, arn))


_T = TypeVar("_T")

#: The process's keys, shared by its Apps (each keyed by table, so two Apps never share a key).
KEYS = Keys()


def _opening(flow: Flow[_T]) -> Flow[_T]:
    """``flow`` of a worker or reader opening a value, its KMS refusals read.

    A KMS answer no retry changes is ``PayloadInvalid`` (the job cannot run: it ends dead with the
    reason, never retried in a loop); others raise as they are.
    """
    try:
        return (yield from flow)
    except EncryptionError as exc:
        if exc.code in PERMANENT_CODES:
            raise PayloadInvalid(f"{exc}", reason=UNOPENABLE) from exc
        raise


def data_key_flow(table: str, key_id: str, keys: Keys = KEYS) -> Flow[_DataKey]:
    """The data key to seal with under ``key_id``: the cached one, else a new one from KMS."""
    found = keys.take(table, key_id)
    if found is not None:
        return found
    params = {"KeyId": key_id, "KeySpec": "AES_256", "EncryptionContext": _context(table)}
    made = yield Call("kms", "generate_data_key", params)
    return keys.keep(
        table, key_id, str(made["KeyId"]), bytes(made["Plaintext"]), bytes(made["CiphertextBlob"])
    )


def unwrap_flow(table: str, arn: str, wrapped: bytes, keys: Keys = KEYS) -> Flow[bytes]:
    """The plaintext of a wrapped data key: cached, else from KMS ``Decrypt`` (the key named, as AWS advises)."""
    found = keys.opened(wrapped)
    if found is not None:
        return found
    answer = yield Call(
        "kms", "decrypt", {"CiphertextBlob": wrapped, "KeyId": arn, "EncryptionContext": _context(table)}
    )
    plaintext = bytes(answer["Plaintext"])
    keys.opened(wrapped, plaintext)
    return plaintext


def _aesgcm(key: bytes) -> Any:
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError:  # pragma: no cover - the extra is part of every test install
        raise ConfigurationError(
            "payload encryption needs the 'cryptography' package: pip install 'sqsjobs[encryption]'"
        ) from None
    return AESGCM(key)


def seal_flow(
    table: str, key_id: str, associated: bytes, plaintext: bytes, keys: Keys = KEYS
) -> Flow[dict[str, Any]]:
    """``plaintext`` sealed under a data key of ``key_id``: the JSON value that replaces it."""
    data_key = yield from data_key_flow(table, key_id, keys)
    nonce = os.urandom(12)
    sealed = _aesgcm(data_key.plaintext).encrypt(nonce, plaintext, associated)
    fields = {
        "v": 1,
        "key": data_key.arn,
        "dk": _b64(data_key.wrapped),
        "iv": _b64(nonce),
        "ct": _b64(sealed),
    }
    return {SEALED: fields}


def open_flow(table: str, value: Any, associated: bytes, keys: Keys = KEYS) -> Flow[bytes]:
    """The plaintext of a sealed value; ``PayloadInvalid`` (reason ``UNOPENABLE``) when it cannot be had.

    ``EncryptionError``: KMS did not answer (throttled, unreachable): a passing fault.
    """
    arn = sealed_key(value)
    if arn is None:
        raise PayloadInvalid("not a sealed value", reason=UNOPENABLE)
    fields = value[SEALED]
    try:
        wrapped, nonce, sealed = (base64.b64decode(fields[k], validate=True) for k in ("dk", "iv", "ct"))
    except (KeyError, TypeError, ValueError, binascii.Error):
        raise PayloadInvalid(
            "a sealed value without its key, nonce or ciphertext", reason=UNOPENABLE
        ) from None
    if fields.get("v") != 1:
        raise PayloadInvalid(f"sealed value of unknown version {fields.get('v')!r}", reason=UNOPENABLE)
    plain_key = yield from unwrap_flow(table, arn, wrapped, keys)
    from cryptography.exceptions import InvalidTag

    try:
        opened: bytes = _aesgcm(plain_key).decrypt(nonce, sealed, associated)
    except (InvalidTag, ValueError):
        raise PayloadInvalid(
            "sealed value does not open: altered, or sealed for another job", reason=UNOPENABLE
        ) from None
    return opened


def hash_key_flow(table: str, arn: str, keys: Keys = KEYS) -> Flow[bytes]:
    """The hash key of ``arn`` for ``table``: read (or, the first time, made) in the table, unwrapped once."""
    found = keys.hash_key(table, arn)
    if found is not None:
        return found
    key = {"id": {"S": HASH_KEY_PREFIX + arn}}
    context = {**_context(table), "sqsjobs:use": "payload-hash"}
    got = yield Call("dynamodb", "get_item", {"TableName": table, "Key": key, "ConsistentRead": True})
    item = got.get("Item")
    if item is None:
        params = {"KeyId": arn, "KeySpec": "AES_256", "EncryptionContext": context}
        made = yield Call("kms", "generate_data_key", params)
        written = yield from apply(
            new_id_only(table, {**key, "wrapped": {"B": bytes(made["CiphertextBlob"])}})
        )
        if not isinstance(written, Refused):
            return keys.hash_key(table, arn, bytes(made["Plaintext"])) or b""
        item = written.item  # another process made it first: its key is the one
        if item is None:
            raise written.as_error()
    wrapped = bytes(item["wrapped"]["B"])
    answer = yield Call(
        "kms", "decrypt", {"CiphertextBlob": wrapped, "KeyId": arn, "EncryptionContext": context}
    )
    return keys.hash_key(table, arn, bytes(answer["Plaintext"])) or b""


def keyed_hash_flow(
    table: str, arn: str, job_type: str, version: int, canonical: bytes, keys: Keys = KEYS
) -> Flow[str]:
    """``payload_hash`` of a sealed payload: HMAC-SHA256 of what ``codec.canonical_hash`` hashes, under the hash key.

    Prefixed ``k`` so a keyed hash is never mistaken for a plain one (it is 65 characters, not 64).
    """
    secret = yield from hash_key_flow(table, arn, keys)
    digest = hmac.new(secret, f"{job_type}\0{version}\0".encode() + canonical, hashlib.sha256).hexdigest()
    return f"k{digest}"


def seal_jobs_flow(jobs: Sequence[NewJob], table: str, keys: Keys = KEYS) -> Flow[list[NewJob]]:
    """The jobs, each whose type is encrypted with its payload sealed and its keyed hash (``NewJob.sealed_hash``)."""
    out: list[NewJob] = []
    for job in jobs:
        if job.encrypt is None or job.sealed_hash is not None:
            out.append(job)
            continue
        text = job.payload_json.encode()
        sealed = yield from seal_flow(table, job.encrypt, aad(job.id, "payload"), text, keys)
        digest = yield from keyed_hash_flow(
            table, sealed[SEALED]["key"], job.type, job.payload_version, text, keys
        )
        out.append(dataclasses.replace(job, payload=sealed, sealed_hash=digest))
    return out


def open_payload_flow(
    table: str,
    job_id: str,
    job_type: str,
    version: int,
    expected_hash: str | None,
    value: Any,
    keys: Keys = KEYS,
) -> Flow[bytes]:
    """A sealed payload's canonical JSON, checked against the hash its record and message carry.

    A mismatch is ``PayloadInvalid``: the job never runs with a payload it was not enqueued with.
    """
    plaintext = yield from _opening(open_flow(table, value, aad(job_id, "payload"), keys))
    if expected_hash is not None:
        arn = sealed_key(value) or ""
        digest = yield from _opening(keyed_hash_flow(table, arn, job_type, version, plaintext, keys))
        if not hmac.compare_digest(digest, expected_hash):
            raise PayloadInvalid(
                f"job {job_id}: its sealed payload is not the one it was enqueued with", reason=UNOPENABLE
            )
    return plaintext


def seal_result_flow(
    table: str, key_id: str, job_id: str, value: Any, keys: Keys = KEYS
) -> Flow[dict[str, Any]]:
    """A result (JSON data) sealed for ``job_id``."""
    return (yield from seal_flow(table, key_id, aad(job_id, "result"), canonical_json(value).encode(), keys))


def open_result_flow(table: str, job_id: str, value: Any, keys: Keys = KEYS) -> Flow[bytes]:
    """A sealed result's canonical JSON."""
    return (yield from _opening(open_flow(table, value, aad(job_id, "result"), keys)))
