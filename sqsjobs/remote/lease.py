"""A lease: what an HTTP worker holds for one claimed job, and hands back with each heartbeat and its end.

The server that hands jobs out stays stateless (it may be one of many Lambda instances), so
everything it needs later travels inside the lease: the job, the claim it made (owner and fencing
epoch: the record's claim token is read again, never sent out), the message (receipt handle, body,
when it was sent) and the run's deadline. The lease is signed with the server's key
(``itsdangerous``, HMAC-SHA256 over the compressed JSON): a worker can read it, but any change, or
a lease made up from scratch, fails the signature and is refused before anything is read or
written. A valid but stale lease (the job ran out its lease and was claimed again, or finished) is
caught by the fenced write itself: the record's epoch or owner no longer matches.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from sqsjobs._aws import Call, Flow
from sqsjobs.delivery import Delivery
from sqsjobs.errors import LeaseInvalid

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

#: The server's signing key (any string; the same on every instance that serves one App's workers).
LEASE_KEY_ENV = "SQSJOBS_LEASE_KEY"
#: A file holding the key (a mounted secret).
LEASE_KEY_FILE_ENV = "SQSJOBS_LEASE_KEY_FILE"
#: A Secrets Manager secret holding the key (infra's API function: its ``LeaseKey`` secret).
LEASE_KEY_SECRET_ENV = "SQSJOBS_LEASE_KEY_SECRET_ARN"
SALT = "sqsjobs.lease.v1"


@dataclass(frozen=True)
class Lease:
    """One claimed job as its HTTP worker holds it."""

    job_id: str
    job_type: str
    #: The claim: the record's ``lease_owner`` (``http:<worker id>``) and fencing epoch.
    owner: str
    epoch: int
    #: The message that brought the job: its ack, a retry's re-arm and a dead letter need it.
    delivery: Delivery
    #: Epoch seconds: when the run started, and past which it is a timeout (the type's ``timeout``).
    started_at: float
    deadline: float


class LeaseSealer:
    """Signs leases into opaque strings and opens them again, refusing any it did not sign."""

    def __init__(self, key: str) -> None:
        """Sign with ``key``; itsdangerous (the ``api`` extra) is imported here, so deployments read this module without it."""
        from itsdangerous import URLSafeSerializer

        if not key:
            raise ValueError("a lease key must not be empty")
        self._serializer = URLSafeSerializer(key, salt=SALT)

    def seal(self, lease: Lease) -> str:
        """The lease as the string an HTTP worker holds."""
        return str(self._serializer.dumps(asdict(lease)))

    def open(self, sealed: str) -> Lease:
        """The lease ``sealed`` carries; ``LeaseInvalid`` unless this key signed it unchanged."""
        from itsdangerous import BadSignature

        try:
            data: Mapping[str, Any] = self._serializer.loads(sealed)
        except BadSignature:
            raise LeaseInvalid("the lease was altered or was not issued by this server") from None
        try:
            return Lease(**{**data, "delivery": Delivery(**data["delivery"])})
        except (TypeError, KeyError):  # signed by this key with another layout: a lease of another release
            raise LeaseInvalid("the lease is not one this server reads") from None


def secret_flow(arn: str) -> Flow[str]:
    """The lease key kept in Secrets Manager under ``arn`` (one GetSecretValue, at the server's start)."""
    response = yield Call("secretsmanager", "get_secret_value", {"SecretId": arn})
    return str(response["SecretString"])


def lease_key(
    fallback_secret: str | None = None,
    environ: Mapping[str, str] | None = None,
    *,
    run: Callable[[Flow[str]], str] | None = None,
) -> tuple[str, str]:
    """The key leases are signed with, and where it came from.

    ``SQSJOBS_LEASE_KEY`` (or the file ``SQSJOBS_LEASE_KEY_FILE`` names, or the Secrets Manager
    secret ``SQSJOBS_LEASE_KEY_SECRET_ARN`` names, read with ``run``) first: set one wherever several
    servers hand out one App's jobs. Otherwise a key derived from ``fallback_secret`` (the API
    tokens': stable while they are), else a random key: leases then last as long as this process.
    """
    env = os.environ if environ is None else environ
    if key := env.get(LEASE_KEY_ENV, ""):
        return key, LEASE_KEY_ENV
    if path := env.get(LEASE_KEY_FILE_ENV, ""):
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip(), LEASE_KEY_FILE_ENV
    if (arn := env.get(LEASE_KEY_SECRET_ENV, "")) and run is not None:
        return run(secret_flow(arn)), LEASE_KEY_SECRET_ENV
    if fallback_secret:
        return hashlib.sha256(f"{SALT}:{fallback_secret}".encode()).hexdigest(), "the API tokens"
    return secrets.token_hex(32), "random (this process only)"
