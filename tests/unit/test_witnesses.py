"""The witness rule: every state that is not terminal names what will bring its job back, and so do its writes.

``WITNESSES`` and ``KEPT_BY`` in ``sqsjobs/job.py`` are the source; ``docs/lifecycle.md`` states the
same table, and this test fails when the two drift apart or a new state or operation comes without one.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sqsjobs.job import KEPT_BY, TERMINAL, TRANSITIONS, WITNESSES, JobStatus, Witness

DOCS = Path(__file__).resolve().parents[2] / "docs" / "lifecycle.md"


def test_every_status_is_in_the_witness_table():
    assert set(WITNESSES) == set(JobStatus)


@pytest.mark.parametrize("status", sorted(set(JobStatus) - TERMINAL))
def test_a_status_that_is_not_terminal_has_at_least_one_witness(status):
    assert WITNESSES[status], f"{status} has no witness: a record in it could be left with nothing to move it"


@pytest.mark.parametrize("status", sorted(TERMINAL))
def test_a_terminal_status_needs_none(status):
    assert WITNESSES[status] == frozenset()


@pytest.mark.parametrize("operation", sorted(TRANSITIONS))
def test_every_write_into_an_unfinished_state_keeps_one_of_that_states_witnesses(operation):
    target = TRANSITIONS[operation][1]
    if target.terminal:
        assert operation not in KEPT_BY
    else:
        assert KEPT_BY.get(operation), f"{operation} leaves {target} without naming the witness it keeps"
        assert KEPT_BY[operation] <= WITNESSES[target]


def _documented() -> dict[str, set[str]]:
    """The "Witnesses" table of docs/lifecycle.md: state -> the witnesses its row names."""
    text = DOCS.read_text()
    section = text[text.index("## Witnesses") :]
    rows: dict[str, set[str]] = {}
    for line in section[section.index("| state |") :].splitlines()[2:]:
        if not line.startswith("|"):
            break  # the end of the state table
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        rows[cells[0].strip("`")] = {w.value for w in Witness if re.search(rf"\b{w.value}\b", cells[1])}
    return rows


def test_docs_lifecycle_states_each_states_witnesses_as_the_table_has_them():
    assert _documented() == {s.value: {w.value for w in ws} for s, ws in WITNESSES.items() if ws} | {
        s.value: set() for s in TERMINAL
    }
