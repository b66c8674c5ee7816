"""Sans-I/O DynamoDB requests: one conditional write per transition, and how to read each answer.

Lease timeline of one job (``now`` is the caller's clock, ``lease`` is ``Settings.lease_s``)::

    claim ──────────────── lease_expires ─────────── stale_after ──▶ time
      │  owner (epoch e)       │ rescue allowed: a new      │ the sweeper sends a hint
      │  may heartbeat,        │ claim takes owner+epoch    │ if no message brought
      │  complete, retry, fail │ (e+1); the old owner's     │ a worker by now
      │  or release            │ writes fail: LeaseLost     │

Every write after a claim is conditional on ``lease_owner = :me AND lease_epoch = :epoch`` — the
fence. Conflicts are read back with ``ReturnValuesOnConditionCheckFailure=ALL_OLD``, never with a
separate read, so the happy path costs no read units.

Item layout: one item per job keyed by ``id``. ``st``/``due`` feed the ``by_status`` index the
sweeper and operators query: ``st`` is the status, or ``held`` for a runnable record whose SQS
message has not been sent yet (far-future jobs, retries beyond the 12 h visibility cap); ``due``
is ``run_at`` for runnable jobs, ``lease_expires`` for running ones and ``finished_at`` for
finished ones. ``by_type``, ``by_queue`` and ``by_tenant`` list jobs newest first for operators.
``audit`` is a capped list of operator actions (retry, replay), read through ``Job.extra``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from sqsjobs.errors import IdempotencyConflict, InvalidTransition, JobNotFound, LeaseLost, StoreError
from sqsjobs.job import AttemptRecord, Job, JobError, JobStatus

if TYPE_CHECKING:
    from collections.abc import Mapping

STATUS_INDEX = "by_status"
#: Operator listing indexes (``sqsjobs jobs list --type/--queue/--tenant``), newest ``created_at`` first.
#: Their keys and projected attributes never change after the PutItem, so each costs one index
#: write per job at enqueue and none per transition; ``by_tenant`` is sparse (only jobs with a tenant).
TYPE_INDEX = "by_type"
QUEUE_INDEX = "by_queue"
TENANT_INDEX = "by_tenant"
#: Attributes the ``by_status`` entries carry besides their keys. Each one changes only together with
#: ``st`` or ``due`` (both index keys, so the entry is rewritten anyway), so listing by status needs
#: no read of the table and the projection adds no write units.
STATUS_PROJECTION = (
    "type", "queue", "run_at", "tenant", "status", "created_at", "attempt", "max_attempts", "reason",
)  # fmt: skip
#: Immutable attributes the listing indexes carry, so ``--type T --queue Q`` filters in the index.
_DIMENSIONS = ("type", "queue", "tenant")
HELD = "held"
#: Finished records carry their deletion time (epoch seconds) here; the table's TTL attribute.
TTL_ATTRIBUTE = "expires_at"
#: Operator actions (retry, replay) kept in the record's ``audit`` list; older ones are dropped.
AUDIT_CAP = 10
#: Attempts kept in the record; older ones are dropped so the item stays small.
HISTORY_CAP = 10
#: A message may arrive this much before ``run_at`` (clock skew between hosts) and still claim.
CLOCK_SKEW_S = 1.0
_CCF = "ConditionalCheckFailedException"

Item = dict[str, Any]  # DynamoDB wire format: {"attr": {"S": "..."}}


# ── attribute values ─────────────────────────────────────────────────────────────────────────
def _s(value: str) -> dict[str, str]:
    return {"S": value}


def _n(value: float | int) -> dict[str, str]:
    return {"N": str(round(value, 3)) if isinstance(value, float) else str(value)}


def _json(value: Any) -> dict[str, str]:
    return {"S": json.dumps(value, separators=(",", ":"), sort_keys=True)}


def _error_av(error: JobError) -> dict[str, Any]:
    return {
        "M": {
            "class": _s(error.error_class),
            "message": _s(error.message),
            "traceback": _s(error.traceback),
        }
    }


def _ts(value: float | None) -> datetime | None:
    return None if value is None else datetime.fromtimestamp(value, UTC)


def _num(item: Mapping[str, Any], name: str) -> float | None:
    av = item.get(name)
    return None if av is None else float(av["N"])


def _str(item: Mapping[str, Any], name: str) -> str | None:
    av = item.get(name)
    return None if av is None else str(av["S"])


def payload_hash(job_type: str, version: int, payload: Any) -> str:
    """Identity of a payload for idempotency: same type, version and canonical JSON."""
    canonical = json.dumps(payload, separators=(",", ":"), sort_keys=True)
    return hashlib.sha256(f"{job_type}\0{version}\0{canonical}".encode()).hexdigest()


def idempotent_job_id(job_type: str, key: str, tenant: str | None = None) -> str:
    """The job id for an idempotency key: the key's scope is (job type, tenant)."""
    digest = hashlib.sha256(f"{job_type}\0{tenant or ''}\0{key}".encode()).hexdigest()
    return f"k{digest[:31]}"


# ── reading an item ──────────────────────────────────────────────────────────────────────────
_KNOWN = {
    "id", "type", "queue", "status", "st", "due", "payload", "payload_hash", "payload_version", "attempt",
    "max_attempts", "run_at", "created_at", "updated_at", "started_at", "finished_at", "lease_owner",
    "lease_epoch", "lease_expires", "result", "error", "history", "idempotency_key", "tenant", "parent_id",
    "root_id", "trace", "cancel_requested", "reason", "expires_at",
}  # fmt: skip


def job_from_item(item: Mapping[str, Any]) -> Job:
    """Decode a DynamoDB item into a Job."""
    error = None
    if "error" in item:
        m = item["error"]["M"]
        error = JobError(m["class"]["S"], m["message"]["S"], m.get("traceback", {}).get("S", ""))
    history = tuple(
        AttemptRecord(
            attempt=int(h["M"]["attempt"]["N"]),
            outcome=h["M"]["outcome"]["S"],
            started_at=_ts(_num(h["M"], "started_at")),
            finished_at=_ts(_num(h["M"], "finished_at")) or datetime.fromtimestamp(0, UTC),
            worker=h["M"].get("worker", {}).get("S", ""),
            error=h["M"].get("error", {}).get("S", ""),
        )
        for h in item.get("history", {}).get("L", [])
    )
    result_raw = _str(item, "result")
    return Job(
        id=item["id"]["S"],
        type=item["type"]["S"],
        queue=item["queue"]["S"],
        status=JobStatus(item["status"]["S"]),
        payload=json.loads(item["payload"]["S"]) if "payload" in item else None,
        payload_version=int(_num(item, "payload_version") or 1),
        attempt=int(_num(item, "attempt") or 0),
        max_attempts=int(_num(item, "max_attempts") or 1),
        run_at=_ts(_num(item, "run_at")) or datetime.fromtimestamp(0, UTC),
        created_at=_ts(_num(item, "created_at")) or datetime.fromtimestamp(0, UTC),
        updated_at=_ts(_num(item, "updated_at")) or datetime.fromtimestamp(0, UTC),
        started_at=_ts(_num(item, "started_at")),
        finished_at=_ts(_num(item, "finished_at")),
        lease_owner=_str(item, "lease_owner"),
        lease_epoch=int(_num(item, "lease_epoch") or 0),
        lease_expires=_ts(_num(item, "lease_expires")),
        result=json.loads(result_raw) if result_raw is not None else None,
        last_error=error,
        history=history,
        idempotency_key=_str(item, "idempotency_key"),
        tenant=_str(item, "tenant"),
        parent_id=_str(item, "parent_id"),
        root_id=_str(item, "root_id"),
        trace=_str(item, "trace"),
        cancel_requested=bool(item.get("cancel_requested", {}).get("BOOL", False)),
        reason=_str(item, "reason"),
        extra={k: v for k, v in item.items() if k not in _KNOWN},
    )


# ── enqueue ──────────────────────────────────────────────────────────────────────────────────
@dataclass(frozen=True)
class NewJob:
    """What a producer asks for; ``put_job`` turns it into the first write."""

    id: str
    type: str
    queue: str
    payload: Any
    payload_version: int
    max_attempts: int
    run_at: float
    now: float
    #: True when no SQS message is sent now (run_at beyond the SQS delay cap); the sweeper sends it.
    held: bool = False
    idempotency_key: str | None = None
    tenant: str | None = None
    parent_id: str | None = None
    root_id: str | None = None
    trace: str | None = None

    @property
    def payload_json(self) -> str:
        """The stored payload."""
        return json.dumps(self.payload, separators=(",", ":"), sort_keys=True)

    @property
    def payload_hash(self) -> str:
        """See ``payload_hash``."""
        return payload_hash(self.type, self.payload_version, self.payload)


def put_job(table: str, job: NewJob) -> dict[str, Any]:
    """PutItem that creates the record only if the id is new (the idempotency check)."""
    item: Item = {
        "id": _s(job.id),
        "type": _s(job.type),
        "queue": _s(job.queue),
        "status": _s(JobStatus.QUEUED),
        "st": _s(HELD if job.held else JobStatus.QUEUED),
        "due": _n(job.run_at),
        "payload": _s(job.payload_json),
        "payload_hash": _s(job.payload_hash),
        "payload_version": _n(job.payload_version),
        "attempt": _n(0),
        "max_attempts": _n(job.max_attempts),
        "lease_epoch": _n(0),
        "run_at": _n(job.run_at),
        "created_at": _n(job.now),
        "updated_at": _n(job.now),
    }
    for name in ("idempotency_key", "tenant", "parent_id", "root_id", "trace"):
        value = getattr(job, name)
        if value is not None:
            item[name] = _s(value)
    return {
        "TableName": table,
        "Item": item,
        "ConditionExpression": "attribute_not_exists(id)",
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }


def interpret_put_conflict(job: NewJob, error: StoreError) -> str:
    """A put refused by the id condition: the same payload is the same job; anything else conflicts."""
    old = _old_item(error)
    if old is None:
        raise error
    if old.get("payload_hash", {}).get("S") == job.payload_hash and old["type"]["S"] == job.type:
        return str(old["id"]["S"])
    raise IdempotencyConflict(
        f"idempotency key {job.idempotency_key!r} already names job {old['id']['S']} of type "
        f"{old['type']['S']!r} with a different payload; reuse the same payload or choose a new key"
    )


def _old_item(error: StoreError) -> Item | None:
    if error.code != _CCF:
        return None
    response = error.response or {}
    item = response.get("Item")
    return dict(item) if item else None


def is_conflict(error: StoreError) -> bool:
    """True when the write's condition was false (as opposed to throttling or an outage)."""
    return error.code == _CCF


# ── claim ────────────────────────────────────────────────────────────────────────────────────
def claim(table: str, job_id: str, *, owner: str, now: float, lease_s: float) -> dict[str, Any]:
    """UpdateItem that makes ``owner`` the runner: a due runnable job, or a running one whose lease expired.

    Attempt and epoch go up by one; ``ALL_NEW`` returns the record (payload included), so the
    worker needs no read.
    """
    expires = now + lease_s
    return {
        "TableName": table,
        "Key": {"id": _s(job_id)},
        "ConditionExpression": (
            "attempt < max_attempts AND ("
            "(#status IN (:queued, :retry) AND run_at <= :due_by) "
            "OR (#status = :running AND lease_expires < :now))"
        ),
        "UpdateExpression": (
            "SET #status = :running, st = :running, attempt = attempt + :one, lease_owner = :owner, "
            "lease_epoch = lease_epoch + :one, lease_expires = :expires, due = :expires, "
            "started_at = :now, updated_at = :now"
        ),
        "ExpressionAttributeNames": {"#status": "status"},
        "ExpressionAttributeValues": {
            ":queued": _s(JobStatus.QUEUED),
            ":retry": _s(JobStatus.RETRY_SCHEDULED),
            ":running": _s(JobStatus.RUNNING),
            ":due_by": _n(now + CLOCK_SKEW_S),
            ":now": _n(now),
            ":one": _n(1),
            ":owner": _s(owner),
            ":expires": _n(expires),
        },
        "ReturnValues": "ALL_NEW",
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }


@dataclass(frozen=True)
class ClaimRefused:
    """Why a claim did not take the job, and what the message should do."""

    #: ``missing``, ``finished``, ``not_due``, ``held_elsewhere``, ``exhausted``.
    reason: str
    job: Job | None = None


def interpret_claim_refusal(error: StoreError, now: float) -> ClaimRefused:
    """Read the record returned with a refused claim."""
    if not is_conflict(error):
        raise error
    old = _old_item(error)
    if old is None:
        return ClaimRefused("missing")
    job = job_from_item(old)
    if job.status.terminal:
        return ClaimRefused("finished", job)
    if job.attempt >= job.max_attempts:
        lease_live = job.status is JobStatus.RUNNING and (_num(old, "lease_expires") or 0) >= now
        return ClaimRefused("held_elsewhere" if lease_live else "exhausted", job)
    if job.status is JobStatus.RUNNING:
        return ClaimRefused("held_elsewhere", job)
    return ClaimRefused("not_due", job)


def own_claim(params: Mapping[str, Any], error: StoreError) -> Job | None:
    """The job, when a refused claim was refused only because this very claim already landed.

    botocore retries a request whose answer was lost (connection reset, read timeout) with the
    same parameters. If the first try took the job, the retry's condition fails against our own
    lease. ``ALL_OLD`` then shows this claim's result exactly: running, our owner, and the
    ``started_at`` this request set. Any other claim — even an earlier one by the same worker for
    a duplicate message — set another ``started_at`` and is not ours to run again.
    """
    if not is_conflict(error):
        return None
    old = _old_item(error)
    values = params["ExpressionAttributeValues"]
    if (
        old is None
        or old.get("status") != values[":running"]
        or old.get("lease_owner") != values[":owner"]
        or not _same_number(old.get("started_at"), values[":now"])
    ):
        return None
    return job_from_item(old)


def already_written(params: Mapping[str, Any], error: StoreError) -> bool:
    """True when a fenced write was refused only because an earlier try of the same request landed.

    The lost-answer retry again (see ``own_claim``): the record then shows our epoch and the exact
    ``updated_at`` this request sets, which no other writer produces.
    """
    if not is_conflict(error):
        return False
    old = _old_item(error)
    values = params["ExpressionAttributeValues"]
    return (
        old is not None
        and _same_number(old.get("lease_epoch"), values[":epoch"])
        and _same_number(old.get("updated_at"), values[":now"])
    )


def _same_number(stored: Mapping[str, Any] | None, sent: Mapping[str, Any]) -> bool:
    # DynamoDB normalises numbers ("5.10" comes back as "5.1"), so compare values, not strings.
    return stored is not None and "N" in stored and Decimal(stored["N"]) == Decimal(sent["N"])


# ── owner-fenced transitions ─────────────────────────────────────────────────────────────────
def _fenced(
    table: str, job: Job, *, owner: str, set_expr: str, values: dict[str, Any], remove: str = ""
) -> dict[str, Any]:
    return {
        "TableName": table,
        "Key": {"id": _s(job.id)},
        "ConditionExpression": "#status = :running AND lease_owner = :owner AND lease_epoch = :epoch",
        "UpdateExpression": f"SET {set_expr}" + (f" REMOVE {remove}" if remove else ""),
        "ExpressionAttributeNames": {"#status": "status"},
        "ExpressionAttributeValues": {
            ":running": _s(JobStatus.RUNNING),
            ":owner": _s(owner),
            ":epoch": _n(job.lease_epoch),
            **values,
        },
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }


def _history(job: Job, now: float, outcome: str, owner: str, error: JobError | None) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "attempt": _n(job.attempt),
        "outcome": _s(outcome),
        "finished_at": _n(now),
        "worker": _s(owner),
    }
    if job.started_at is not None:
        entry["started_at"] = _n(job.started_at.timestamp())
    if error is not None:
        entry["error"] = _s(f"{error.error_class}: {error.message}"[:300])
    previous = [_history_av(h) for h in job.history][-(HISTORY_CAP - 1) :]
    return {"L": [*previous, {"M": entry}]}


def _history_av(h: AttemptRecord) -> dict[str, Any]:
    m: dict[str, Any] = {
        "attempt": _n(h.attempt),
        "outcome": _s(h.outcome),
        "finished_at": _n(h.finished_at.timestamp()),
        "worker": _s(h.worker),
    }
    if h.started_at is not None:
        m["started_at"] = _n(h.started_at.timestamp())
    if h.error:
        m["error"] = _s(h.error)
    return {"M": m}


def _finish(
    table: str,
    job: Job,
    *,
    owner: str,
    now: float,
    status: JobStatus,
    retention_s: float,
    error: JobError | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Running → a final status, fenced: what complete, fail and abort share (TTL set, lease dropped)."""
    sets = (
        "#status = :final, st = :final, due = :now, finished_at = :now, updated_at = :now, history = :history"
    )
    values: dict[str, Any] = {
        ":final": _s(status),
        ":now": _n(now),
        ":history": _history(job, now, str(status), owner, error),
        ":ttl": _n(int(now + retention_s)),
    }
    names = {"#status": "status"}
    for attr, value in (extra or {}).items():
        sets += f", #{attr} = :{attr}"
        names[f"#{attr}"] = attr
        values[f":{attr}"] = value
    params = _fenced(
        table,
        job,
        owner=owner,
        set_expr=f"{sets}, expires_at = :ttl",
        values=values,
        remove="lease_owner, lease_expires",
    )
    params["ExpressionAttributeNames"] = names
    return params


def complete(
    table: str, job: Job, *, owner: str, now: float, result: Any, retention_s: float
) -> dict[str, Any]:
    """Running → succeeded, fenced."""
    return _finish(
        table,
        job,
        owner=owner,
        now=now,
        status=JobStatus.SUCCEEDED,
        retention_s=retention_s,
        extra={"result": _json(result)},
    )


def schedule_retry(
    table: str, job: Job, *, owner: str, now: float, run_at: float, error: JobError, held: bool
) -> dict[str, Any]:
    """Running → retry_scheduled, fenced; ``held`` when the message cannot carry the delay."""
    return _fenced(
        table,
        job,
        owner=owner,
        set_expr=(
            "#status = :retry, st = :st, run_at = :run_at, due = :run_at, updated_at = :now, "
            "#error = :error, history = :history"
        ),
        values={
            ":retry": _s(JobStatus.RETRY_SCHEDULED),
            ":st": _s(HELD if held else JobStatus.RETRY_SCHEDULED),
            ":run_at": _n(run_at),
            ":now": _n(now),
            ":error": _error_av(error),
            ":history": _history(job, now, "retry", owner, error),
        },
        remove="lease_owner, lease_expires",
    ) | {"ExpressionAttributeNames": {"#status": "status", "#error": "error"}}


def fail(
    table: str, job: Job, *, owner: str, now: float, error: JobError, reason: str, retention_s: float
) -> dict[str, Any]:
    """Running → dead, fenced."""
    return _finish(
        table,
        job,
        owner=owner,
        now=now,
        status=JobStatus.DEAD,
        retention_s=retention_s,
        error=error,
        extra={"error": _error_av(error), "reason": _s(reason)},
    )


def abort(table: str, job: Job, *, owner: str, now: float, reason: str, retention_s: float) -> dict[str, Any]:
    """Running → cancelled, fenced (the handler stopped on a cancel request)."""
    return _finish(
        table,
        job,
        owner=owner,
        now=now,
        status=JobStatus.CANCELLED,
        retention_s=retention_s,
        extra={"reason": _s(reason)},
    )


def release(table: str, job: Job, *, owner: str, now: float) -> dict[str, Any]:
    """Running → queued on graceful shutdown, fenced; the attempt is given back."""
    return _fenced(
        table,
        job,
        owner=owner,
        set_expr=(
            "#status = :queued, st = :queued, run_at = :now, due = :now, updated_at = :now, "
            "attempt = attempt - :one, history = :history"
        ),
        values={
            ":queued": _s(JobStatus.QUEUED),
            ":now": _n(now),
            ":one": _n(1),
            ":history": _history(job, now, "released", owner, None),
        },
        remove="lease_owner, lease_expires",
    )


def heartbeat(table: str, job: Job, *, owner: str, now: float, lease_s: float) -> dict[str, Any]:
    """Running → running with a later lease expiry, fenced; ``ALL_NEW`` shows a cancel request."""
    params = _fenced(
        table,
        job,
        owner=owner,
        set_expr="lease_expires = :expires, due = :expires, updated_at = :now",
        values={":expires": _n(now + lease_s), ":now": _n(now)},
    )
    params["ReturnValues"] = "ALL_NEW"
    return params


def lease_lost(job: Job, error: StoreError) -> LeaseLost:
    """The error for a refused fenced write (re-raises anything that is not a condition failure)."""
    if not is_conflict(error):
        raise error
    old = _old_item(error)
    if old is None:
        return LeaseLost(f"job {job.id} no longer exists")
    now_owner = _str(old, "lease_owner")
    return LeaseLost(
        f"job {job.id} epoch {job.lease_epoch} lost its lease: now {old['status']['S']}, "
        f"owner {now_owner or '-'}, epoch {_num(old, 'lease_epoch')}"
    )


def moved_on_by_owner(job: Job, error: StoreError) -> bool:
    """True when a refused heartbeat met the owner's own later transition (same epoch, no longer running).

    The heartbeat loop renews a lease while the execution records the outcome; when the outcome lands
    first the renewal is refused, which is expected, not a lost lease.
    """
    old = _old_item(error) if is_conflict(error) else None
    return (
        old is not None
        and _num(old, "lease_epoch") == job.lease_epoch
        and old.get("status", {}).get("S") != JobStatus.RUNNING
    )


# ── transitions without an owner ─────────────────────────────────────────────────────────────
def reject(
    table: str, job_id: str, *, now: float, error: JobError, reason: str, retention_s: float
) -> dict[str, Any]:
    """A job that must not run (unknown type, invalid payload, attempts exhausted) → dead, unclaimed."""
    return {
        "TableName": table,
        "Key": {"id": _s(job_id)},
        "ConditionExpression": (
            "#status IN (:queued, :retry) OR (#status = :running AND lease_expires < :now)"
        ),
        "UpdateExpression": (
            "SET #status = :dead, st = :dead, due = :now, finished_at = :now, updated_at = :now, "
            "#error = :error, reason = :reason, expires_at = :ttl REMOVE lease_owner, lease_expires"
        ),
        "ExpressionAttributeNames": {"#status": "status", "#error": "error"},
        "ExpressionAttributeValues": {
            ":queued": _s(JobStatus.QUEUED),
            ":retry": _s(JobStatus.RETRY_SCHEDULED),
            ":running": _s(JobStatus.RUNNING),
            ":dead": _s(JobStatus.DEAD),
            ":now": _n(now),
            ":error": _error_av(error),
            ":reason": _s(reason),
            ":ttl": _n(int(now + retention_s)),
        },
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }


def cancel(table: str, job_id: str, *, now: float, retention_s: float) -> dict[str, Any]:
    """Queued | retry_scheduled → cancelled."""
    return {
        "TableName": table,
        "Key": {"id": _s(job_id)},
        "ConditionExpression": "#status IN (:queued, :retry)",
        "UpdateExpression": (
            "SET #status = :cancelled, st = :cancelled, due = :now, finished_at = :now, updated_at = :now, "
            "reason = :reason, expires_at = :ttl"
        ),
        "ExpressionAttributeNames": {"#status": "status"},
        "ExpressionAttributeValues": {
            ":queued": _s(JobStatus.QUEUED),
            ":retry": _s(JobStatus.RETRY_SCHEDULED),
            ":cancelled": _s(JobStatus.CANCELLED),
            ":now": _n(now),
            ":reason": _s("cancelled by request"),
            ":ttl": _n(int(now + retention_s)),
        },
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }


def request_cancel(table: str, job_id: str, *, now: float) -> dict[str, Any]:
    """Flag a running job; its worker sees the flag at the next lease heartbeat."""
    return {
        "TableName": table,
        "Key": {"id": _s(job_id)},
        "ConditionExpression": "#status = :running",
        "UpdateExpression": "SET cancel_requested = :true, updated_at = :now",
        "ExpressionAttributeNames": {"#status": "status"},
        "ExpressionAttributeValues": {
            ":running": _s(JobStatus.RUNNING),
            ":true": {"BOOL": True},
            ":now": _n(now),
        },
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }


def interpret_cancel_refusal(job_id: str, error: StoreError) -> Job:
    """The record that refused a cancel; ``JobNotFound`` when there is none."""
    if not is_conflict(error):
        raise error
    old = _old_item(error)
    if old is None:
        raise JobNotFound(f"no job with id {job_id!r}")
    return job_from_item(old)


def not_cancellable(job: Job) -> InvalidTransition:
    """The error for cancelling a finished job."""
    return InvalidTransition(
        f"job {job.id} is {job.status}; only queued, scheduled or running jobs can be cancelled"
    )


def replay(
    table: str, job: Job, *, seen_updated: str, now: float, max_attempts: int, audit: Mapping[str, Any]
) -> dict[str, Any]:
    """Dead | cancelled → queued by an operator (``jobs retry``, ``dlq replay``).

    Attempts start again from zero (up to the current handler's ``max_attempts``); the payload,
    job id and idempotency key stay as they are; the TTL and the finished-state fields go, so the
    record is not deleted while it waits; ``audit`` is appended to the capped ``audit`` list.
    Conditional on the status and on ``updated_at`` as the caller read it (``seen_updated``, the
    stored number), so the audit list built from that read cannot overwrite a concurrent change,
    and a replay that already happened cannot happen again.
    """
    previous = list(job.extra.get("audit", {}).get("L", []))[-(AUDIT_CAP - 1) :]
    return {
        "TableName": table,
        "Key": {"id": _s(job.id)},
        "ConditionExpression": "#status IN (:dead, :cancelled) AND updated_at = :seen",
        "UpdateExpression": (
            "SET #status = :queued, st = :queued, due = :now, run_at = :now, attempt = :zero, "
            "max_attempts = :max, updated_at = :now, audit = :audit "
            "REMOVE finished_at, expires_at, reason, lease_owner, lease_expires, cancel_requested"
        ),
        "ExpressionAttributeNames": {"#status": "status"},
        "ExpressionAttributeValues": {
            ":dead": _s(JobStatus.DEAD),
            ":cancelled": _s(JobStatus.CANCELLED),
            ":queued": _s(JobStatus.QUEUED),
            ":seen": {"N": seen_updated},
            ":now": _n(now),
            ":zero": _n(0),
            ":max": _n(max_attempts),
            ":audit": {"L": [*previous, audit_av(audit)]},
        },
        "ReturnValues": "ALL_NEW",
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }


def audit_av(entry: Mapping[str, Any]) -> dict[str, Any]:
    """One audit entry (strings and numbers; None values dropped) as a DynamoDB map."""
    return {
        "M": {
            k: _n(v) if isinstance(v, int | float) else _s(str(v)) for k, v in entry.items() if v is not None
        }
    }


def audit_entries(job: Job) -> list[dict[str, Any]]:
    """The record's audit list, decoded (oldest first)."""
    out = []
    for av in job.extra.get("audit", {}).get("L", []):
        out.append({k: float(v["N"]) if "N" in v else v.get("S") for k, v in av.get("M", {}).items()})
    return out


def updated_raw(item: Mapping[str, Any]) -> str:
    """``updated_at`` exactly as stored, for the ``replay`` condition."""
    return str(item["updated_at"]["N"])


def interpret_replay_refusal(job_id: str, error: StoreError) -> Job:
    """The record that refused a replay (changed since it was read); ``JobNotFound`` when gone."""
    return interpret_cancel_refusal(job_id, error)


def get(table: str, job_id: str) -> dict[str, Any]:
    """GetItem, strongly consistent (an operator asking right after a write sees it)."""
    return {"TableName": table, "Key": {"id": _s(job_id)}, "ConsistentRead": True}


# ── sweeper ──────────────────────────────────────────────────────────────────────────────────
def query_due(
    table: str, st: str, *, due_before: float, limit: int = 100, start_key: Item | None = None
) -> dict[str, Any]:
    """Records in index partition ``st`` whose ``due`` is at or before ``due_before``, oldest first."""
    params: dict[str, Any] = {
        "TableName": table,
        "IndexName": STATUS_INDEX,
        "KeyConditionExpression": "st = :st AND due <= :before",
        "ExpressionAttributeValues": {":st": _s(st), ":before": _n(due_before)},
        "Limit": limit,
    }
    if start_key:
        params["ExclusiveStartKey"] = start_key
    return params


@dataclass(frozen=True)
class DueRecord:
    """An index entry the sweeper acts on."""

    id: str
    type: str
    queue: str
    st: str
    due: float
    run_at: float
    #: ``due`` exactly as stored, for the unchanged-entry condition.
    due_raw: str


def due_records(response: Mapping[str, Any]) -> list[DueRecord]:
    """Decode a ``query_due`` page."""
    return [
        DueRecord(
            id=i["id"]["S"],
            type=i["type"]["S"],
            queue=i["queue"]["S"],
            st=i["st"]["S"],
            due=float(i["due"]["N"]),
            run_at=float(i.get("run_at", i["due"])["N"]),
            due_raw=i["due"]["N"],
        )
        for i in response.get("Items", [])
    ]


def mark_dispatched(table: str, record: DueRecord, *, now: float, next_check: float) -> dict[str, Any]:
    """Before the sweeper sends a hint: move ``due`` on (and ``held`` → runnable) so no sweep repeats it.

    Conditional on the index entry being unchanged, so two sweepers never both send.
    """
    values: dict[str, Any] = {
        ":st": _s(record.st),
        ":due": {"N": record.due_raw},
        ":next": _n(next_check),
        ":now": _n(now),
    }
    set_expr = "due = :next, updated_at = :now"
    names: dict[str, str] = {}
    if record.st == HELD:
        # A held record becomes visible to the normal re-dispatch check under its real status.
        set_expr += ", st = #status"
        names["#status"] = "status"
    params: dict[str, Any] = {
        "TableName": table,
        "Key": {"id": _s(record.id)},
        "ConditionExpression": "st = :st AND due = :due",
        "UpdateExpression": f"SET {set_expr}",
        "ExpressionAttributeValues": values,
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }
    if names:
        params["ExpressionAttributeNames"] = names
    return params


def dispatch_landed(params: Mapping[str, Any], error: StoreError) -> bool:
    """True when a refused ``mark_dispatched`` met its own earlier try (a retry after a lost answer)."""
    if not is_conflict(error):
        return False
    old = _old_item(error)
    values = params["ExpressionAttributeValues"]
    return (
        old is not None
        and _same_number(old.get("due"), values[":next"])
        and _same_number(old.get("updated_at"), values[":now"])
    )


def _listing_index(name: str, hash_key: str) -> dict[str, Any]:
    return {
        "IndexName": name,
        "KeySchema": [
            {"AttributeName": hash_key, "KeyType": "HASH"},
            {"AttributeName": "created_at", "KeyType": "RANGE"},
        ],
        "Projection": {
            "ProjectionType": "INCLUDE",
            "NonKeyAttributes": [a for a in _DIMENSIONS if a != hash_key],
        },
    }


def table_definition(table: str) -> dict[str, Any]:
    """CreateTable: on-demand, keyed by id, with the ``by_status`` index and the listing indexes."""
    return {
        "TableName": table,
        "BillingMode": "PAY_PER_REQUEST",
        "KeySchema": [{"AttributeName": "id", "KeyType": "HASH"}],
        "AttributeDefinitions": [
            {"AttributeName": "id", "AttributeType": "S"},
            {"AttributeName": "st", "AttributeType": "S"},
            {"AttributeName": "due", "AttributeType": "N"},
            {"AttributeName": "type", "AttributeType": "S"},
            {"AttributeName": "queue", "AttributeType": "S"},
            {"AttributeName": "tenant", "AttributeType": "S"},
            {"AttributeName": "created_at", "AttributeType": "N"},
        ],
        "GlobalSecondaryIndexes": [
            {
                "IndexName": STATUS_INDEX,
                "KeySchema": [
                    {"AttributeName": "st", "KeyType": "HASH"},
                    {"AttributeName": "due", "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "INCLUDE", "NonKeyAttributes": list(STATUS_PROJECTION)},
            },
            _listing_index(TYPE_INDEX, "type"),
            _listing_index(QUEUE_INDEX, "queue"),
            _listing_index(TENANT_INDEX, "tenant"),
        ],
    }
