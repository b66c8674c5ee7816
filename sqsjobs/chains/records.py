"""Sans-I/O DynamoDB requests of a chain: its record, its steps' records, and every write that moves them.

A chain lives in the jobs table: one record keyed ``chain#<chain id>`` (ids with ``#`` are the
table's own items, as the worker registry's ``worker#...``: no job id contains one), plus one job
record per step, keyed ``<chain id>-<index>``. The chain record carries no ``status``,
``updated_at`` or ``type``, so job listings, ``stats`` and ``sqsjobs jobs get`` never take it for a
job; its own state is ``chain_state``::

    chain_state  running ──step n succeeds (n < last)──▶ running (current = n + 1)
                   │ ──last step succeeds──▶ succeeded
                   │ ──step n dies──▶ stopped (stopped_at = n, stop_reason)
                   │ ──step n cancelled, or app.chains.cancel──▶ cancelled (stopped_at = n)
                   └ app.chains.cancel while step n runs: cancel_requested (the step stops at its
                     next heartbeat, or its successor refuses to start)

Step records: step 0 is written ``queued`` (a transactional enqueue's record: payload and a
``pending`` entry until its hint is sent), steps 1.. ``waiting``, holding their payload (or its S3
reference) and no attention entry: nothing but their predecessor's success makes them runnable
(``unblock``, in the same transaction as that success), and nothing sweeps them.

Every write to the chain record is conditional on ``chain_state = running AND current = n``: while
step n runs, only step n's own finish (fenced by its claim token, so it happens once) and a cancel
request change the record, and the cancel request leaves both alone — so a finish never meets a
refusal it did not expect (``chains.plugin``).
"""

from __future__ import annotations

import enum
import hashlib
import uuid
from typing import TYPE_CHECKING, Any

from sqsjobs.job import JobStatus, Witness
from sqsjobs.store.apply import Refusal
from sqsjobs.store.codec import WRITE_ID, Item, av_n, av_s, canonical_json, num_attr, str_attr
from sqsjobs.store.conditions import All, Fragment, eq
from sqsjobs.store.enqueue import put_job
from sqsjobs.store.schema import PENDING, TTL_ATTRIBUTE, attention_key
from sqsjobs.store.state_table import STATE_TABLE
from sqsjobs.store.write import Write, new_id_only

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from sqsjobs.store.conditions import Expr
    from sqsjobs.store.enqueue import NewJob

#: Key prefix of chain records.
CHAIN_PREFIX = "chain#"
#: The longest chain: its record and every step fit one TransactWriteItems (100 items), which
#: ``app.chains.cancel`` needs when it cancels the current step and every waiting one at once.
#: https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html
MAX_STEPS = 99


class ChainState(enum.StrEnum):
    """Where a chain is (``chain_state`` of its record)."""

    RUNNING = "running"
    SUCCEEDED = "succeeded"
    STOPPED = "stopped"
    CANCELLED = "cancelled"


# ── ids ──────────────────────────────────────────────────────────────────────────────────────
def new_chain_id(dedupe_key: str | None) -> str:
    """``c`` and 31 hex digits: random, or derived from the dedupe key (the same key, the same chain)."""
    if dedupe_key is None:
        return f"c{uuid.uuid4().hex[:31]}"
    digest = hashlib.sha256(("chain\0" + dedupe_key).encode()).hexdigest()
    return f"c{digest[:31]}"


def step_job_id(chain_id: str, index: int) -> str:
    """The job id of step ``index`` (0-based): the chain's id and the index, so either names the other."""
    return f"{chain_id}-{index:02d}"


def chain_key(chain_id: str) -> dict[str, Any]:
    """The chain record's key."""
    return {"id": av_s(f"{CHAIN_PREFIX}{chain_id}")}


def steps_hash(jobs: Sequence[NewJob]) -> str:
    """The identity of a chain's steps (types, payload hashes, queues), for the dedupe key's conflict check."""
    return hashlib.sha256(
        canonical_json([[j.type, j.payload_hash, j.queue] for j in jobs]).encode()
    ).hexdigest()


# ── creation: one TransactWriteItems ─────────────────────────────────────────────────────────
def chain_put(
    table: str, chain_id: str, jobs: Sequence[NewJob], *, now: float, dedupe_key: str | None, token: str
) -> dict[str, Any]:
    """The ``Put`` of the chain record: running at step 0; refused when the id exists (the dedupe check)."""
    item: Item = {
        **chain_key(chain_id),
        "chain_state": av_s(ChainState.RUNNING),
        "current": av_n(0),
        "length": av_n(len(jobs)),
        "created": av_n(now),
        "chain_updated": av_n(now),
        "step_types": {"L": [av_s(j.type) for j in jobs]},
        "steps_hash": av_s(steps_hash(jobs)),
        WRITE_ID: av_s(token),
    }
    if dedupe_key is not None:
        item["dedupe_key"] = av_s(dedupe_key)
    return {"Put": new_id_only(table, item).put_item()}


def waiting_put(table: str, job: NewJob, *, token: str) -> dict[str, Any]:
    """The ``Put`` of a later step's record: ``put_job``'s, but ``waiting`` and keeping its payload.

    No attention entry: a waiting step needs no sweeper, only its predecessor's success.
    """
    put = put_job(table, job).put_item()
    item = put["Item"]
    item["status"] = av_s(JobStatus.WAITING)
    if job.payload_ref is None:
        item["payload"] = av_s(job.payload_json)
    item[WRITE_ID] = av_s(token)
    return {"Put": put}


# ── a step's finish (entries of the chain plug-in's transaction) ────────────────────────────────────
# The predecessor succeeded, in the same transaction as its complete.
@STATE_TABLE.row(
    "unblock",
    sources={JobStatus.WAITING},
    target=JobStatus.QUEUED,
    refusals=(Refusal.CHANGED,),
    kept={Witness.MESSAGE, Witness.ATTENTION},
    owner="chains",
)
def unblock(
    table: str, job_id: str, *, now: float, recheck_at: float, start_by: float | None = None
) -> Write:
    """Waiting → queued: the predecessor succeeded (committed with that success).

    The record gets a ``pending`` entry due at ``recheck_at``: if the process dies before the hint
    is sent, or the hint is lost, the sweeper sends one then. ``clear_pending`` removes it once sent.
    ``start_by``: the step's expiry deadline, counted from now (a waiting step is not late: its
    ``expires_after`` bounds the wait for a start once it may start, not the chain's run).
    """
    values = {
        ":waiting": _WAITING_AV,
        ":queued": av_s(JobStatus.QUEUED),
        ":now": av_n(now),
        ":attn": av_s(attention_key(PENDING, job_id)),
        ":due": av_n(recheck_at),
    }
    sets = _UNBLOCK_SETS
    if start_by is not None:
        sets = _UNBLOCK_SETS_BY
        values[":start_by"] = av_n(round(start_by, 3))
    return Write(
        table, {"id": av_s(job_id)}, sets, guards=(Fragment("waiting", _WAITING, values),), values=values
    )


_WAITING = eq("status", ":waiting")
_WAITING_AV = av_s(JobStatus.WAITING)
_UNBLOCK_SETS: tuple[tuple[str, Expr], ...] = (
    ("status", ":queued"),
    ("run_at", ":now"),
    ("updated_at", ":now"),
    ("attn", ":attn"),
    ("due", ":due"),
)
_UNBLOCK_SETS_BY = (*_UNBLOCK_SETS, ("start_by", ":start_by"))


def pending_entry(unblocked: Write) -> dict[str, Any]:
    """The ``attn``/``due`` an ``unblock`` wrote, as ``transact.clear_sent`` takes them."""
    return {"id": unblocked.key["id"], "attn": unblocked.value(":attn"), "due": unblocked.value(":due")}


# An earlier step stopped the chain, or the chain was cancelled: the step never runs.
@STATE_TABLE.row(
    "drop",
    sources={JobStatus.WAITING},
    target=JobStatus.CANCELLED,
    refusals=(Refusal.CHANGED,),
    owner="chains",
)
def drop(table: str, job_id: str, *, now: float, reason: str, retention_s: float) -> Write:
    """Waiting → cancelled: the chain stopped or was cancelled before this step's turn."""
    values = {
        ":waiting": _WAITING_AV,
        ":cancelled": av_s(JobStatus.CANCELLED),
        ":now": av_n(now),
        ":reason": av_s(reason[:500]),
        ":ttl": av_n(int(now + retention_s)),
    }
    sets: tuple[tuple[str, Expr], ...] = (
        ("status", ":cancelled"),
        ("finished_at", ":now"),
        ("updated_at", ":now"),
        ("reason", ":reason"),
        (TTL_ATTRIBUTE, ":ttl"),
    )
    return Write(
        table, {"id": av_s(job_id)}, sets, guards=(Fragment("waiting", _WAITING, values),), values=values
    )


#: A chain record still running, at the step its writer read.
_AT_STEP = All((eq("chain_state", ":running"), eq("current", ":step")))


def _at_step(
    table: str, chain_id: str, step: int, sets: tuple[tuple[str, Expr], ...], values: dict[str, Any]
) -> Write:
    values = {":running": av_s(ChainState.RUNNING), ":step": av_n(step), **values}
    return Write(
        table,
        chain_key(chain_id),
        sets,
        guards=(Fragment("at_step", _AT_STEP, values),),
        values=values,
        old_on_refusal=False,
    )


def advance(table: str, chain_id: str, *, step: int, now: float) -> Write:
    """The chain record's current step goes from ``step`` to the next."""
    return _at_step(
        table,
        chain_id,
        step,
        (("current", ":next"), ("chain_updated", ":now")),
        {":next": av_n(step + 1), ":now": av_n(now)},
    )


def end(
    table: str,
    chain_id: str,
    *,
    step: int,
    state: ChainState,
    now: float,
    retention_s: float,
    reason: str = "",
) -> Write:
    """The chain record ends at ``step``: succeeded, stopped or cancelled (TTL set as a job's is)."""
    sets: tuple[tuple[str, Expr], ...] = (
        ("chain_state", ":state"),
        ("chain_finished", ":now"),
        ("chain_updated", ":now"),
        (TTL_ATTRIBUTE, ":ttl"),
    )
    values: dict[str, Any] = {":state": av_s(state), ":now": av_n(now), ":ttl": av_n(int(now + retention_s))}
    if state is not ChainState.SUCCEEDED:
        sets += (("stopped_at", ":step"), ("stop_reason", ":reason"))
        values[":reason"] = av_s(reason[:500] or state.value)
    return _at_step(table, chain_id, step, sets, values)


def cancel_requested(table: str, chain_id: str, *, step: int, now: float) -> Write:
    """Mark the chain as asked to stop while step ``step`` runs (leaves ``chain_state`` and ``current``)."""
    return _at_step(
        table,
        chain_id,
        step,
        (("cancel_requested", ":true"), ("chain_updated", ":now")),
        {":true": {"BOOL": True}, ":now": av_n(now)},
    )


# ── reads ────────────────────────────────────────────────────────────────────────────────────
def get_chain(table: str, chain_id: str) -> dict[str, Any]:
    """GetItem of the chain record, strongly consistent."""
    return {"TableName": table, "Key": chain_key(chain_id), "ConsistentRead": True}


def chain_fields(item: Mapping[str, Any]) -> dict[str, Any]:
    """The chain record's fields, decoded (``chains.ChainStatus`` is built from them)."""
    return {
        "state": ChainState(str_attr(item, "chain_state") or ChainState.RUNNING),
        "current": int(num_attr(item, "current") or 0),
        "length": int(num_attr(item, "length") or 0),
        "types": [v["S"] for v in item.get("step_types", {}).get("L", [])],
        "created": num_attr(item, "created"),
        "finished": num_attr(item, "chain_finished"),
        "stopped_at": None if "stopped_at" not in item else int(num_attr(item, "stopped_at") or 0),
        "reason": str_attr(item, "stop_reason"),
        "cancel_requested": bool(item.get("cancel_requested", {}).get("BOOL", False)),
        "steps_hash": str_attr(item, "steps_hash"),
    }
