"""The DLQ reconciler's writes (sans-I/O): count a re-dispatch, or make a redriven job dead.

SQS's redrive policy moves a message to its DLQ after ``maxReceiveCount`` receives, whatever
the record says. The sweeper's reconciler (``sqsjobs.runtime.reconciler``) then either sends the
job a fresh hint, counting it in the record first, or makes the record ``dead`` so that it stops
claiming the job is on its way. Each is one conditional write made before any SQS call, so a
reconciler killed after it leaves the DLQ copy in place and the next pass finishes the work.

Record attribute (sparse: only jobs SQS has redriven carry it):

- ``dlq_redispatches``: how often the reconciler sent the job a fresh hint after a redrive. The
  write that makes the record dead removes it, so a job replayed later starts from zero.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqsjobs.job import FailureRecord, JobStatus
from sqsjobs.store.codec import WRITE_ID, av_error, av_json, av_n, av_s, nonce, num_attr
from sqsjobs.store.conditions import All, Missing, eq
from sqsjobs.store.requests import REJECTABLE
from sqsjobs.store.schema import DEAD, attention_key
from sqsjobs.store.write import Write

if TYPE_CHECKING:
    from collections.abc import Mapping

    from sqsjobs.envelope import Envelope
    from sqsjobs.store.codec import Item
    from sqsjobs.store.conditions import Expr

#: The record's count of re-dispatches after a redrive.
REDISPATCHES = "dlq_redispatches"
#: The error class a redriven job's record shows.
REDRIVE_ERROR = "RedrivenBySqs"


def redispatches(item: Mapping[str, Any]) -> int:
    """How often the reconciler re-dispatched this record's job after a redrive."""
    return int(num_attr(item, REDISPATCHES) or 0)


def count_redispatch(table: str, item: Item) -> Write:
    """Add one to the record's re-dispatch count, conditional on the record as read.

    The status, ``updated_at`` and the count must be what the reconciler read: a claim, a finish or
    another reconciler in between refuses it (and the pass leaves the DLQ copy to the next one).
    No status changes and ``updated_at`` stays, so no other writer's condition notices it.
    """
    count = redispatches(item)
    seen = {":status": item["status"], ":seen": item["updated_at"], ":count": av_n(count)}
    unchanged = All(
        (
            eq("status", ":status"),
            eq("updated_at", ":seen"),
            eq(REDISPATCHES, ":count") if count else Missing(REDISPATCHES),
        )
    )
    values = {":next": av_n(count + 1), ":wid": av_s(nonce())}
    write = Write(table, {"id": item["id"]}, ((REDISPATCHES, ":next"), (WRITE_ID, ":wid")), values=values)
    return write.guard(
        "as_read", unchanged, seen if count else {k: v for k, v in seen.items() if k != ":count"}
    )


def reason(receives: int | None, redispatched: int) -> str:
    """The dead record's reason: SQS redrove the message, after how many receives, and what was tried."""
    after = f"after {receives} receives" if receives else "after its maxReceiveCount receives"
    tried = f"; re-dispatched {redispatched} time(s) before" if redispatched else ""
    return f"SQS redrove its message to the DLQ {after} without a finish{tried}"


def redriven(table: str, envelope: Envelope, *, now: float, reason: str, retention_s: float) -> Write:
    """Queued | retry_scheduled | running with an expired lease → dead, because SQS redrove its message.

    The statuses of ``reject`` (a job that must not run, with nothing running it): a running job
    whose lease is live is someone's, and is left alone. The record keeps the message's payload
    (replayable once the DLQ copy is gone), a ``dead`` attention entry and the TTL; the re-dispatch
    count goes. Never creates a record: a message with none stays in the DLQ for the operator.
    """
    values: dict[str, Any] = {
        ":queued": av_s(JobStatus.QUEUED),
        ":retry": av_s(JobStatus.RETRY_SCHEDULED),
        ":running": av_s(JobStatus.RUNNING),
        ":dead": av_s(JobStatus.DEAD),
        ":now": av_n(now),
        ":error": av_error(FailureRecord(REDRIVE_ERROR, reason)),
        ":reason": av_s(reason),
        ":ttl": av_n(int(now + retention_s)),
        ":attn": av_s(attention_key(DEAD, envelope.job_id)),
    }
    sets: list[tuple[str, Expr]] = [
        ("status", ":dead"),
        ("finished_at", ":now"),
        ("updated_at", ":now"),
        ("error", ":error"),
        ("reason", ":reason"),
        ("expires_at", ":ttl"),
        ("attn", ":attn"),
        ("due", ":now"),
    ]
    if envelope.has_payload and envelope.payload_ref is None:
        # The message carried it (the record has only its hash): keep it for a replay.
        sets.append(("payload", ":payload"))
        values[":payload"] = av_json(envelope.payload)
    write = Write(
        table,
        {"id": av_s(envelope.job_id)},
        tuple(sets),
        ("lease_owner", "lease_expires", REDISPATCHES),
        values=values,
        returns="ALL_NEW",
    )
    return write.guard(
        "rejectable", REJECTABLE, {k: values[k] for k in (":queued", ":retry", ":running", ":now")}
    )
