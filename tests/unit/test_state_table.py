"""One state table: every row's write admits exactly the row's statuses, and sets its target.

``STATE_TABLE`` (``sqsjobs/store/state_table.py``) is the single source: each row is registered by
the builder of its write, the core's and each feature's. This test reads the condition and the
update of each row's write and the table in ``docs/lifecycle.md``, and fails when any of them
disagrees with the row — so the code, the table and the docs cannot drift apart again. The same
writes, sent to a real store through ``store.apply``: tests/integration/test_state_table_applied.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import sqsjobs.app  # noqa: F401  (imports every feature: their rows are registered)
from sqsjobs.job import JobStatus
from sqsjobs.store import enqueue, runs
from sqsjobs.store.conditions import All, AnyOf, Compare, Not, OneOf
from sqsjobs.store.state_table import STATE_TABLE
from sqsjobs.store.write import Write
from tests.state_table_examples import CALLS, NOW, example

DOCS = Path(__file__).resolve().parents[2] / "docs" / "lifecycle.md"


def _write(operation: str) -> Write:
    return example(operation)


def _placeholders(condition) -> list[str]:
    """Every ``:value`` a typed condition compares with."""
    match condition:
        case Compare(left, _, right):
            return [o for o in (left, right) if o.startswith(":")]
        case OneOf(_, options):
            return list(options)
        case All(parts) | AnyOf(parts):
            return [p for part in parts for p in _placeholders(part)]
        case Not(part):
            return _placeholders(part)
    return []


def statuses_in_condition(write) -> set[JobStatus]:
    values = write.all_values()
    placeholders = [p for f in write.guards for p in _placeholders(f.condition)]
    return {JobStatus(values[p]["S"]) for p in placeholders if values[p].get("S") in set(JobStatus)}


def target_status(write) -> JobStatus | None:
    value = dict(write.sets).get("status")
    return JobStatus(write.all_values()[value]["S"]) if value is not None else None


def test_every_row_has_an_example_and_every_example_a_row():
    assert set(CALLS) == {row.name for row in STATE_TABLE}


@pytest.mark.parametrize("operation", sorted(CALLS))
def test_the_writes_condition_admits_exactly_the_rows_sources(operation):
    # rows built by one builder (claim and rescue) share one condition: the union of their sources
    assert statuses_in_condition(_write(operation)) == STATE_TABLE.sharing(operation)


@pytest.mark.parametrize("operation", sorted(CALLS))
def test_the_write_sets_the_rows_target(operation):
    row = STATE_TABLE[operation]
    target = target_status(_write(operation))
    if target is None:  # the write leaves the status alone: a self-transition
        assert row.self_transition
    else:
        assert target is row.target


def doc_rows() -> dict[str, tuple[set[JobStatus], JobStatus | None]]:
    """The rows of the transitions table: the one whose header is ``| operation | from | to |``."""
    rows: dict[str, tuple[set[JobStatus], JobStatus | None]] = {}
    in_table = False
    for line in DOCS.read_text().splitlines():
        if line.startswith("| operation | from | to |"):
            in_table = True
            continue
        if in_table and not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not in_table or cells[0].startswith("---"):
            continue
        froms = {s for s in JobStatus if re.search(rf"\b{s.value}\b", cells[1])}
        tos = [s for s in JobStatus if re.search(rf"\b{s.value}\b", cells[2])]
        rows[cells[0].split()[0]] = (froms, tos[0] if len(tos) == 1 else None)
    return rows


def test_docs_lifecycle_lists_every_transition_as_the_table_has_it():
    documented = doc_rows()
    assert {row.name: (set(row.sources), row.target) for row in STATE_TABLE} == {
        name: row for name, row in documented.items() if name != "enqueue"
    }


def test_the_batched_claim_is_the_claim_of_a_waiting_job_never_claimed_before():
    new = enqueue.NewJob(
        id="j1", type="t", queue="default", payload={}, payload_version=1, max_attempts=3, run_at=NOW, now=NOW
    )
    fresh = runs.fresh_claim(
        "tbl",
        enqueue.envelope_of(new),
        owner="w",
        token="t",
        message_id="m",
        now=NOW,
        lease_s=5,
        max_attempts=3,
        clock_skew_s=1,
    )
    assert statuses_in_condition(fresh) == STATE_TABLE["claim"].sources
    assert target_status(fresh) is STATE_TABLE["claim"].target
    assert Compare("lease_epoch", "=", ":zero") in fresh.fragment("fresh").parts


@pytest.mark.parametrize("operation", ["complete", "schedule_retry", "fail", "abort", "release"])
def test_a_batched_write_admits_and_sets_the_statuses_its_update_item_does(operation):
    params = _write(operation)
    statement = params.statement()
    statuses = {JobStatus(p["S"]) for p in statement["Parameters"] if p.get("S") in set(JobStatus)}
    assert statuses == statuses_in_condition(params) | {target_status(params)}
    assert '"status" = ?' in statement["Statement"].split(" WHERE ")[0]
