"""Where a job's steps are kept: one attribute of the job's own record per step (sans-I/O).

A step is ``step:<name>`` on the job's item, a map::

    {"r": <the result, canonical JSON> | "ref": <its S3 object>, "at": started, "d": seconds, "a": attempt}

Why the record and not an item per step: the write that keeps a step must land only while this run
holds the claim, and the claim token lives on the record. On the record it is one conditional
UpdateItem (``status = running AND claim_token = :token``) and a later attempt reads every step in
the one GetItem it makes; an item per step would need a two-item transaction per step (a
``ConditionCheck`` on the record plus the ``Put``: 4 write units at least) and a read per step. The
price is the record's size: every write to the record is billed by its size (1 write unit per KB),
so steps keep small results inline (``INLINE_STEP_BYTES``) and larger ones in S3, and a job takes at
most ``MAX_STEPS`` steps, which keeps the record far below DynamoDB's 400 KB item limit
(docs/steps.md has the arithmetic).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqsjobs.job import JobStatus, Witness
from sqsjobs.store.apply import Refusal
from sqsjobs.store.codec import WRITE_ID, av_json, av_n, av_s, canonical_json, nonce, num_attr, str_attr
from sqsjobs.store.conditions import All, Compare, Exists, Fragment, Missing, Plus, eq
from sqsjobs.store.schema import HELD, attention_key
from sqsjobs.store.state_table import STATE_TABLE
from sqsjobs.store.write import Write

if TYPE_CHECKING:
    from collections.abc import Mapping

    from sqsjobs.job import Job

#: The prefix of a step's attribute on the job's record.
PREFIX = "step:"
#: A step's result longer than this (canonical JSON) is kept in S3, its record holding the reference.
INLINE_STEP_BYTES = 2 * 1024
#: Steps one job may record: 100 inline results of at most 2 KB keep the record under ~220 KB.
MAX_STEPS = 100
#: Longest step name (it is an attribute name, billed with every write of the record).
MAX_NAME_CHARS = 100
#: The write lands only while the run that took the step holds the claim (the finish's own fence).
FENCE = All((eq("status", ":running"), eq("claim_token", ":token")))


@dataclass(frozen=True)
class StepRecord:
    """One recorded step, as a later attempt replays it and ``jobs get`` shows it."""

    name: str
    #: Epoch seconds the step's function started.
    started_at: float
    #: How long its function ran (seconds).
    duration_s: float
    #: The job's attempt that ran it.
    attempt: int
    #: The result, when kept inline (None when ``ref`` names its object).
    result: Any = None
    #: Its S3 object, for a result over ``INLINE_STEP_BYTES``.
    ref: str | None = None


def attribute(name: str) -> str:
    """The record's attribute that holds step ``name``."""
    return f"{PREFIX}{name}"


def record_step(table: str, job: Job, step: StepRecord, text: str | None) -> Write:
    """Set ``step`` on ``job``'s record, fenced by this run's claim token; ``text``: the inline result's JSON.

    Writing the same step twice (botocore retrying after a lost answer) sets the same value: no
    write id is needed.
    """
    if job.claim_token is None:
        raise ValueError(f"job {job.id} was not claimed by this run: no claim token to fence a step on")
    fence = Fragment("fence", FENCE, {":running": av_s(JobStatus.RUNNING), ":token": av_s(job.claim_token)})
    return Write(
        table,
        {"id": av_s(job.id)},
        sets=((attribute(step.name), ":step"),),
        guards=(fence,),
        values={":step": step_value(step, text)},
        old_on_refusal=False,
    )


def step_value(step: StepRecord, text: str | None) -> dict[str, Any]:
    """The map a step is kept as (``text``: its inline result's JSON; None when ``ref`` names it)."""
    value: dict[str, Any] = {"at": av_n(step.started_at), "d": av_n(step.duration_s), "a": av_n(step.attempt)}
    if step.ref is not None:
        value["ref"] = av_s(step.ref)
    else:
        value["r"] = av_s(text if text is not None else "null")
    return {"M": value}


# A durable sleep: queued again until it wakes, the attempt given back; the same message re-armed
# to the wake-up (a retry's rule), or a ``held`` entry beyond it.
@STATE_TABLE.row(
    "sleep",
    sources={JobStatus.RUNNING},
    target=JobStatus.QUEUED,
    refusals=(Refusal.LEASE_LOST,),
    kept={Witness.MESSAGE, Witness.ATTENTION},
    owner="steps",
)
def sleep(
    table: str,
    job: Job,
    step: StepRecord | None,
    *,
    until: float,
    now: float,
    held: bool,
    unanswered: str | None = None,
) -> Write:
    """Running → queued until ``until``, fenced, the attempt given back, the sleep kept as a step.

    One write: the job cannot be found asleep without its sleep recorded, nor the sleep recorded
    with the job still running. ``held`` when the message cannot carry the wait (beyond the 12 h
    visibility cap, or past the message's expiry): the record then keeps the payload and a
    ``held`` entry, and the sweeper sends the job when due. A wait for a token records no step
    (``step`` None) and lands only while the token's answer attribute ``unanswered`` is missing: an
    answer that came first makes the run end without sleeping, and the rescued run reads it.
    """
    if job.claim_token is None:
        raise ValueError(f"job {job.id} was not claimed by this run: no claim token to fence a sleep on")
    sets: list[tuple[str, Any]] = [
        ("status", ":queued"),
        ("run_at", ":until"),
        ("updated_at", ":now"),
        ("attempt", Plus("attempt", "-", ":one")),
        (WRITE_ID, ":wid"),
    ]
    values: dict[str, Any] = {
        ":queued": av_s(JobStatus.QUEUED),
        ":until": av_n(until),
        ":now": av_n(now),
        ":one": av_n(1),
        ":wid": av_s(nonce()),
    }
    if step is not None:
        sets.append((attribute(step.name), ":step"))
        values[":step"] = step_value(step, canonical_json(step.result))
    if held:
        sets += [("attn", ":attn"), ("due", ":until")]
        values[":attn"] = av_s(attention_key(HELD, job.id))
        if job.payload_ref is None:
            sets.append(("payload", ":payload"))
            values[":payload"] = av_json(job.payload)
    fence = Fragment("fence", FENCE, {":running": av_s(JobStatus.RUNNING), ":token": av_s(job.claim_token)})
    guards = (fence, Fragment("unanswered", Missing(unanswered))) if unanswered else (fence,)
    return Write(
        table,
        {"id": av_s(job.id)},
        sets=tuple(sets),
        removes=("lease_owner", "lease_expires"),
        guards=guards,
        values=values,
    )


#: The prefix of a token's answer on the job's record (``tok:<n>``: ``{"v": json}`` or ``{"e": message}``).
ANSWER_PREFIX = "tok:"


def answer(table: str, job_id: str, n: int, *, now: float, value: str | None, error: str | None) -> Write:
    """Keep the answer to the job's ``n``-th token: only if the job created it and nobody answered yet."""
    body = {"e": av_s(error)} if error is not None else {"v": av_s(value if value is not None else "null")}
    return Write(
        table,
        {"id": av_s(job_id)},
        sets=((f"{ANSWER_PREFIX}{n}", ":answer"),),
        guards=(
            Fragment("created", Exists(attribute(f"token-{n}"))),
            Fragment("unanswered", Missing(f"{ANSWER_PREFIX}{n}")),
        ),
        values={":answer": {"M": {**body, "at": av_n(now)}}},
    )


# A job asleep on a wait token (held) that was just answered: due now, and a hint sent at once.
@STATE_TABLE.row(
    "wake",
    sources={JobStatus.QUEUED},
    target=JobStatus.QUEUED,
    refusals=(Refusal.CHANGED,),
    kept={Witness.ATTENTION, Witness.MESSAGE},
    owner="steps",
)
def wake(table: str, job_id: str, now: float) -> Write:
    """A job asleep on a token (queued, held) runs now: ``run_at`` and the held entry's ``due`` set to now."""
    return Write(
        table,
        {"id": av_s(job_id)},
        sets=(("run_at", ":now"), ("due", ":now")),
        guards=(
            Fragment("asleep", All((eq("status", ":queued"), Compare("run_at", ">", ":now")))),
            Fragment("held", Exists("attn")),
        ),
        values={":now": av_n(now), ":queued": av_s(JobStatus.QUEUED)},
        returns="ALL_NEW",
        old_on_refusal=False,
    )


def steps_of(item: Mapping[str, Any]) -> dict[str, StepRecord]:
    """The steps recorded on a job's item (wire format), by name."""
    found = {}
    for key, av in item.items():
        if not key.startswith(PREFIX) or "M" not in av:
            continue
        m = av["M"]
        raw = str_attr(m, "r")
        name = key[len(PREFIX) :]
        found[name] = StepRecord(
            name=name,
            started_at=num_attr(m, "at") or 0.0,
            duration_s=num_attr(m, "d") or 0.0,
            attempt=int(num_attr(m, "a") or 0),
            result=json.loads(raw) if raw is not None else None,
            ref=str_attr(m, "ref"),
        )
    return found


def in_order(steps: Mapping[str, StepRecord]) -> list[StepRecord]:
    """The steps in the order they ran."""
    return sorted(steps.values(), key=lambda s: (s.started_at, s.name))
