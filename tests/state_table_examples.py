"""One example write of every state-table row, and the record beside its status that the write's other terms need.

Shared by the two state-table tests; each example calls the builder its row registered.
``tests/unit/test_state_table.py`` reads each write's condition and update,
``tests/integration/test_state_table_applied.py`` sends it to a real store on a record in each
status. A row registered without an example here fails both (their first test).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import sqsjobs.app  # noqa: F401  (imports every feature: their rows are registered)
from sqsjobs.delivery import failure_record
from sqsjobs.envelope import Envelope
from sqsjobs.steps.records import StepRecord
from sqsjobs.store import codec, enqueue
from sqsjobs.store.codec import av_n, av_s
from sqsjobs.store.state_table import STATE_TABLE

if TYPE_CHECKING:
    from collections.abc import Callable

    from sqsjobs.job import Job, JobStatus
    from sqsjobs.store.codec import Item
    from sqsjobs.store.write import Write

NOW = 1_800_000_000.0
#: The claim token of the run the fenced writes belong to.
TOKEN = "0123456789abcdef0123456789abcdef"
#: The ``updated_at`` an operator's replay read (its guard against a record changed meanwhile).
SEEN = "1"
ERROR = failure_record(ValueError("boom"))


def new_job(job_id: str) -> enqueue.NewJob:
    return enqueue.NewJob(
        id=job_id,
        type="t",
        queue="default",
        payload={},
        payload_version=1,
        max_attempts=3,
        run_at=NOW,
        now=NOW,
    )


def run_of(table: str, job_id: str) -> Job:
    """The job as its run holds it: claimed once, with ``TOKEN``."""
    return codec.job_from_item(enqueue.put_job(table, new_job(job_id)).item).evolve(
        claim_token=TOKEN, lease_epoch=1, attempt=1
    )


#: row name -> how its writer calls the row's builder (given first), on ``(table, job id)``
CALLS: dict[str, Callable[[Callable[..., Write], str, str], Write]] = {
    "claim": lambda build, t, j: build(
        t, Envelope(j, "t"), owner="w2", token="t2", message_id="m", now=NOW, lease_s=5, max_attempts=3
    ),
    "heartbeat": lambda build, t, j: build(t, run_of(t, j), owner="w", now=NOW, lease_s=5),
    "complete": lambda build, t, j: build(t, run_of(t, j), owner="w", now=NOW, result=None, retention_s=1),
    "schedule_retry": lambda build, t, j: build(
        t, run_of(t, j), owner="w", now=NOW, run_at=NOW, error=ERROR, held=False
    ),
    "fail": lambda build, t, j: build(
        t, run_of(t, j), owner="w", now=NOW, error=ERROR, reason="r", retention_s=1
    ),
    "abort": lambda build, t, j: build(t, run_of(t, j), owner="w", now=NOW, reason="r", retention_s=1),
    "reject": lambda build, t, j: build(t, Envelope(j, "t"), now=NOW, error=ERROR, reason="r", retention_s=1),
    "release": lambda build, t, j: build(t, run_of(t, j), owner="w", now=NOW),
    "expire_claimed": lambda build, t, j: build(
        t, run_of(t, j), owner="w", now=NOW, reason="r", retention_s=1
    ),
    "wake": lambda build, t, j: build(t, j, NOW),
    "sleep": lambda build, t, j: build(
        t,
        run_of(t, j),
        StepRecord("sleep-1", NOW, 3.0, 1, {"until": NOW + 3}),
        until=NOW + 3,
        now=NOW,
        held=True,
    ),
    "cancel": lambda build, t, j: build(t, j, now=NOW, retention_s=1),
    "request_cancel": lambda build, t, j: build(t, j, now=NOW),
    "replay": lambda build, t, j: build(
        t, run_of(t, j), seen_updated=SEEN, now=NOW, max_attempts=3, audit={"a": 1}
    ),
    "expire": lambda build, t, j: build(
        t, Envelope(j, "t"), now=NOW, reason="r", retention_s=1, type_bound_s=60
    ),
    "unblock": lambda build, t, j: build(t, j, now=NOW, recheck_at=NOW + 300),
    "drop": lambda build, t, j: build(t, j, now=NOW, reason="r", retention_s=1),
    "supersede": lambda build, t, j: build(t, j, now=NOW, by="newer", retention_s=1),
}
CALLS["rescue"] = CALLS["claim"]


def example(row: str, table: str = "tbl", job_id: str = "j1") -> Write:
    """``row``'s write, built by the builder the row registered."""
    return CALLS[row](STATE_TABLE[row].build, table, job_id)


def record(table: str, job_id: str, status: JobStatus, row: str) -> Item:
    """A record in ``status`` on which every term of ``row``'s write but the status holds.

    One record serves every row (a run holding ``TOKEN`` whose lease lapsed, due, never started and
    past its start deadline, as the replay read it) but a wake's: a job asleep until later, in the
    attention index.
    """
    item = dict(enqueue.put_job(table, new_job(job_id)).item)
    item.pop("attn", None)
    item.pop("due", None)
    item |= {
        "status": av_s(status),
        "attempt": av_n(1),
        "lease_epoch": av_n(0),
        "lease_owner": av_s("w"),
        "claim_token": av_s(TOKEN),
        "lease_expires": av_n(NOW - 10),
        "run_at": av_n(NOW - 10),
        "start_by": av_n(NOW - 10),
        "updated_at": av_n(SEEN),
    }
    if row == "wake":
        item |= {"run_at": av_n(NOW + 100), "attn": av_s("held#00"), "due": av_n(NOW + 100)}
    return item
