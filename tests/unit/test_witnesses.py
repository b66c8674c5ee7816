"""The witness rule: every state that is not terminal names what will bring its job back, and so do its writes.

``WITNESSES`` in ``sqsjobs/job.py`` and each state-table row's ``kept`` are the source (a row that
breaks the rule is refused when it is registered); ``docs/lifecycle.md`` states the same tables, and
this test fails when they drift apart or a new state or transition comes without one.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import sqsjobs.app  # noqa: F401  (imports every feature: their rows are registered)
from sqsjobs.job import TERMINAL, WITNESSES, JobStatus, Witness
from sqsjobs.store.state_table import STATE_TABLE, StateTable

DOCS = Path(__file__).resolve().parents[2] / "docs" / "lifecycle.md"


def test_every_status_is_in_the_witness_table():
    assert set(WITNESSES) == set(JobStatus)


@pytest.mark.parametrize("status", sorted(set(JobStatus) - TERMINAL))
def test_a_status_that_is_not_terminal_has_at_least_one_witness(status):
    assert WITNESSES[status], f"{status} has no witness: a record in it could be left with nothing to move it"


@pytest.mark.parametrize("status", sorted(TERMINAL))
def test_a_terminal_status_needs_none(status):
    assert WITNESSES[status] == frozenset()


@pytest.mark.parametrize("row", list(STATE_TABLE), ids=lambda row: row.name)
def test_every_write_into_an_unfinished_state_keeps_one_of_that_states_witnesses(row):
    if row.target.terminal:
        assert row.kept == frozenset()
    else:
        assert row.kept, f"{row.name} leaves {row.target} without naming the witness it keeps"
        assert row.kept <= WITNESSES[row.target]


def test_a_row_that_names_no_witness_for_an_unfinished_state_is_refused_when_registered():
    table = StateTable()
    with pytest.raises(ValueError, match="without naming the witness"):
        table.row("park", sources={JobStatus.RUNNING}, target=JobStatus.QUEUED, refusals=())
    with pytest.raises(ValueError, match="cannot have"):
        table.row(
            "park", sources={JobStatus.RUNNING}, target=JobStatus.QUEUED, refusals=(), kept={Witness.LEASE}
        )


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
