"""Sans-I/O requests that create a job: the producer's record and its message.

These decide where a job's data lives. The message carries the payload; the record keeps its hash and
size, and keeps the payload itself only when no message will (held, unsent) — so the happy path's
record stays under 1 KB, one write unit per write (docs/scale.md).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from sqsjobs.envelope import Envelope
from sqsjobs.errors import ConfigurationError, IdempotencyConflict
from sqsjobs.job import BatchPlace, ChainPlace, Job, JobStatus, Notify
from sqsjobs.options import KeyPolicy
from sqsjobs.store.codec import (
    OPTIONAL_STRINGS,
    Item,
    av_json,
    av_n,
    av_s,
    canonical_json,
    payload_hash,
    place_fields,
    tags_attr,
)
from sqsjobs.store.conditions import All, Missing, eq
from sqsjobs.store.schema import HELD, PENDING, attention_key
from sqsjobs.store.write import Put, Write, new_id_only
from sqsjobs.transport import objects

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from sqsjobs._aws import Flow


@runtime_checkable
class KeySettler(KeyPolicy, Protocol):
    """A dedup mode that writes before the job's own record: it settles each of its jobs itself.

    ``WhileActive`` takes a key item, ``Debounce`` gathers into the key's job; the producer asks
    ``settle_flow`` first, and writes the job only when the answer says so.
    """

    def settle_flow(self, job: NewJob, env: KeyEnv) -> Flow[Settled]:
        """Take the key for ``job``, or find the job that holds it."""
        ...


@dataclass(frozen=True)
class KeyEnv:
    """What a key policy's writes need: the table, the records' retention, and a job's queue URL."""

    table: str
    retention_s: float
    queue_url: Callable[[NewJob], Flow[str]]


@dataclass(frozen=True)
class Settled:
    """A key policy's answer for one job: the id the enqueue returns, and whether it still writes the job."""

    #: The job's id, or the live one's that holds the key (an ``EnqueuedId`` saying which).
    id: str
    #: True: the plain enqueue writes and sends ``job`` (it took the key); False: nothing more to write.
    write: bool


def outside_producer(job: NewJob, where: str) -> NewJob:
    """``job``, unless its mode settles it first (``ValueError``): not in a transaction, batch or chain.

    Such a mode writes its key before the record, which those write together with others.
    """
    if isinstance(job.policy, KeySettler):
        raise ValueError(
            f"{job.type!r}: {job.policy.mode} is not supported in {where} (its key item is written "
            "before the job); enqueue it with app.enqueue"
        )
    return job


@dataclass(frozen=True)
class NewJob:
    """What a producer asks for; ``put_job`` turns it into the first write."""

    id: str
    type: str
    queue: str
    payload: Any
    payload_version: int
    #: None: the producer has no handler for the type; the worker's claim applies the type's policy.
    max_attempts: int | None
    run_at: float
    now: float
    #: True when no SQS message is sent now (run_at beyond the SQS delay cap); the sweeper sends it.
    held: bool = False
    idempotency_key: str | None = None
    tenant: str | None = None
    #: Routing (``sqsjobs.transport.routes``): stored only when set, so a plain job's record is unchanged.
    priority: str | None = None
    serialize_key: str | None = None
    parent_id: str | None = None
    root_id: str | None = None
    trace: str | None = None
    #: A chain step's place (``sqsjobs.chains.namespace``).
    chain: ChainPlace | None = None
    #: A batch item's place: its key is also that of its entry in the batch's item index.
    batch: BatchPlace | None = None
    #: Where its end is told (``sqsjobs.notify``).
    notify: Notify | None = None
    #: Set when the payload is too large for the message (or for the record of a held job): it is
    #: then an S3 object in this bucket (``payload_ref``), written before the message is sent.
    payload_bucket: str | None = None
    #: The deadline (epoch seconds, to the millisecond): not started by then, the job expires.
    start_by: float | None = None
    #: The key's dedup mode (``KeyPolicy``): ``first_wins`` answers another payload with the
    #: job the key already names, instead of ``IdempotencyConflict``. Not stored in the record.
    policy: KeyPolicy | None = None
    #: What the job is about (``sqsjobs.store.tags``): kept on the record, each one findable.
    tags: Mapping[str, str] | None = None
    #: The KMS key its payload is sealed with (``sqsjobs.store.sealing``): the producer seals it before
    #: anything is written, and nothing writes an encrypted job that is not sealed (``unsealed``).
    encrypt: str | None = None
    #: Set with the sealed payload: the keyed hash of the plaintext, which is the job's ``payload_hash``.
    sealed_hash: str | None = None

    # Cached: the record, the message and a conflict check all need them, once per job.
    @functools.cached_property
    def payload_json(self) -> str:
        """The payload in canonical JSON (what a record keeps, and what its size counts)."""
        return canonical_json(self.payload)

    @functools.cached_property
    def payload_hash(self) -> str:
        """See ``payload_hash``; a sealed payload's is the keyed hash of its plaintext."""
        return self.sealed_hash or payload_hash(self.type, self.payload_version, self.payload)

    @functools.cached_property
    def payload_ref(self) -> str | None:
        """The payload's S3 object, when it has one (``sqsjobs.transport.objects``)."""
        if self.payload_bucket is None:
            return None
        return objects.payload_ref(self.payload_bucket, self.id, self.payload_hash)


def put_job(table: str, job: NewJob, *, unsent: bool = False, pending_until: float | None = None) -> Put:
    """PutItem that creates the record only if the id is new (the idempotency check).

    The payload stays out of the record when a message carries it (the record is then a few hundred
    bytes: one write unit). A held job (no message yet) keeps it with a ``held`` attention entry; an
    ``unsent`` one (SQS refused its message) with a ``pending`` entry the sweeper sends at once; one
    whose message goes only later (``pending_until``: a transactional enqueue sends it after the
    commit) with a ``pending`` entry the sweeper sends at ``pending_until`` unless it is cleared. A
    payload in S3 is never copied: the record keeps its reference.
    """
    _sealed_only(job)
    item: Item = {
        "id": av_s(job.id),
        "type": av_s(job.type),
        "queue": av_s(job.queue),
        "status": av_s(JobStatus.QUEUED),
        "payload_hash": av_s(job.payload_hash),
        "payload_size": av_n(len(job.payload_json)),
        "payload_version": av_n(job.payload_version),
        "attempt": av_n(0),
        "lease_epoch": av_n(0),
        "run_at": av_n(job.run_at),
        "created_at": av_n(job.now),
        "updated_at": av_n(job.now),
    }
    if job.payload_ref is not None:
        item["payload_ref"] = av_s(job.payload_ref)
    if job.held or unsent or pending_until is not None:
        due = job.run_at if job.held else job.now if pending_until is None else pending_until
        item |= {
            "attn": av_s(attention_key(HELD if job.held else PENDING, job.id)),
            "due": av_n(due),
        }
        if job.payload_ref is None:
            item["payload"] = av_s(job.payload_json)
    if job.max_attempts is not None:  # None: a producer without the handler; the claim resolves it
        item["max_attempts"] = av_n(job.max_attempts)
    if job.start_by is not None:
        item["start_by"] = av_n(job.start_by)
    for name in OPTIONAL_STRINGS:
        value = getattr(job, name)
        if value is not None:
            item[name] = av_s(value)
    item |= place_fields(job.batch, job.chain, job.notify)
    if job.tags:
        item["tags"] = tags_attr(job.tags)
    return new_id_only(table, item)


def envelope_of(job: NewJob | Job) -> Envelope:
    """The message that carries ``job`` (a new job, or a record that keeps its payload)."""
    if isinstance(job, NewJob):
        _sealed_only(job)
        in_s3 = job.payload_ref is not None
        return Envelope(
            job.id,
            job.type,
            queue=job.queue,
            payload=None if in_s3 else job.payload,
            has_payload=True,
            payload_hash=job.payload_hash,
            payload_version=job.payload_version,
            created_at=job.now,
            run_at=job.run_at,
            tenant=job.tenant,
            idempotency_key=job.idempotency_key,
            trace=job.trace,
            parent_id=job.parent_id,
            root_id=job.root_id,
            max_attempts=job.max_attempts,
            payload_ref=job.payload_ref,
            payload_size=len(job.payload_json) if in_s3 else None,
            start_by=job.start_by,
            batch=job.batch,
            priority=job.priority,
            serialize_key=job.serialize_key,
            chain=job.chain,
            notify=job.notify,
            tags=job.tags or None,
        )
    if job.payload_hash is None:  # a record of the first layout: the claim reads its payload
        return Envelope(job.id, job.type)
    return Envelope(
        job.id,
        job.type,
        queue=job.queue,
        payload=None if job.payload_ref else job.payload,
        has_payload=True,
        payload_hash=job.payload_hash,
        payload_version=job.payload_version,
        created_at=job.created_at.timestamp(),
        run_at=job.run_at.timestamp(),
        tenant=job.tenant,
        idempotency_key=job.idempotency_key,
        trace=job.trace,
        parent_id=job.parent_id,
        root_id=job.root_id,
        payload_ref=job.payload_ref,
        payload_size=job.payload_size if job.payload_ref else None,
        start_by=job.start_by.timestamp() if job.start_by else None,
        batch=job.batch,
        priority=job.priority,
        serialize_key=job.serialize_key,
        chain=job.chain,
        notify=job.notify,
        tags=job.tags or None,
    )


def _sealed_only(job: NewJob) -> None:
    """Refuse to write or send an encrypted type's job whose payload is not sealed: never its plaintext.

    ``App.enqueue``/``enqueue_many`` (and ``POST /jobs``) seal; a path that does not (a transaction,
    a batch, a chain, a finish hook) is refused here, before anything leaves the process.
    """
    if job.encrypt is not None and job.sealed_hash is None:
        raise ConfigurationError(
            f"job type {job.type!r} is encrypted (docs/encryption.md): enqueue it with app.enqueue or "
            "enqueue_many; transactions, batches, chains and hooks do not encrypt payloads yet"
        )


def is_same_job(old: Mapping[str, Any], job: NewJob) -> bool:
    """True when the record an idempotency key found is ``job`` itself: the same type and payload hash."""
    return old.get("payload_hash") == av_s(job.payload_hash) and old.get("type") == av_s(job.type)


def interpret_put_conflict(job: NewJob, old: Item) -> str:
    """A put refused by the id condition: the same payload in ``old`` is the same job, else a conflict.

    Under a ``first_wins`` mode (``Throttle``) the first job of the key's window wins whatever the
    payload: its id is the answer.
    """
    first_wins = job.policy is not None and job.policy.first_wins
    if is_same_job(old, job) or (first_wins and old.get("type") == av_s(job.type)):
        return str(old["id"]["S"])
    raise IdempotencyConflict(
        f"idempotency key {job.idempotency_key!r} already names job {old['id']['S']} of type "
        f"{old['type']['S']!r} with a different payload; reuse the same payload or choose a new key"
    )


def kept_payload(job: Job, payload: Any) -> dict[str, Any]:
    """The payload a finished or held record keeps for a later retry: none when it is an S3 object."""
    return {} if job.payload_ref is not None else {"payload": av_json(payload)}


#: The record an enqueue's put made, never claimed and with no attention entry: nothing but its
#: message would bring it back.
UNWITNESSED = All(
    (
        eq("status", ":queued"),
        eq("attempt", ":zero"),
        eq("lease_epoch", ":zero"),
        eq("payload_hash", ":hash"),
        Missing("attn"),
    )
)


def mark_unsent(table: str, job: NewJob) -> Write:
    """After SQS refused the message of a job whose record the put (sent at once) created without it.

    The record takes the payload (unless S3 has it) and a ``pending`` entry due now: the sweeper
    sends the message, as it does for a record ``put_job(unsent=True)`` wrote. A refusal means the
    record already has a witness (another enqueue's message claimed it, or it has an entry): nothing
    to do. This is the only second write an enqueue makes, and only when a send failed.
    """
    sets: list[tuple[str, str]] = [("attn", ":attn"), ("due", ":now")]
    values: dict[str, Any] = {
        ":attn": av_s(attention_key(PENDING, job.id)),
        ":now": av_n(job.now),
    }
    if job.payload_ref is None:
        sets.append(("payload", ":payload"))
        values[":payload"] = av_s(job.payload_json)
    guard = {
        ":queued": av_s(JobStatus.QUEUED),
        ":zero": av_n(0),
        ":hash": av_s(job.payload_hash),
    }
    return Write(table, {"id": av_s(job.id)}, tuple(sets), values=values, old_on_refusal=False).guard(
        "unwitnessed", UNWITNESSED, guard
    )
