"""A wait's reads are a function of its length only: driven here with a clock that moves by the pauses."""

from __future__ import annotations

import itertools

import pytest

from sqsjobs import WaitTimeout
from sqsjobs._aws import Call
from sqsjobs.store.waiting import FIRST_PAUSE_S, MAX_PAUSE_S, poll_flow, reads_within


def drive(timeout_s: float, ends_after: int | None = None):
    """Run ``poll_flow`` on a record that ends at read ``ends_after``; the clock moves only by the pauses."""
    now = [0.0]
    reads: list[bool] = []
    pauses: list[float] = []

    def read(first: bool):
        reads.append(first)
        yield Call("dynamodb", "get_item", {})
        return len(reads)

    flow = poll_flow(read, lambda n: n == ends_after, timeout_s, "job j", monotonic=lambda: now[0])
    answer = None
    try:
        call = flow.send(None)
        while True:
            if call.service == "clock":
                pauses.append(call.params["seconds"])
                now[0] += call.params["seconds"]
            call = flow.send(answer)
    except StopIteration as stop:
        return stop.value, reads, pauses


@pytest.mark.parametrize("timeout_s", [0, 0.05, 1, 3, 20, 60, 600])
def test_a_wait_that_runs_out_makes_exactly_its_bound_of_reads(timeout_s):
    with pytest.raises(WaitTimeout) as raised:
        drive(timeout_s)
    assert raised.value.reads == reads_within(timeout_s)
    assert raised.value.last == raised.value.reads


def test_the_pauses_grow_to_the_ceiling_and_only_the_first_read_is_consistent():
    _, reads, pauses = drive(1000, ends_after=40)
    assert reads[0] is True and not any(reads[1:])
    assert pauses[0] == FIRST_PAUSE_S
    assert all(b >= a for a, b in itertools.pairwise(pauses))
    assert max(pauses) == MAX_PAUSE_S


def test_a_record_that_ended_is_returned_at_the_read_that_saw_it():
    value, reads, _ = drive(20, ends_after=3)
    assert value == 3 and len(reads) == 3


def test_what_a_wait_costs_over_its_length():
    assert [reads_within(t) for t in (3, 20, 60)] == [8, 13, 17]
    # past the ceiling: one read per MAX_PAUSE_S
    assert reads_within(3600) - reads_within(3600 - 10 * MAX_PAUSE_S) == 10
