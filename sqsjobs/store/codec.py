"""The DynamoDB wire format of a job: attribute values, reading an item, reading a refusal, and the record a message describes.

Pure helpers shared by every builder of ``store/`` and the readers of its answers. A version 2
message carries every field of its job's first record (``record_of``), so a claim, a reject or an
expire can create a record that is not there yet (``creates_from``), and a batched claim knows the
record it took without an answer.
"""

from __future__ import annotations

import functools
import hashlib
import json
import secrets
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from sqsjobs.errors import JobNotFound
from sqsjobs.job import (
    AttemptRecord,
    BatchPlace,
    ChainPlace,
    FailureRecord,
    Job,
    JobStatus,
    Notify,
    Progress,
    RunningLong,
)
from sqsjobs.store.conditions import IfNotExists

if TYPE_CHECKING:
    from collections.abc import Mapping

    from sqsjobs.envelope import Envelope
    from sqsjobs.errors import StoreError
    from sqsjobs.store.conditions import Expr
    from sqsjobs.store.write import Write

CCF = "ConditionalCheckFailedException"
#: A TransactWriteItems refused as a whole (an entry's condition, or a conflict with another transaction).
TRANSACTION_CANCELED = "TransactionCanceledException"

Item = dict[str, Any]  # DynamoDB wire format: {"attr": {"S": "..."}}


# ── attribute values ─────────────────────────────────────────────────────────────────────────
def av_s(value: str) -> dict[str, str]:
    """A string attribute value."""
    return {"S": value}


def av_n(value: float | int) -> dict[str, str]:
    """A number attribute value (times to the millisecond)."""
    return {"N": str(round(value, 3)) if isinstance(value, float) else str(value)}


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no spaces: the one form payloads are stored, sized and hashed in."""
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def av_json(value: Any) -> dict[str, str]:
    """A JSON document stored as a string attribute (canonical: sorted keys, no spaces)."""
    return {"S": canonical_json(value)}


def av_error(error: FailureRecord) -> dict[str, Any]:
    """A map attribute holding an attempt's error."""
    return {
        "M": {
            "class": av_s(error.error_class),
            "message": av_s(error.message),
            "traceback": av_s(error.traceback),
        }
    }


def to_datetime(value: float | None) -> datetime | None:
    """Epoch seconds → an aware UTC datetime."""
    return None if value is None else datetime.fromtimestamp(value, UTC)


def num_attr(item: Mapping[str, Any], name: str) -> float | None:
    """A number attribute of an item, or None."""
    av = item.get(name)
    return None if av is None else float(av["N"])


def str_attr(item: Mapping[str, Any], name: str) -> str | None:
    """A string attribute of an item, or None."""
    av = item.get(name)
    return None if av is None else str(av["S"])


#: The one member of a sealed payload or result (``sqsjobs.store.sealing``).
SEALED = "sqsjobs.sealed"
#: A keyed payload hash (``sealing.keyed_hash_flow``) starts with it; a plain one is 64 hex digits.
KEYED_HASH = "k"


def sealed_key(value: Any) -> str | None:
    """The KMS key ARN a sealed payload or result names; None for any other value."""
    if isinstance(value, dict) and len(value) == 1 and isinstance(inner := value.get(SEALED), dict):
        arn = inner.get("key")
        return arn if isinstance(arn, str) else None
    return None


def payload_hash(job_type: str, version: int, payload: Any) -> str:
    """Identity of a payload for idempotency: same type, version and canonical JSON."""
    return canonical_hash(job_type, version, canonical_json(payload).encode())


def canonical_hash(job_type: str, version: int, canonical: bytes) -> str:
    """``payload_hash`` of a payload given as its canonical JSON bytes (an S3 object), without parsing it."""
    return hashlib.sha256(f"{job_type}\0{version}\0".encode() + canonical).hexdigest()


def idempotent_job_id(job_type: str, key: str, tenant: str | None = None) -> str:
    """The job id for an idempotency key: the key's scope is (job type, tenant)."""
    digest = hashlib.sha256(f"{job_type}\0{tenant or ''}\0{key}".encode()).hexdigest()
    return f"k{digest[:31]}"


# ── reading an item ──────────────────────────────────────────────────────────────────────────
#: The record attribute of a run's slow-run flag (``Job.running_long``), set by a lease renewal.
RUNNING_LONG = "running_long"
KNOWN_ATTRIBUTES = frozenset(
    [
        "id",
        "progress",
        RUNNING_LONG,
        "tags",
        "type",
        "queue",
        "status",
        "st",
        "due",
        "payload",
        "payload_hash",
        "payload_version",
        "attempt",
        "max_attempts",
        "run_at",
        "created_at",
        "updated_at",
        "started_at",
        "finished_at",
        "lease_owner",
        "lease_epoch",
        "lease_expires",
        "result",
        "error",
        "history",
        "idempotency_key",
        "tenant",
        "parent_id",
        "root_id",
        "trace",
        "cancel_requested",
        "reason",
        "notify",
        "expires_at",
        "claim_token",
        "claim_msg",
        "wid",
        "payload_size",
        "attn",
        "payload_ref",
        "result_ref",
        "start_by",
        "chain_id",
        "chain_step",
        "chain_steps",
        "batch_key",
        "priority",
        "serialize_key",
    ]
)

#: Attribute each write that may be retried after a lost answer sets to its own random nonce.
WRITE_ID = "wid"


#: What every job record has and no other item of the table (a breaker, a pause, a batch, a chain,
#: a worker, a limit's slot) has all of.
JOB_ATTRIBUTES = ("type", "queue", "status")


def is_job(item: Mapping[str, Any]) -> bool:
    """True for a job's record, False for the table's other items (``breaker#...``, ``worker#...``)."""
    return all(name in item for name in JOB_ATTRIBUTES)


def job_from_item(item: Mapping[str, Any], message: Envelope | None = None) -> Job:
    """Decode a DynamoDB item into a Job; a claim's ``message`` gives the payload it carries.

    A record keeps only its payload's hash while a message carries the payload itself (a claim's
    condition checked that the two match), so the job a claim took is built with it at once.
    ``JobNotFound`` for an item that is not a job's: an id from outside may name any item.
    """
    if not is_job(item):
        raise JobNotFound(f"no job with id {item.get('id', {}).get('S', '?')!r}")
    error = None
    if "error" in item:
        m = item["error"]["M"]
        error = FailureRecord(m["class"]["S"], m["message"]["S"], m.get("traceback", {}).get("S", ""))
    history = tuple(
        AttemptRecord(
            attempt=int(h["M"]["attempt"]["N"]),
            outcome=h["M"]["outcome"]["S"],
            started_at=to_datetime(num_attr(h["M"], "started_at")),
            finished_at=to_datetime(num_attr(h["M"], "finished_at")) or datetime.fromtimestamp(0, UTC),
            worker=h["M"].get("worker", {}).get("S", ""),
            error=h["M"].get("error", {}).get("S", ""),
        )
        for h in item.get("history", {}).get("L", [])
    )
    result_raw = str_attr(item, "result")
    digest = str_attr(item, "payload_hash")
    return Job(
        id=item["id"]["S"],
        type=item["type"]["S"],
        queue=item["queue"]["S"],
        status=JobStatus(item["status"]["S"]),
        payload=(
            message.payload
            if message is not None and message.has_payload
            else json.loads(item["payload"]["S"])
            if "payload" in item
            else None
        ),
        payload_version=int(num_attr(item, "payload_version") or 1),
        attempt=int(num_attr(item, "attempt") or 0),
        max_attempts=_optional_int(num_attr(item, "max_attempts")),
        run_at=to_datetime(num_attr(item, "run_at")) or datetime.fromtimestamp(0, UTC),
        created_at=to_datetime(num_attr(item, "created_at")) or datetime.fromtimestamp(0, UTC),
        updated_at=to_datetime(num_attr(item, "updated_at")) or datetime.fromtimestamp(0, UTC),
        started_at=to_datetime(num_attr(item, "started_at")),
        finished_at=to_datetime(num_attr(item, "finished_at")),
        lease_owner=str_attr(item, "lease_owner"),
        lease_epoch=int(num_attr(item, "lease_epoch") or 0),
        lease_expires=to_datetime(num_attr(item, "lease_expires")),
        payload_hash=digest,
        payload_size=_optional_int(num_attr(item, "payload_size")),
        payload_ref=str_attr(item, "payload_ref"),
        result_ref=str_attr(item, "result_ref"),
        claim_token=str_attr(item, "claim_token"),
        claim_message_id=str_attr(item, "claim_msg"),
        result=json.loads(result_raw) if result_raw is not None else None,
        last_error=error,
        history=history,
        idempotency_key=str_attr(item, "idempotency_key"),
        tenant=str_attr(item, "tenant"),
        priority=str_attr(item, "priority"),
        serialize_key=str_attr(item, "serialize_key"),
        parent_id=str_attr(item, "parent_id"),
        root_id=str_attr(item, "root_id"),
        batch=BatchPlace(batch_key) if (batch_key := str_attr(item, "batch_key")) else None,
        trace=str_attr(item, "trace"),
        cancel_requested=bool(item.get("cancel_requested", {}).get("BOOL", False)),
        reason=str_attr(item, "reason"),
        start_by=to_datetime(num_attr(item, "start_by")),
        chain=_chain_place(item),
        notify=notify_of(item),
        progress=progress_of(item),
        running_long=running_long_of(item),
        tags=tags_of(item),
        encrypted=(digest or "").startswith(KEYED_HASH) or (result_raw or "").startswith('{"' + SEALED),
        extra={k: v for k, v in item.items() if k not in KNOWN_ATTRIBUTES},
    )


def progress_attr(progress: Progress, now: float) -> dict[str, str]:
    """The record's ``progress`` attribute: the report as JSON, stamped with the instant it is written."""
    return av_s(canonical_json({**progress.to_json(), "at": now}))


def tags_attr(tags: Mapping[str, str]) -> dict[str, Any]:
    """A record's ``tags`` attribute (a job's, or a batch's that its items inherit)."""
    return {"M": {name: av_s(value) for name, value in tags.items()}}


def tags_of(item: Mapping[str, Any]) -> dict[str, str]:
    """A record's tags (none: empty)."""
    return {name: value["S"] for name, value in item.get("tags", {}).get("M", {}).items()}


def progress_of(item: Mapping[str, Any]) -> Progress | None:
    """The record's last progress report; None without one (or one a newer writer shaped otherwise)."""
    raw = str_attr(item, "progress")
    if raw is None:
        return None
    try:
        data = json.loads(raw)
        return Progress.of(data) if isinstance(data, dict) else None
    except (ValueError, TypeError):
        return None


def running_long_of(item: Mapping[str, Any]) -> RunningLong | None:
    """The run's slow-run flag; None without one (or one a newer writer shaped otherwise)."""
    raw = str_attr(item, RUNNING_LONG)
    if raw is None:
        return None
    try:
        data = json.loads(raw)
        return RunningLong(
            float(data["at"]), float(data["elapsed_s"]), float(data["p95_s"]), float(data["factor"])
        )
    except (ValueError, TypeError, KeyError):
        return None


def old_item(error: StoreError) -> Item | None:
    """The record a refused write returned (``ReturnValuesOnConditionCheckFailure=ALL_OLD``)."""
    if error.code != CCF:
        return None
    response = error.response or {}
    item = response.get("Item")
    return dict(item) if item else None


def is_conflict(error: StoreError) -> bool:
    """True when the write's condition was false (as opposed to throttling or an outage)."""
    return error.code == CCF


def same_number(stored: Mapping[str, Any] | None, sent: Mapping[str, Any]) -> bool:
    """True when a stored number attribute equals the one a request sent."""
    # DynamoDB normalises numbers ("5.10" comes back as "5.1"), so compare values, not strings.
    return stored is not None and "N" in stored and Decimal(stored["N"]) == Decimal(sent["N"])


def nonce() -> str:
    """A value no other request produces: a claim token, or a write's ``wid``."""
    return secrets.token_hex(16)


def shows_own_write(write: Write, error: StoreError) -> bool:
    """True when a refused write's record carries this very write's nonce (``wid``).

    botocore retries a write whose answer was lost (connection reset after DynamoDB applied it); the
    retry's condition then fails against the first try's result. Only this write wrote its nonce, so
    finding it means the write landed — a timestamp, owner or epoch could be repeated by a second
    request in the same millisecond, a random nonce cannot (docs/lifecycle.md).
    """
    if not is_conflict(error):
        return False
    old = old_item(error)
    sent = write.value(":wid")
    return old is not None and sent is not None and old.get(WRITE_ID) == sent


def _optional_int(value: float | None) -> int | None:
    return None if value is None else int(value)


# ── the record a message describes ───────────────────────────────────────────────────────────
#: String fields a record carries only when set.
OPTIONAL_STRINGS = (
    "idempotency_key",
    "tenant",
    "parent_id",
    "root_id",
    "trace",
    "priority",
    "serialize_key",
)


def record_of(envelope: Envelope) -> Item:
    """The record a producer's ``put_job`` makes for the job a version 2 message carries.

    What a claim creates when the record is missing (``creates_from``), and what a batched claim
    knows the record held before it (``runs.claimed_job``), the same as ``store/enqueue.py``'s ``put_job``).
    """
    assert envelope.queue is not None and envelope.created_at is not None and envelope.run_at is not None
    item: Item = {
        "id": av_s(envelope.job_id),
        "type": av_s(envelope.job_type),
        "queue": av_s(envelope.queue),
        "status": av_s(JobStatus.QUEUED),
        "payload_hash": av_s(str(envelope.payload_hash)),
        "payload_size": av_n(
            envelope.payload_size
            if envelope.payload_size is not None
            else len(canonical_json(envelope.payload))
        ),
        "payload_version": av_n(envelope.payload_version),
        "attempt": av_n(0),
        "lease_epoch": av_n(0),
        "run_at": av_n(envelope.run_at),
        "created_at": av_n(envelope.created_at),
        "updated_at": av_n(envelope.created_at),
    }
    if envelope.max_attempts is not None:
        item["max_attempts"] = av_n(envelope.max_attempts)
    if envelope.start_by is not None:
        item["start_by"] = av_n(envelope.start_by)
    for name in (*OPTIONAL_STRINGS, "payload_ref"):
        value = getattr(envelope, name)
        if value is not None:
            item[name] = av_s(value)
    if envelope.tags:
        item["tags"] = tags_attr(envelope.tags)
    return item | place_fields(envelope.batch, envelope.chain, envelope.notify)


def place_fields(batch: BatchPlace | None, chain: ChainPlace | None, notify: Notify | None = None) -> Item:
    """A job's place in its batch (``batch_key``) and chain (``chain_id``, ``chain_step``, ``chain_steps``), and its notify target."""
    item: Item = {}
    if batch is not None:
        item["batch_key"] = av_s(batch.key)
    if chain is not None:
        item |= {"chain_id": av_s(chain.id), "chain_step": av_n(chain.step), "chain_steps": av_n(chain.steps)}
    if notify is not None:
        item["notify"] = av_s(json.dumps(notify.to_json(), separators=(",", ":"), sort_keys=True))
    return item


def notify_of(item: Mapping[str, Any]) -> Notify | None:
    """The record's notify target (a job's, or a batch's); None when it names none this release reads."""
    raw = str_attr(item, "notify")
    if raw is None:
        return None
    try:
        return Notify.of(json.loads(raw))
    except ValueError:  # not a target this release reads: the end is told nowhere
        return None


def _chain_place(item: Mapping[str, Any]) -> ChainPlace | None:
    chain_id, step, steps = (
        str_attr(item, "chain_id"),
        num_attr(item, "chain_step"),
        num_attr(item, "chain_steps"),
    )
    if chain_id is None or step is None or steps is None:
        return None
    return ChainPlace(chain_id, int(step), int(steps))


#: What a claim or reject sets itself rather than taking from the message (``creates_from``).
_SET_BY_THE_WRITE = frozenset({"id", "status", "attempt", "lease_epoch", "updated_at", "max_attempts"})


def creates_from(envelope: Envelope) -> tuple[tuple[tuple[str, Expr], ...], dict[str, Any]]:
    """Assignments that give a record the message's fields only where it has none (``if_not_exists``), and their values.

    A claim (or a reject, an expire) of a job whose record is not there yet creates it from the
    message: the producer may have died between its send and its write, or its write is still in
    flight. On an existing record every assignment is a no-op.
    """
    record = record_of(envelope)
    names = tuple(name for name in record if name not in _SET_BY_THE_WRITE)
    return _created_sets(names), {f":c_{name}": record[name] for name in names}


@functools.lru_cache(maxsize=64)
def _created_sets(names: tuple[str, ...]) -> tuple[tuple[str, Expr], ...]:
    """The ``if_not_exists`` assignments of ``names``: one tuple per set of fields, so a write's shape is reused."""
    return tuple((name, IfNotExists(name, f":c_{name}")) for name in names)
