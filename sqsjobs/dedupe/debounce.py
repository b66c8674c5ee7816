"""``debounce``: the last payload of a quiet period wins, with a maximum wait (docs/dedupe.md).

The job's record keeps the payload until the job starts, and its message is a bare hint (the id
and type, no payload): the claim of a bare hint runs the record's payload, and re-arms the hint
while the record's ``run_at`` is ahead. So a later enqueue only has to rewrite the record — one
conditional update: the payload, and ``run_at`` pushed to ``now + quiet`` (never past the first
enqueue's ``+ max wait``) — while the job has never been claimed. The key item
(``sqsjobs.dedupe``) names the job gathering the key's enqueues; once that job was claimed,
the next enqueue takes the key over for a new job.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from sqsjobs._aws import Call, Flow
from sqsjobs.dedupe.records import EnqueuedId, take_key
from sqsjobs.envelope import Envelope
from sqsjobs.job import JobStatus
from sqsjobs.store.apply import Landed, Refused, apply
from sqsjobs.store.codec import av_n, av_s
from sqsjobs.store.conditions import All, AnyOf, Compare, Fragment, Missing, eq
from sqsjobs.store.enqueue import put_job
from sqsjobs.store.write import Write
from sqsjobs.transport import sqs

if TYPE_CHECKING:
    from collections.abc import Callable

    from sqsjobs.store.codec import Item
    from sqsjobs.store.enqueue import NewJob

#: A record still gathering enqueues: waiting, never claimed, and not rewritten by a later enqueue.
GATHERING = All(
    (
        eq("status", ":queued"),
        eq("attempt", ":zero"),
        AnyOf((Missing("debounced_at"), Compare("debounced_at", "<", ":now"))),
    )
)
_SETS = (
    ("payload", ":payload"),
    ("payload_hash", ":hash"),
    ("payload_size", ":size"),
    ("run_at", ":due"),
    ("debounced_at", ":now"),
    ("updated_at", ":now"),
)
#: The attention entry's margin past the maximum wait: a hint that was never sent is sent by the
#: sweeper then (a claim removes the entry, so a job that started costs nothing).
SAFETY_S = 60.0
_ROUNDS = 3


def due(now: float, quiet_s: float, until: float) -> float:
    """When the job may start: a quiet period after this enqueue, never past the maximum wait."""
    return min(now + quiet_s, until)


def gather(table: str, job_id: str, job: NewJob, *, at: float) -> Write:
    """The update that makes ``job``'s payload the gathering job's, due at ``at``."""
    values = {
        ":payload": av_s(job.payload_json),
        ":hash": av_s(job.payload_hash),
        ":size": av_n(len(job.payload_json)),
        ":due": av_n(at),
        ":now": av_n(job.now),
        ":queued": av_s(JobStatus.QUEUED),
        ":zero": av_n(0),
    }
    return Write(
        table, {"id": av_s(job_id)}, _SETS, guards=(Fragment("gathering", GATHERING, values),), values=values
    )


def enqueue_flow(
    table: str,
    job: NewJob,
    *,
    quiet_s: float,
    max_wait_s: float,
    retention_s: float,
    queue_url: Callable[[NewJob], Flow[str]],
) -> Flow[EnqueuedId]:
    """Gather ``job`` into the key's job, or start a new one: the id to return."""
    if job.payload_ref is not None:
        raise ValueError(
            f"{job.type!r}: a debounced payload stays in the record; keep it under the inline limit"
        )
    holder: str | None = None
    replaced: str | None = None
    for _ in range(_ROUNDS):
        until = job.now + max_wait_s
        put = take_key(table, job, until=until, retention_s=retention_s, holder=holder)
        taken = yield from apply(put, own=lambda item: item.get("job_id") == av_s(job.id))
        if isinstance(taken, Landed):
            yield from _start(table, job, at=due(job.now, quiet_s, until), until=until, queue_url=queue_url)
            return EnqueuedId.of(job.id, replaced=replaced)
        key_item = taken.item
        if key_item is None:
            raise taken.as_error()
        holder = str(key_item["job_id"]["S"])
        at = due(job.now, quiet_s, float(key_item["until"]["N"]))
        gathered = yield from apply(gather(table, holder, job, at=at))
        if isinstance(gathered, Landed):
            return EnqueuedId.of(holder, deduplicated=True)
        record = gathered.item
        if record is not None and _still_gathering(record):
            return EnqueuedId.of(holder, deduplicated=True)  # a later enqueue's payload won
        if record is None and job.now - float(key_item["created_at"]["N"]) < 16 * 60:
            return EnqueuedId.of(holder, deduplicated=True)  # its record is on its way
        replaced = holder  # the job started (or never came): a new one takes the key
    assert holder is not None
    return EnqueuedId.of(holder, deduplicated=True)


def _still_gathering(record: Item) -> bool:
    return record.get("status") == av_s(JobStatus.QUEUED) and record.get("attempt") == av_n(0)


def _start(
    table: str, job: NewJob, *, at: float, until: float, queue_url: Callable[[NewJob], Flow[str]]
) -> Flow[None]:
    """Write the gathering record (the payload in it), then send its bare hint, due at ``at``."""
    job = dataclasses.replace(job, run_at=at)
    put = put_job(table, job, pending_until=until + SAFETY_S)
    item = {**put.item, "debounced_at": av_n(job.now)}
    written = yield from apply(dataclasses.replace(put, item=item), own=lambda found: found == item)
    if isinstance(written, Refused):  # a fresh id: only a record this very put wrote could be there
        raise written.as_error()
    url = yield from queue_url(job)
    body = Envelope(job.id, job.type).to_body()
    yield Call(
        "sqs",
        "send_message",
        {"QueueUrl": url, "MessageBody": body, "DelaySeconds": sqs.clamp_delay(at - job.now)},
    )
