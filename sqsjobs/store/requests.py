"""Sans-I/O writes a run rarely makes (release, heartbeat) and the reject, which ends a job without a run.

A run's claim and finish, the writes every job makes, are in ``store/runs.py``; these are the
others. Release and heartbeat are fenced like the finish (``runs.fenced``: conditional on the
run's claim token, with a write id its own retried answer is recognised by); a reject needs no
claim. How each refusal is read is next to the transition, in ``store/job_store.py``.

Item layout: one item per job keyed by ``id``, under 1 KB on the happy path (one write unit per
write): the SQS message carries the payload, the record its hash and size. Only records that need
attention (held, pending, dead) carry ``attn``/``due``, the keys of the one sparse index
(``store/schema.py``); no write of the happy path touches an index. ``audit`` is a capped list of
operator actions (retry, replay), read through ``Job.extra``.

Where the other writes are built: the producer's record and the message it sends in
``store/enqueue.py``, the claims and finishes in ``store/runs.py``, expiry in ``store/deadlines.py``, the
operator's (cancel, request_cancel, replay) in ``store/operator.py``, the sweeper's dispatch mark in
``store/schema.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqsjobs.job import AttemptOutcome, FailureRecord, Job, JobStatus, Progress, Witness
from sqsjobs.store.apply import ClaimRefusal, Refusal
from sqsjobs.store.codec import WRITE_ID, av_error, av_json, av_n, av_s, creates_from, nonce, progress_attr
from sqsjobs.store.conditions import All, AnyOf, Compare, IfNotExists, Missing, OneOf, Plus, eq
from sqsjobs.store.runs import LEASE, fenced, history
from sqsjobs.store.schema import DEAD, attention_key
from sqsjobs.store.state_table import FENCED, STATE_TABLE
from sqsjobs.store.write import Write

if TYPE_CHECKING:
    from collections.abc import Mapping

    from sqsjobs.envelope import Envelope
    from sqsjobs.store.conditions import Expr


# The message made visible again at once (or re-armed a while, for a newer payload version).
@STATE_TABLE.row(
    "release", sources={JobStatus.RUNNING}, target=JobStatus.QUEUED, refusals=FENCED, kept={Witness.MESSAGE}
)
def release(table: str, job: Job, *, owner: str, now: float) -> Write:
    """Running → queued on graceful shutdown, fenced; the attempt is given back."""
    return fenced(
        table,
        job,
        sets=(
            ("status", ":queued"),
            ("run_at", ":now"),
            ("updated_at", ":now"),
            ("attempt", Plus("attempt", "-", ":one")),
            ("history", ":history"),
        ),
        values={
            ":queued": av_s(JobStatus.QUEUED),
            ":now": av_n(now),
            ":one": av_n(1),
            ":history": history(job, now, AttemptOutcome.RELEASED, owner, None),
        },
        removes=LEASE,
    )


# Claimed ahead of a free slot, its deadline passed before the slot came: never started (fenced).
@STATE_TABLE.row("expire_claimed", sources={JobStatus.RUNNING}, target=JobStatus.EXPIRED, refusals=FENCED)
def expire_claimed(table: str, job: Job, *, owner: str, now: float, reason: str, retention_s: float) -> Write:
    """Running → expired, fenced: claimed ahead of a free slot, its deadline passed before the slot came.

    Its handler never started, so the attempt is given back, as a release does; the record ends the
    way a claim refused for its deadline would have ended it.
    """
    return fenced(
        table,
        job,
        sets=(
            ("status", ":expired"),
            ("finished_at", ":now"),
            ("updated_at", ":now"),
            ("reason", ":reason"),
            ("attempt", Plus("attempt", "-", ":one")),
            ("history", ":history"),
            ("expires_at", ":ttl"),
        ),
        values={
            ":expired": av_s(JobStatus.EXPIRED),
            ":now": av_n(now),
            ":reason": av_s(reason),
            ":one": av_n(1),
            ":history": history(job, now, AttemptOutcome.EXPIRED, owner, None),
            ":ttl": av_n(int(now + retention_s)),
        },
        removes=LEASE,
    )


# A run about to outlive its message gets its payload and a ``pending`` entry, due when its
# lease would lapse (``runtime/outliving.py``): the sweeper brings it back if its owner died.
@STATE_TABLE.row(
    "heartbeat",
    sources={JobStatus.RUNNING},
    target=JobStatus.RUNNING,
    refusals=(Refusal.LEASE_LOST, Refusal.MOVED_ON),
    kept={Witness.LEASE, Witness.ATTENTION},
)
def heartbeat(
    table: str,
    job: Job,
    *,
    owner: str,
    now: float,
    lease_s: float,
    progress: Progress | None = None,
    notes: Mapping[str, Any] | None = None,
) -> Write:
    """Running → running with a later lease expiry, fenced; ``ALL_NEW`` shows a cancel request.

    ``progress``: the handler's latest report not yet written (``ctx.progress``) rides on this
    write, so reporting progress costs no write of its own. ``notes``: attributes a watch noted on
    the run (``RunWatch``: the slow-run flag), each set only if the record has none yet.
    """
    sets: tuple[tuple[str, Expr], ...] = (("lease_expires", ":expires"), ("updated_at", ":now"))
    values = {":expires": av_n(now + lease_s), ":now": av_n(now)}
    if progress is not None:
        sets += (("progress", ":progress"),)
        values[":progress"] = progress_attr(progress, now)
    for n, (name, value) in enumerate(sorted((notes or {}).items())):
        sets += ((name, IfNotExists(name, f":note{n}")),)
        values[f":note{n}"] = av_json(value)
    return fenced(table, job, sets=sets, values=values, returns="ALL_NEW")


# ── transitions without an owner ─────────────────────────────────────────────────────────────
_REJECT_SETS: tuple[tuple[str, Expr], ...] = (
    ("status", ":dead"),
    ("finished_at", ":now"),
    ("updated_at", ":now"),
    ("error", ":error"),
    ("reason", ":reason"),
    ("expires_at", ":ttl"),
    ("attn", ":attn"),
    ("due", ":now"),
    ("attempt", IfNotExists("attempt", ":zero")),
    ("lease_epoch", IfNotExists("lease_epoch", ":zero")),
)
#: What a reject may end: a waiting job, or a running one whose lease expired.
REJECTABLE = AnyOf(
    (
        OneOf("status", (":queued", ":retry")),
        All((eq("status", ":running"), Compare("lease_expires", "<", ":now"))),
    )
)


# Dead without a run (unknown type, attempts used up by runs that never finished): running only
# once its lease expired. Its refusals read as a claim's with no attempt left.
@STATE_TABLE.row(
    "reject",
    sources={JobStatus.QUEUED, JobStatus.RETRY_SCHEDULED, JobStatus.RUNNING},
    target=JobStatus.DEAD,
    refusals=(ClaimRefusal.MISSING, ClaimRefusal.FINISHED, ClaimRefusal.HELD_ELSEWHERE, ClaimRefusal.NOT_DUE),
)
def reject(
    table: str, envelope: Envelope, *, now: float, error: FailureRecord, reason: str, retention_s: float
) -> Write:
    """A job that must not run (unknown type, invalid payload, attempts exhausted) → dead, unclaimed.

    Like the claim, it creates the record from a version 2 message if there is none yet, so a
    producer's write that lands later finds the job already dead (and says so) instead of queuing a
    job whose message is gone. The record keeps the payload and a ``dead`` attention entry.
    """
    values: dict[str, Any] = {
        ":queued": av_s(JobStatus.QUEUED),
        ":retry": av_s(JobStatus.RETRY_SCHEDULED),
        ":running": av_s(JobStatus.RUNNING),
        ":dead": av_s(JobStatus.DEAD),
        ":now": av_n(now),
        ":error": av_error(error),
        ":reason": av_s(reason),
        ":ttl": av_n(int(now + retention_s)),
        ":attn": av_s(attention_key(DEAD, envelope.job_id)),
        ":zero": av_n(0),
    }
    write = Write(table, {"id": av_s(envelope.job_id)}, _REJECT_SETS, LEASE, values=values)
    if not envelope.has_payload:
        return write.guard("rejectable", REJECTABLE, values)
    created, created_values = creates_from(envelope)
    created_values[":payload"] = av_json(envelope.payload)
    write = write.also_set((*created, ("payload", ":payload")), created_values)
    return write.guard("new_or_rejectable", AnyOf((Missing("id"), REJECTABLE)), values)


def with_write_id(write: Write) -> Write:
    """``write`` that also sets a fresh nonce (``wid``): what a transaction recognises its own landed try by."""
    return write.also_set(((WRITE_ID, ":wid"),), {":wid": av_s(nonce())})


def get(table: str, job_id: str) -> dict[str, Any]:
    """GetItem, strongly consistent (an operator asking right after a write sees it)."""
    return {"TableName": table, "Key": {"id": av_s(job_id)}, "ConsistentRead": True}
