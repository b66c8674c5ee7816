"""The operator's ``replay`` transition: a dead or cancelled job back to ``queued``.

Shared by ``sqsjobs jobs retry`` (``App.retry``) and ``sqsjobs dlq replay``. Durable state first
(docs/lifecycle.md: the message follows the write, never the other way): the record is re-validated against the *current* handler (an older payload upgraded
by its upcasts first, as the worker will), then moved with one conditional write (attempts reset,
job id, payload and idempotency key kept, an audit entry appended), and only then is a hint sent.
If the hint is lost, the record is still ``queued`` and the sweeper dispatches it; a re-run that
finds the job already queued sends a hint again, which is harmless because the claim decides.

With a corrected payload (``payload=``, ``--payload``) the same write replaces the record's payload,
hash, size and version, the audit entry names the old and new hashes, and the hint carries the new
payload. A message that still carries the old one is refused by the claim (payload hashes differ).
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import tenacity

from sqsjobs._aws import Call, Flow, retrying
from sqsjobs.batches.completion import BatchEnv, replay_write_flow
from sqsjobs.errors import (
    AwsError,
    HandlerNotFound,
    InvalidTransition,
    JobNotFound,
    PayloadError,
    PayloadInvalid,
    PayloadTooLarge,
    RecordChanged,
)
from sqsjobs.ops._common import actor
from sqsjobs.producer import route_of
from sqsjobs.store import codec, enqueue, operator, requests, sealing
from sqsjobs.store.apply import Refused, apply
from sqsjobs.store.codec import canonical_json
from sqsjobs.store.operator import NewPayload
from sqsjobs.store.state_table import STATE_TABLE
from sqsjobs.transport import objects

if TYPE_CHECKING:
    from sqsjobs.config import Settings
    from sqsjobs.job import Job
    from sqsjobs.registry import Registry
    from sqsjobs.transport.queues import QueueUrls

#: Re-reads when the record changed between our read and our conditional write.
CONFLICT_RETRIES = 3
REPLAYABLE = STATE_TABLE["replay"].sources

Outcome = Literal["requeued", "would_requeue", "not_replayable", "invalid", "missing"]


class Keep(enum.Enum):
    """The ``payload=`` default of a requeue: the job keeps its own payload."""

    PAYLOAD = "keep"


#: ``payload=KEEP`` (the default): requeue the job with the payload it has.
KEEP = Keep.PAYLOAD


#: Read and write again at once (no wait: the record has already changed; a re-read shows how).
_ON_CONFLICT = tenacity.Retrying(
    stop=tenacity.stop_after_attempt(CONFLICT_RETRIES),
    retry=tenacity.retry_if_exception_type(RecordChanged),
    reraise=True,
)


@dataclass(frozen=True)
class Requeue:
    """What happened to one job."""

    job_id: str
    outcome: Outcome
    #: The record after the write (``requeued``) or as found.
    job: Job | None = None
    #: Why it was not requeued (``invalid``, ``not_replayable``).
    reason: str = ""
    #: For ``requeued``: whether the SQS hint went out (if not, the sweeper dispatches the record).
    hint_sent: bool = False
    #: The corrected payload that replaces (``would_requeue``: would replace) the job's, if one was given.
    payload_change: PayloadChange | None = None


@dataclass(frozen=True)
class PayloadChange:
    """A corrected payload replacing a job's: what the audit entry records."""

    old_hash: str | None
    old_version: int
    new: NewPayload

    def audit(self) -> dict[str, str | int | None]:
        """The audit entry's fields."""
        return {
            "old_payload_hash": self.old_hash,
            "new_payload_hash": self.new.hash,
            "old_payload_version": self.old_version,
            "new_payload_version": self.new.version,
        }

    def __str__(self) -> str:
        old = (self.old_hash or "none")[:12]
        return f"payload version {self.old_version} → {self.new.version}, hash {old} → {self.new.hash[:12]}"


#: A job whose payload only its message carries is not requeued this close to that message's expiry
#: (at most this part of the retention, and at most an hour): a worker must still meet the message.
MESSAGE_EXPIRY_MARGIN = 0.25
MESSAGE_EXPIRY_MARGIN_MAX_S = 3600.0


def check_replayable(registry: Registry, job: Job, *, settings: Settings, now: float) -> str:
    """Why the current code would refuse to run ``job`` ('' when it would run it)."""
    try:
        spec = registry.get(job.type)
    except HandlerNotFound as exc:
        return str(exc)
    if job.payload_in_message_only:
        # Cancelled while it waited: its own message, still queued, carries the payload, and is the
        # requeued record's only witness; once SQS deletes it (retention counts from the enqueue),
        # the payload is gone and the record would be queued with nothing to bring it back.
        retention = settings.message_retention_s
        margin = min(retention * MESSAGE_EXPIRY_MARGIN, MESSAGE_EXPIRY_MARGIN_MAX_S)
        if now < job.created_at.timestamp() + retention - margin:
            return ""
        return (
            "its payload was only in its message (it was cancelled before a worker met it), and SQS "
            f"deletes that message {retention} s after the enqueue (message_retention_s); give the "
            "payload again (retry with payload=..., `sqsjobs jobs retry --payload`)"
        )
    if job.payload_ref is not None or codec.sealed_key(job.payload) is not None:
        # an S3 object, or a sealed payload (docs/encryption.md): the worker opens, checks and
        # validates it as it runs (no GET, no KMS call per replay here)
        return ""
    if job.payload_version > spec.version:
        return f"payload version {job.payload_version} is newer than the handler's {spec.version}"
    try:
        spec.load(job.payload, job.payload_version)  # what the worker will do: upcast, then validate
    except PayloadInvalid as exc:
        return str(exc)
    return ""


def new_payload(registry: Registry, settings: Settings, job: Job, payload: Any) -> NewPayload:
    """``payload`` as it would replace ``job``'s: validated and dumped by the current handler.

    It is written for the current code, so it is stamped with the handler's version.

    Raises:
        HandlerNotFound: the job's type has no handler here.
        PayloadInvalid: the handler refuses it.
        PayloadTooLarge: it is over ``Settings.max_payload_bytes``. One over the record's limit
            (``held_inline_payload_bytes``) gets an S3 reference; ``requeue_flow`` writes the object.
    """
    spec = registry.get(job.type)
    if sealing.key_of(spec, settings) is not None:  # it would be written in the clear: refused
        raise PayloadInvalid(
            f"job {job.id}: its type is encrypted, and a corrected payload is not encrypted yet "
            "(docs/encryption.md); enqueue a new job instead",
            reason="encrypted type",
        )
    new = NewPayload.of(job.type, spec.version, spec.dump(payload))
    if new.size > settings.max_payload_bytes:
        raise PayloadTooLarge(
            f"the new payload of job {job.id} is {new.size} bytes, over max_payload_bytes "
            f"({settings.max_payload_bytes})"
        )
    if new.size > settings.held_inline_payload_bytes:  # the requeued record keeps it: S3 above this
        return dataclasses.replace(new, ref=objects.payload_ref(settings.payload_bucket, job.id, new.hash))
    return new


def hint_flow(queue_urls: QueueUrls, job: Job) -> Flow[bool]:
    """Send the job's hint now; False (not raised) when SQS refuses, since the sweeper covers it."""
    try:
        yield from queue_urls.send_flow(
            route_of(job),
            enqueue.envelope_of(job).to_body(),
            tenant=job.tenant,
            serialize_key=job.serialize_key,
            trace=job.trace,
        )
    except AwsError:
        return False
    return True


def requeue_flow(
    job_id: str,
    *,
    settings: Settings,
    registry: Registry,
    queue_urls: QueueUrls,
    action: str,
    now: float,
    write: bool = True,
    by: str | None = None,
    note: dict[str, str | float | None] | None = None,
    payload: Any = KEEP,
) -> Flow[Requeue]:
    """Move ``job_id`` from dead|cancelled to queued and send its hint.

    Args:
        job_id: the job.
        settings: where the table is.
        registry: the handlers that judge the payload (the current code, not the one that failed).
        queue_urls: where the hint goes.
        action: ``retry`` or ``replay``, written to the audit entry.
        now: the current time.
        write: False checks everything and changes nothing (``would_requeue``).
        by: who acts (default ``user@host``).
        note: extra audit fields (e.g. the DLQ message id).
        payload: a corrected payload (JSON-compatible, for the handler's current version) that
            replaces the job's; ``KEEP`` (default) requeues the job's own, upgraded and re-validated.
            Refused by the handler → ``invalid``.
    """
    table = settings.table_name

    def attempt() -> Flow[Requeue]:
        response = yield Call("dynamodb", "get_item", requests.get(table, job_id))
        item = response.get("Item")
        if not item:
            return Requeue(job_id, "missing", reason=f"no record for job {job_id}")
        job = codec.job_from_item(item)
        if job.status not in REPLAYABLE:
            return Requeue(job_id, "not_replayable", job, reason=f"job is {job.status.value}")
        change = None
        if payload is KEEP:
            problem = check_replayable(registry, job, settings=settings, now=now)
        else:
            try:
                new = new_payload(registry, settings, job, payload)
                change, problem = PayloadChange(job.payload_hash, job.payload_version, new), ""
            except (HandlerNotFound, PayloadError) as exc:
                problem = f"the new payload is refused: {exc}"
        if problem:
            return Requeue(job_id, "invalid", job, reason=problem)
        if not write:
            return Requeue(job_id, "would_requeue", job, payload_change=change)
        spec = registry.get(job.type)
        audit = {
            "action": action,
            "at": now,
            "by": by or actor(),
            "from": job.status.value,
            "attempts": job.attempt,
            "reason": job.reason,
            **(note or {}),
        }
        if change is not None:
            audit |= change.audit()
        # A job cancelled before any worker saw it has its payload only in its own, still queued,
        # message; that message brings it back, unless the payload is replaced (then it is refused).
        in_its_message = job.payload_in_message_only and change is None
        if change is not None and change.new.ref is not None:  # before the record names it
            yield from objects.put_flow(change.new.ref, canonical_json(change.new.payload).encode())
        replay = operator.replay(
            table,
            job,
            seen_updated=operator.updated_raw(item),
            now=now,
            max_attempts=spec.max_attempts,
            audit=audit,
            recheck_at=now + settings.stale_after_s,  # the sweeper re-sends if this hint is lost
            pending=not in_its_message,
            payload=change.new if change else None,
        )
        if job.batch is None:
            written = yield from apply(replay)
        else:  # a batch item goes back to pending on its batch (sqsjobs.batches.completion)
            written = yield from replay_write_flow(BatchEnv(settings, queue_urls), job, replay)
        if isinstance(written, Refused):
            current = operator.interpret_replay_refusal(job_id, written)
            if current.status in REPLAYABLE:
                raise RecordChanged from written.error  # changed under us (a concurrent cancel): read again
            return Requeue(job_id, "not_replayable", current, reason=f"job is {current.status.value}")
        queued = codec.job_from_item(dict(written.attributes or {}))
        if in_its_message:  # its message is still in the queue and brings it back
            return Requeue(job_id, "requeued", queued, hint_sent=False)
        sent = yield from hint_flow(queue_urls, queued)
        return Requeue(job_id, "requeued", queued, hint_sent=sent, payload_change=change)

    try:
        return (yield from retrying(attempt, _ON_CONFLICT))
    except RecordChanged:
        raise RecordChanged(f"job {job_id} kept changing while it was being requeued; try again") from None


def retry_flow(
    job_id: str,
    *,
    settings: Settings,
    registry: Registry,
    queue_urls: QueueUrls,
    now: float,
    by: str | None = None,
    payload: Any = KEEP,
) -> Flow[Job]:
    """``App.retry``: requeue one job or raise why not (``JobNotFound``, ``InvalidTransition``, ...).

    ``payload`` replaces the job's (see ``requeue_flow``); ``PayloadInvalid`` when the handler
    refuses it, and then nothing is changed.
    """
    result = yield from requeue_flow(
        job_id,
        settings=settings,
        registry=registry,
        queue_urls=queue_urls,
        action="retry",
        now=now,
        by=by,
        payload=payload,
    )
    if result.outcome == "missing":
        raise JobNotFound(f"no job with id {job_id!r} in table {settings.table_name}")
    if result.outcome == "not_replayable":
        raise InvalidTransition(
            f"job {job_id} is {result.job.status.value if result.job else '?'}; "
            f"only {' or '.join(sorted(s.value for s in REPLAYABLE))} jobs can be retried"
        )
    if result.outcome == "invalid":
        what = " with the current code" if payload is KEEP else ""
        raise PayloadInvalid(f"job {job_id} cannot be retried{what}: {result.reason}")
    assert result.job is not None
    return result.job
