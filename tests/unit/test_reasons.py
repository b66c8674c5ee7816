"""Reasons and outcomes that steer the runtime are StrEnums whose values are the strings that logs,
metrics and stored records already hold, so turning them into enums changed no output."""

from __future__ import annotations

import json

import pytest

from sqsjobs.context import InterruptReason, JobContext
from sqsjobs.job import AttemptOutcome
from sqsjobs.store.apply import ClaimRefusal


@pytest.mark.parametrize(
    ("enum", "values"),
    [
        (ClaimRefusal, ["missing", "finished", "not_due", "held_elsewhere", "exhausted", "conflict"]),
        (InterruptReason, ["cancel", "shutdown", "lease_lost"]),
        (AttemptOutcome, ["started", "succeeded", "retry", "dead", "cancelled", "released", "expired"]),
    ],
)
def test_each_member_serialises_as_the_string_it_replaced(enum, values):
    # GIVEN the members of a reason or outcome enum
    members = list(enum)
    # THEN they are exactly the old strings, and print, compare and serialise as those strings
    assert [m.value for m in members] == values
    assert [str(m) for m in members] == values
    assert members == values
    assert json.loads(json.dumps(members)) == values


def test_the_first_interrupt_reason_wins():
    # GIVEN a running job's context
    ctx = JobContext(job=None, worker_id="w", deadline=0.0, logger=None)  # type: ignore[arg-type]
    assert ctx.interrupt_reason is None
    # WHEN a heartbeat finds a lost lease, then the worker starts shutting down
    ctx.interrupt(InterruptReason.LEASE_LOST)
    ctx.interrupt(InterruptReason.SHUTDOWN)
    # THEN the execution acts on the first reason, and the handler sees that it should stop
    assert ctx.interrupt_reason is InterruptReason.LEASE_LOST
    assert ctx.cancel_requested
