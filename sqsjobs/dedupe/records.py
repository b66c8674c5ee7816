"""``WhileActive``'s and ``Replace``'s key items: the item that names the live job holding an idempotency key.

A *key item* (``unique#<key id>``) names the job holding the key; it is written before the job's
message (one conditional put on the happy path, then the job's own writes). A refused put reads the
holder's record: live (or not yet written), the enqueue returns the holder; finished, it takes the
key over with a put conditional on that holder (so 20 racing enqueuers after a finish make one new
job). ``Debounce`` (``sqsjobs.dedupe.debounce``) names its gathering job with the same items.

``Replace`` takes the key from its holder whatever the holder's state, then stops the holder: a
waiting one is cancelled (the state table's ``cancel``), a running one superseded (``supersede``,
below: running → cancelled by another than its worker, so that run's fenced writes, its success
among them, are refused, and its next lease renewal tells its handler it was cancelled).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqsjobs._aws import Call, Flow, sleep_call
from sqsjobs.job import TERMINAL, JobStatus
from sqsjobs.store.apply import Landed, Refusal, apply
from sqsjobs.store.codec import av_n, av_s, idempotent_job_id, job_from_item
from sqsjobs.store.conditions import Fragment, Missing, eq
from sqsjobs.store.operator import cancel, request_cancel
from sqsjobs.store.requests import get
from sqsjobs.store.schema import TTL_ATTRIBUTE
from sqsjobs.store.state_table import STATE_TABLE
from sqsjobs.store.write import Put, Write, new_id_only

if TYPE_CHECKING:
    from sqsjobs.store.codec import Item
    from sqsjobs.store.conditions import Expr
    from sqsjobs.store.enqueue import NewJob

#: The prefix of a ``while_active`` key item's id (a job id is hex, so the two never meet).
KEY_PREFIX = "unique#"
#: A key item whose job has no record this long after the item was written is stranded (its
#: enqueuer died before sending the message): the next enqueue takes it over. The bound is past
#: the longest SQS delay, after which a sent message would have created the record.
STRANDED_AFTER_S = 16 * 60.0
#: How many holders one enqueue looks at before it settles on the last one (each takeover it loses
#: names a holder another enqueuer has just made, which is live).
_ROUNDS = 3


class EnqueuedId(str):
    """A job id, with what the dedup mode did (``App.enqueue``'s result is still a plain ``str`` to use).

    ``deduplicated``: the key named a live job, whose id this is (no new job). ``replaced``: the
    id of the job the key named before this new one: a finished one (``while_active``), or the one
    this enqueue stopped (``replace``); else None.
    """

    deduplicated: bool = False
    replaced: str | None = None

    @classmethod
    def of(cls, job_id: str, *, deduplicated: bool = False, replaced: str | None = None) -> EnqueuedId:
        """The id ``job_id`` carrying what the enqueue did."""
        out = cls(job_id)
        out.deduplicated = deduplicated
        out.replaced = replaced
        return out


def key_id(job: NewJob) -> str:
    """The id of the ``while_active`` key item of ``job``'s key (scoped like an id: type and tenant)."""
    assert job.idempotency_key is not None
    return KEY_PREFIX + idempotent_job_id(job.type, job.idempotency_key, job.tenant)


def take_key(
    table: str, job: NewJob, *, retention_s: float, holder: str | None = None, until: float | None = None
) -> Put:
    """The put that makes ``job`` the key's holder: if no job holds it, or if ``holder`` still does.

    ``until``: a debounced key's maximum wait, kept on the item (``sqsjobs.dedupe.debounce``). The
    item expires (the table's TTL) a retention after the job may start (or after ``until``), as a
    finished record does.
    """
    item: Item = {
        "id": av_s(key_id(job)),
        "job_id": av_s(job.id),
        "created_at": av_n(job.now),
        TTL_ATTRIBUTE: av_n(int((max(job.run_at, job.now) if until is None else until) + retention_s)),
    }
    if until is not None:
        item["until"] = av_n(until)
    if holder is None:
        return new_id_only(table, item)
    return Put(
        table, item, (Fragment("same_holder", eq("job_id", ":holder"), {":holder": av_s(holder)}),), True
    )


def holder_status(table: str, job_id: str) -> dict[str, object]:
    """The GetItem of the holder's status (strongly consistent: a finish just written counts)."""
    return {
        "TableName": table,
        "Key": {"id": av_s(job_id)},
        "ConsistentRead": True,
        "ProjectionExpression": "#s",
        "ExpressionAttributeNames": {"#s": "status"},
    }


def is_free(status_item: Item | None, key_item: Item, now: float) -> bool:
    """True when the holder no longer holds the key: its job finished, or its record never came."""
    if status_item is None:
        return now - float(key_item["created_at"]["N"]) > STRANDED_AFTER_S
    return JobStatus(status_item["status"]["S"]) in TERMINAL


def claim_key_flow(table: str, job: NewJob, *, retention_s: float) -> Flow[EnqueuedId]:
    """Make ``job`` the key's holder, or find the live job that is: the id to return.

    The result's ``deduplicated`` is True when another job holds the key (``job`` must not be
    enqueued); otherwise ``job`` holds it, and ``replaced`` names the finished job it took it from.
    """
    holder: str | None = None
    replaced: str | None = None
    for _ in range(_ROUNDS):
        put = take_key(table, job, retention_s=retention_s, holder=holder)
        # A retry whose first try landed (its answer lost) finds the item naming this very job.
        outcome = yield from apply(put, own=lambda item: item.get("job_id") == av_s(job.id))
        if isinstance(outcome, Landed):
            return EnqueuedId.of(job.id, replaced=replaced)
        key_item = outcome.item
        if key_item is None:
            raise outcome.as_error()
        holder = str(key_item["job_id"]["S"])
        answer = yield Call("dynamodb", "get_item", holder_status(table, holder))
        if not is_free(answer.get("Item"), key_item, job.now):
            return EnqueuedId.of(holder, deduplicated=True)
        replaced = holder
    assert holder is not None
    return EnqueuedId.of(holder, deduplicated=True)


# ── replace: the newest enqueue of a key runs, the one before it is stopped ─────────────────────
#: How long a ``replace`` enqueue waits for the record of a holder it found without one (its
#: enqueuer is between the key item and the record, milliseconds apart), reading it this often.
UNWRITTEN_READS, UNWRITTEN_EVERY_S = 5, 0.1
_SUPERSEDE_SETS: tuple[tuple[str, Expr], ...] = (
    ("status", ":cancelled"),
    ("finished_at", ":now"),
    ("updated_at", ":now"),
    ("reason", ":reason"),
    ("expires_at", ":ttl"),
)


# A newer enqueue of its key replaced it (``Replace``): its run is cancelled by the enqueuer.
@STATE_TABLE.row(
    "supersede",
    sources={JobStatus.RUNNING},
    target=JobStatus.CANCELLED,
    refusals=(Refusal.CHANGED,),
    owner="dedupe",
)
def supersede(
    table: str, job_id: str, *, now: float, by: str, retention_s: float, reason: str | None = None
) -> Write:
    """Running → cancelled, by the enqueue that replaced it: the run's claim is dropped with its lease.

    The run's fenced writes (its success, a retry, its own abort) are then refused: it never
    commits. Its worker's next renewal is refused too, and finds the record cancelled: its handler
    is told as of a cancel request (``ctx.cancelled``). Refused for a job with a ``notify`` target
    (its delivery is written by the run's own abort: ``Replace`` asks that one to stop instead), a
    batch item or a chain step (``Replace`` is refused for both at enqueue). ``reason``: what the
    record says, when not a replacement (a ``cancel_on`` signal, ``sqsjobs.signals``).
    """
    values = {
        ":running": av_s(JobStatus.RUNNING),
        ":cancelled": av_s(JobStatus.CANCELLED),
        ":now": av_n(now),
        ":reason": av_s(reason or f"replaced by job {by}"),
        ":ttl": av_n(int(now + retention_s)),
    }
    return Write(
        table,
        {"id": av_s(job_id)},
        _SUPERSEDE_SETS,
        ("lease_owner", "lease_expires", "claim_token"),
        guards=(
            Fragment("running", eq("status", ":running"), values),
            Fragment("untold", Missing("notify"), {}),
            Fragment("not_a_batch_item", Missing("batch_key"), {}),
            Fragment("not_a_chain_step", Missing("chain_id"), {}),
        ),
        values=values,
    )


def replace_key_flow(table: str, job: NewJob, *, retention_s: float) -> Flow[EnqueuedId]:
    """Make ``job`` the key's holder whatever the holder's state, then stop the holder it replaced.

    The key item moves first (a put conditional on the holder it read, so of two racing enqueues
    one wins each round and the other replaces the winner), then the holder is stopped: cancelled
    while it waits, superseded while it runs, left alone once finished. The result's ``replaced``
    names the job stopped (None: there was none, or it had finished).
    """
    holder: str | None = None
    while True:
        put = take_key(table, job, retention_s=retention_s, holder=holder)
        outcome = yield from apply(put, own=lambda item: item.get("job_id") == av_s(job.id))
        if isinstance(outcome, Landed):
            break
        if outcome.item is None:
            raise outcome.as_error()
        holder = str(outcome.item["job_id"]["S"])
    if holder is None or holder == job.id:
        return EnqueuedId.of(job.id)
    stopped = yield from stop_flow(table, holder, by=job.id, now=job.now, retention_s=retention_s)
    return EnqueuedId.of(job.id, replaced=holder if stopped else None)


def stop_flow(table: str, job_id: str, *, by: str, now: float, retention_s: float) -> Flow[bool]:
    """Stop the replaced job ``job_id``: True if this stopped it, False if it had finished (or never came)."""
    for read in range(UNWRITTEN_READS + 3):
        answer = yield Call("dynamodb", "get_item", get(table, job_id))
        if "Item" not in answer:
            if read >= UNWRITTEN_READS:
                return False  # its enqueuer died before its record: nothing will run it
            yield sleep_call(UNWRITTEN_EVERY_S)
            continue
        old = job_from_item(answer["Item"])
        if old.status in TERMINAL:
            return False
        if old.status is JobStatus.RUNNING and old.notify is None:
            write = supersede(table, job_id, now=now, by=by, retention_s=retention_s)
        elif old.status is JobStatus.RUNNING:  # told of its end by its own abort
            write = request_cancel(table, job_id, now=now)
        else:
            reason = f"replaced by job {by}"
            write = cancel(table, job_id, now=now, retention_s=retention_s, untold=True, reason=reason)
        if isinstance((yield from apply(write)), Landed):
            return True
    return False
