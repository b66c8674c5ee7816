"""The writes that keep a witness for a job whose handler runs longer than its message lives (sans-I/O).

SQS deletes a message ``message_retention_s`` after its first send, even while a worker holds it
invisible. A running job is witnessed by its lease *and* its message: once the owner dies, the
message comes back when the owner stops extending it, and its claim rescues the job. A job still
running when its message expires has only its lease, and a lapsed lease brings nothing back by
itself. So when the owner's heartbeat sees the message near its end, the record gets what a held
job has — its payload and a ``pending`` attention entry, due when its lease would lapse::

    claim ── heartbeat ... ── message near its end: mark (payload, pending, due = lease end) ──▶
      sweeper at due:  lease still live ─▶ ``due`` moved to the lease's end (no hint)
                       lease lapsed ─────▶ a hint from the record (its payload): the claim rescues
                                           the job and takes the entry off the index
                       job finished ─────▶ the entry removed

One write (the payload's size) per job that outlives its message (14 days by default), then one
read and one write per lease while it runs; nothing for any other job.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqsjobs.job import JobStatus
from sqsjobs.store.codec import WRITE_ID, av_n, av_s, nonce
from sqsjobs.store.conditions import All, Missing, eq
from sqsjobs.store.enqueue import kept_payload
from sqsjobs.store.schema import PENDING, UNCHANGED_ENTRY, attention_key
from sqsjobs.store.write import Write

if TYPE_CHECKING:
    from sqsjobs.job import Job
    from sqsjobs.store.schema import DueRecord

#: The owner's own run, with no attention entry yet (the claim removed any it had).
_OWN_UNMARKED = All((eq("status", ":running"), eq("claim_token", ":token"), Missing("attn")))


def mark(table: str, job: Job, *, payload: Any, due: float, now: float) -> Write:
    """The owner's run keeps its payload and a ``pending`` entry due at ``due`` (its lease's end)."""
    if job.claim_token is None:
        raise ValueError(f"job {job.id} was not claimed by this run: no claim token to fence on")
    sets = {"attn": av_s(attention_key(PENDING, job.id)), "due": av_n(due), "updated_at": av_n(now)}
    sets |= kept_payload(job, payload)
    sets[WRITE_ID] = av_s(nonce())
    return Write(
        table,
        {"id": av_s(job.id)},
        tuple((name, f":{name}") for name in sets),
        values={f":{name}": value for name, value in sets.items()},
    ).guard(
        "own_unmarked",
        _OWN_UNMARKED,
        {":running": av_s(JobStatus.RUNNING), ":token": av_s(job.claim_token)},
    )


def _entry(record: DueRecord) -> dict[str, Any]:
    return {":attn": av_s(record.attn), ":due": {"N": record.due_raw}}


def postpone(table: str, record: DueRecord, *, due: float) -> Write:
    """The entry of a job still running under a live lease: looked at again when that lease ends."""
    return Write(table, {"id": av_s(record.id)}, (("due", ":next"),), values={":next": av_n(due)}).guard(
        "unchanged_entry", UNCHANGED_ENTRY, _entry(record)
    )


def clear(table: str, record: DueRecord) -> Write:
    """The entry of a job that finished (its owner outlived its message): off the index."""
    return Write(table, {"id": av_s(record.id)}, removes=("attn", "due")).guard(
        "unchanged_entry", UNCHANGED_ENTRY, _entry(record)
    )
