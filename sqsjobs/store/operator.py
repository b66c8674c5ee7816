"""Sans-I/O requests for the operator's transitions: cancel, request_cancel and replay (with its audit entry).

These writes come from people, not workers: they carry an audit trail and are conditional on what the
operator last saw.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqsjobs.errors import InvalidTransition, JobNotFound
from sqsjobs.job import Job, JobStatus, Witness
from sqsjobs.store.codec import (
    av_json,
    av_n,
    av_s,
    canonical_json,
    job_from_item,
    payload_hash,
)
from sqsjobs.store.conditions import All, Missing, OneOf, eq
from sqsjobs.store.schema import PENDING, attention_key
from sqsjobs.store.state_table import CHANGED, STATE_TABLE
from sqsjobs.store.write import Write

if TYPE_CHECKING:
    from collections.abc import Mapping

    from sqsjobs.store.apply import Refused
    from sqsjobs.store.conditions import Expr

#: Operator actions (retry, replay) kept in the record's ``audit`` list; older ones are dropped.
AUDIT_CAP = 10


@dataclass(frozen=True)
class NewPayload:
    """A payload that replaces a job's own at a replay (``jobs retry --payload``), as the record keeps it."""

    #: JSON-compatible, as the handler dumped it.
    payload: Any
    #: The handler's version: the new payload is written for the current code.
    version: int
    hash: str
    #: Length of its canonical JSON (what ``payload_size`` counts for an enqueued job).
    size: int
    #: Its S3 object when it is too large for the record (``sqsjobs.transport.objects``); the record
    #: then keeps this reference instead of the payload.
    ref: str | None = None

    @classmethod
    def of(cls, job_type: str, version: int, payload: Any) -> NewPayload:
        """Hash and size ``payload`` as ``put_job`` does for a new job of ``job_type``."""
        return cls(payload, version, payload_hash(job_type, version, payload), len(canonical_json(payload)))


#: What an operator may cancel: a waiting job.
CANCELLABLE = OneOf("status", (":queued", ":retry"))
_CANCEL_SETS: tuple[tuple[str, Expr], ...] = (
    ("status", ":cancelled"),
    ("finished_at", ":now"),
    ("updated_at", ":now"),
    ("reason", ":reason"),
    ("expires_at", ":ttl"),
)


@STATE_TABLE.row(
    "cancel",
    sources={JobStatus.QUEUED, JobStatus.RETRY_SCHEDULED},
    target=JobStatus.CANCELLED,
    refusals=CHANGED,
)
def cancel(
    table: str,
    job_id: str,
    *,
    now: float,
    retention_s: float,
    chain_step: bool = False,
    batch_key: str | None = None,
    untold: bool = False,
    reason: str = "cancelled by request",
) -> Write:
    """Queued | retry_scheduled → cancelled (``reason``: what the record says).

    ``untold``: refused for a job with a ``notify`` target, for a caller that has not read the
    record: such a cancel writes the target's delivery in the same transaction
    (``notify.plugin.told_cancel``), and the refusal shows the record it needs.

    A chain step is refused unless ``chain_step`` (``app.chains.cancel``, which ends the chain in the same
    transaction): cancelled alone, it would leave its chain running with steps that never run. A
    batch item's cancel must count on its batch in the same transaction (``sqsjobs.batches``):
    without ``batch_key`` the write is refused for one, and the refusal shows its ``batch_key``.
    """
    values: dict[str, Any] = {
        ":queued": av_s(JobStatus.QUEUED),
        ":retry": av_s(JobStatus.RETRY_SCHEDULED),
        ":cancelled": av_s(JobStatus.CANCELLED),
        ":now": av_n(now),
        ":reason": av_s(reason[:500]),
        ":ttl": av_n(int(now + retention_s)),
    }
    write = Write(table, {"id": av_s(job_id)}, _CANCEL_SETS, values=values).guard(
        "cancellable", CANCELLABLE, values
    )
    if batch_key:
        write = write.guard("this_batch", eq("batch_key", ":bkey"), {":bkey": av_s(batch_key)})
    else:
        write = write.guard("not_a_batch_item", Missing("batch_key"))
    if untold:
        write = write.guard("untold", Missing("notify"))
    return write if chain_step else write.guard("not_a_chain_step", Missing("chain_id"))


# Flags a running job; its worker sees the flag at its next lease renewal and aborts.
@STATE_TABLE.row(
    "request_cancel",
    sources={JobStatus.RUNNING},
    target=JobStatus.RUNNING,
    refusals=CHANGED,
    kept={Witness.LEASE},
)
def request_cancel(table: str, job_id: str, *, now: float) -> Write:
    """Flag a running job; its worker sees the flag at the next lease heartbeat."""
    values: dict[str, Any] = {":running": av_s(JobStatus.RUNNING), ":true": {"BOOL": True}, ":now": av_n(now)}
    write = Write(
        table, {"id": av_s(job_id)}, (("cancel_requested", ":true"), ("updated_at", ":now")), values=values
    )
    return write.guard("running", eq("status", ":running"), values)


def keep_payload(table: str, job_id: str, *, payload: Any, now: float) -> Write:
    """Copy a cancelled job's payload from its message into the record, so it can be retried later.

    A job cancelled while it waited has no payload in its record (its message carried it). The
    worker that meets that message keeps it here before deleting it. Bumping ``updated_at`` makes a
    concurrent replay, which read the record before, re-read it and send a hint with the payload.
    """
    values = {":cancelled": av_s(JobStatus.CANCELLED), ":payload": av_json(payload), ":now": av_n(now)}
    write = Write(
        table,
        {"id": av_s(job_id)},
        (("payload", ":payload"), ("updated_at", ":now")),
        values=values,
        old_on_refusal=False,
    )
    return write.guard(
        "cancelled_without_payload", All((eq("status", ":cancelled"), Missing("payload"))), values
    )


def interpret_cancel_refusal(job_id: str, refused: Refused) -> Job:
    """The record that refused a cancel or a replay (changed since it was read); ``JobNotFound`` when gone."""
    if refused.item is None:
        raise JobNotFound(f"no job with id {job_id!r}")
    return job_from_item(refused.item)


def not_cancellable(job: Job) -> InvalidTransition:
    """The error for cancelling a finished job, or a waiting chain step on its own."""
    if job.chain is not None and not job.status.terminal:
        return InvalidTransition(
            f"job {job.id} is step {job.chain.step} of chain {job.chain.id}: cancel the chain "
            f"(app.chains.cancel, or sqsjobs chains cancel {job.chain.id})"
        )
    return InvalidTransition(
        f"job {job.id} is {job.status}; only queued, scheduled or running jobs can be cancelled"
    )


# A new hint, and a ``pending`` entry until a claim takes the job.
@STATE_TABLE.row(
    "replay",
    sources={JobStatus.DEAD, JobStatus.CANCELLED},
    target=JobStatus.QUEUED,
    refusals=CHANGED,
    kept={Witness.MESSAGE, Witness.ATTENTION},
)
def replay(
    table: str,
    job: Job,
    *,
    seen_updated: str,
    now: float,
    max_attempts: int,
    audit: Mapping[str, Any],
    recheck_at: float | None = None,
    pending: bool = True,
    payload: NewPayload | None = None,
) -> Write:
    """Dead | cancelled → queued by an operator (``jobs retry``, ``dlq replay``).

    Attempts start again from zero (up to the current handler's ``max_attempts``); the payload,
    job id and idempotency key stay as they are; the TTL and the finished-state fields go, so the
    record is not deleted while it waits; ``audit`` is appended to the capped ``audit`` list.
    Conditional on the status and on ``updated_at`` as the caller read it (``seen_updated``, the
    stored number), so the audit list built from that read cannot overwrite a concurrent change,
    and a replay that already happened cannot happen again.

    The hint is sent after this write (durable state first); the record becomes a ``pending``
    attention entry until ``recheck_at`` (default: now), so if that hint is lost the sweeper sends
    another, and the claim it brings removes the entry. ``pending=False`` (a cancelled job whose
    payload only its own, still queued, message carries) sets no entry: that message brings it.

    ``payload`` replaces the job's payload, its hash, size and version in this same write. Every
    claim compares the message's payload hash with the record's, so a message that still carries
    the old payload (the job's first message, a DLQ copy sent back) is refused and never runs.
    """
    previous = list(job.extra.get("audit", {}).get("L", []))[-(AUDIT_CAP - 1) :]
    values: dict[str, Any] = {
        ":dead": av_s(JobStatus.DEAD),
        ":cancelled": av_s(JobStatus.CANCELLED),
        ":queued": av_s(JobStatus.QUEUED),
        ":seen": {"N": seen_updated},
        ":now": av_n(now),
        ":zero": av_n(0),
        ":max": av_n(max_attempts),
        ":audit": {"L": [*previous, audit_av(audit)]},
    }
    sets: list[tuple[str, Expr]] = [
        ("status", ":queued"),
        ("run_at", ":now"),
        ("attempt", ":zero"),
        ("max_attempts", ":max"),
        ("updated_at", ":now"),
        ("audit", ":audit"),
    ]
    removes = ["finished_at", "expires_at", "reason", "lease_owner", "lease_expires", "cancel_requested"]
    if pending:
        sets += [("attn", ":attn"), ("due", ":recheck")]
        values[":attn"] = av_s(attention_key(PENDING, job.id))
        values[":recheck"] = av_n(now if recheck_at is None else recheck_at)
    else:
        removes += ["attn", "due"]
    if payload is not None:
        sets += [("payload_hash", ":hash"), ("payload_size", ":size"), ("payload_version", ":pv")]
        values |= {":hash": av_s(payload.hash), ":size": av_n(payload.size), ":pv": av_n(payload.version)}
        kept, dropped = ("payload_ref", "payload") if payload.ref else ("payload", "payload_ref")
        sets.append((kept, ":kept"))
        values[":kept"] = av_s(payload.ref) if payload.ref else av_json(payload.payload)
        removes.append(dropped)
    write = Write(table, {"id": av_s(job.id)}, tuple(sets), tuple(removes), values=values, returns="ALL_NEW")
    return write.guard("unchanged_and_finished", REPLAYABLE, values)


#: What a replay may restart: a dead or cancelled job, unchanged since the operator read it.
REPLAYABLE = All((OneOf("status", (":dead", ":cancelled")), eq("updated_at", ":seen")))


def audit_av(entry: Mapping[str, Any]) -> dict[str, Any]:
    """One audit entry (strings and numbers; None values dropped) as a DynamoDB map."""
    return {
        "M": {
            k: av_n(v) if isinstance(v, int | float) else av_s(str(v))
            for k, v in entry.items()
            if v is not None
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


def interpret_replay_refusal(job_id: str, refused: Refused) -> Job:
    """The record that refused a replay (changed since it was read); ``JobNotFound`` when gone."""
    return interpret_cancel_refusal(job_id, refused)


#: What a priority change may move: a waiting job, unchanged since the operator read it.
MOVABLE = All((OneOf("status", (":queued", ":retry")), eq("updated_at", ":seen")))


def reprioritize(
    table: str, job: Job, *, seen_updated: str, priority: str | None, now: float, audit: Mapping[str, Any]
) -> Write:
    """Queued | retry_scheduled stays so, on another priority level (``sqsjobs.ops.reprioritize``).

    Not a transition of the state table: the status does not change, only the level the record
    names (None: normal, as an enqueue stores it), which every later hint (the sweeper's, a
    re-dispatch) follows. Conditional on the status and on ``updated_at`` as read, like ``replay``,
    so the audit list built from that read cannot overwrite a concurrent change.
    """
    previous = list(job.extra.get("audit", {}).get("L", []))[-(AUDIT_CAP - 1) :]
    values: dict[str, Any] = {
        ":queued": av_s(JobStatus.QUEUED),
        ":retry": av_s(JobStatus.RETRY_SCHEDULED),
        ":seen": {"N": seen_updated},
        ":now": av_n(now),
        ":audit": {"L": [*previous, audit_av(audit)]},
    }
    sets: list[tuple[str, Expr]] = [("updated_at", ":now"), ("audit", ":audit")]
    removes: tuple[str, ...] = ()
    if priority is None:
        removes = ("priority",)
    else:
        sets.append(("priority", ":prio"))
        values[":prio"] = av_s(priority)
    write = Write(table, {"id": av_s(job.id)}, tuple(sets), removes, values=values, returns="ALL_NEW")
    return write.guard("unchanged_and_waiting", MOVABLE, values)
