"""Every row's declared refusals are what its writer really reads a refusal as.

A row of ``STATE_TABLE`` says how a refusal of its write reads (``Transition.refusals``); the code
that sends the write reads it: ``JobStore`` for a worker's transitions, ``store.apply`` for the
operator's and the features'. Here each row's write is refused by a store that answers with the
record as it was (``ALL_OLD``): no record at all, or a record in each status the row does not
admit, on which every other term of the write holds (``tests/state_table_examples.record``, the
record ``tests/integration/test_state_table_applied.py`` shows such a write is refused by). What
its writer makes of the refusal must be one of the row's declared refusals.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import pytest

from sqsjobs.envelope import Envelope
from sqsjobs.errors import StoreError
from sqsjobs.job import JobStatus
from sqsjobs.store.apply import Refused, apply
from sqsjobs.store.codec import CCF
from sqsjobs.store.job_store import JobStore
from sqsjobs.store.state_table import STATE_TABLE
from tests.state_table_examples import CALLS, ERROR, NOW, example, record, run_of

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from sqsjobs.store.codec import Item
    from sqsjobs.store.write import Write

TABLE, JOB = "tbl", "j1"


def refusal(item: Item | None) -> StoreError:
    return StoreError("refused", code=CCF, response={"Item": item} if item is not None else {})


class RefusingStore:
    """An applier whose every write is refused, the record returned as it was."""

    def __init__(self, item: Item | None) -> None:
        self.item = item

    async def write(self, single: Any, **_: Any) -> Any:
        raise refusal(self.item)

    async def single(self, write: Write) -> Any:
        raise refusal(self.item)

    async def transact(self, write: Write, entries: Any) -> Any:
        raise refusal(self.item)


#: row -> how the worker sends it, through its JobStore.
WORKER: dict[str, Callable[[JobStore], Awaitable[Any]]] = {
    "claim": lambda s: s.claim(
        Envelope(JOB, "t"),
        token="t2",
        message_id="m",
        first_delivery=False,
        now=NOW,
        lease_s=5,
        max_attempts=3,
    ),
    "heartbeat": lambda s: s.heartbeat(run_of(TABLE, JOB), now=NOW, lease_s=5),
    "complete": lambda s: s.complete(run_of(TABLE, JOB), now=NOW, result=None, retention_s=1),
    "schedule_retry": lambda s: s.schedule_retry(
        run_of(TABLE, JOB), now=NOW, run_at=NOW, error=ERROR, held=False
    ),
    "fail": lambda s: s.fail(run_of(TABLE, JOB), now=NOW, error=ERROR, reason="r", retention_s=1),
    "abort": lambda s: s.abort(run_of(TABLE, JOB), now=NOW, reason="r", retention_s=1),
    "release": lambda s: s.release(run_of(TABLE, JOB), now=NOW),
    "expire_claimed": lambda s: s.expire_claimed(run_of(TABLE, JOB), now=NOW, reason="r", retention_s=1),
    "reject": lambda s: s.reject(Envelope(JOB, "t"), now=NOW, error=ERROR, reason="r", retention_s=1),
    "expire": lambda s: s.expire(Envelope(JOB, "t"), now=NOW, reason="r", retention_s=1, type_bound_s=60),
    "sleep": lambda s: s.transition(run_of(TABLE, JOB), example("sleep", TABLE, JOB)),
}
WORKER["rescue"] = WORKER["claim"]


def applied(write: Write, item: Item | None) -> Any:
    """What ``store.apply`` answers when the store refuses ``write``."""
    flow = apply(write)
    next(flow)
    try:
        flow.throw(refusal(item))
    except StopIteration as done:
        return done.value
    raise AssertionError("apply sent a second request after a refusal")


def test_every_row_has_its_writer_here():
    assert set(CALLS) == {row.name for row in STATE_TABLE}


REFUSED_BY_STATUS = [
    (row, status)
    for row in sorted(CALLS)
    for status in [*JobStatus, None]
    if status is None or status not in STATE_TABLE.sharing(row)
]


@pytest.mark.parametrize(("row", "status"), REFUSED_BY_STATUS, ids=lambda v: str(v or "missing"))
def test_a_refused_write_reads_as_one_of_its_rows_refusals(row, status):
    # GIVEN the store holds the record in a status the row does not admit (or none), so refuses its write
    item = record(TABLE, JOB, status, row) if status is not None else None

    # WHEN the row's writer sends it: the worker's JobStore, or store.apply for everyone else
    if row in WORKER:
        outcome = asyncio.run(WORKER[row](JobStore(RefusingStore(item), TABLE, "w")))
    else:
        outcome = applied(example(row, TABLE, JOB), item)

    # THEN the writer reads it as one of the refusals the row declares
    assert isinstance(outcome, Refused)
    assert outcome.reason in STATE_TABLE[row].refusals, f"{row} from {status}: {outcome.reason}"
