"""One state table: every store write admits exactly the statuses ``TRANSITIONS`` says, and sets its target.

``TRANSITIONS`` in ``sqsjobs/job.py`` is the single source. This test reads the condition and the
update of each write the store builds and the table in ``docs/lifecycle.md``, and fails when any of
them disagrees with it — so the code, the table and the docs cannot drift apart again.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sqsjobs.delivery import failure_record
from sqsjobs.envelope import Envelope
from sqsjobs.job import TRANSITIONS, JobStatus
from sqsjobs.steps import records as steps_records
from sqsjobs.steps.records import StepRecord
from sqsjobs.store import codec, deadlines, enqueue, operator, requests, runs
from sqsjobs.store.conditions import All, AnyOf, Compare, Not, OneOf
from sqsjobs.store.write import Write
from sqsjobs.workflows import chain_store

NOW = 1_800_000_000.0
DOCS = Path(__file__).resolve().parents[2] / "docs" / "lifecycle.md"


def _job():
    new = enqueue.NewJob(
        id="j1", type="t", queue="default", payload={}, payload_version=1, max_attempts=3, run_at=NOW, now=NOW
    )
    return codec.job_from_item(enqueue.put_job("tbl", new).item).evolve(claim_token=codec.nonce())


ERROR = failure_record(ValueError("boom"))


def _claim() -> Write:
    return runs.claim(
        "tbl", Envelope("j1", "t"), owner="w", token="t", message_id="m", now=NOW, lease_s=5, max_attempts=3
    )


#: operation -> the write the store builds for it
WRITES = {
    "claim": _claim,
    "rescue": _claim,
    "heartbeat": lambda: requests.heartbeat("tbl", _job(), owner="w", now=NOW, lease_s=5),
    "complete": lambda: runs.complete("tbl", _job(), owner="w", now=NOW, result=None, retention_s=1),
    "schedule_retry": lambda: runs.schedule_retry(
        "tbl", _job(), owner="w", now=NOW, run_at=NOW, error=ERROR, held=False
    ),
    "fail": lambda: runs.fail("tbl", _job(), owner="w", now=NOW, error=ERROR, reason="r", retention_s=1),
    "abort": lambda: runs.abort("tbl", _job(), owner="w", now=NOW, reason="r", retention_s=1),
    "reject": lambda: requests.reject(
        "tbl", Envelope("j1", "t"), now=NOW, error=ERROR, reason="r", retention_s=1
    ),
    "release": lambda: requests.release("tbl", _job(), owner="w", now=NOW),
    "expire_claimed": lambda: requests.expire_claimed(
        "tbl", _job(), owner="w", now=NOW, reason="r", retention_s=1
    ),
    "wake": lambda: steps_records.wake("tbl", "j1", NOW),
    "sleep": lambda: steps_records.sleep(
        "tbl",
        _job(),
        StepRecord("sleep-1", NOW, 3.0, 1, {"until": NOW + 3}),
        until=NOW + 3,
        now=NOW,
        held=True,
    ),
    "cancel": lambda: operator.cancel("tbl", "j1", now=NOW, retention_s=1),
    "request_cancel": lambda: operator.request_cancel("tbl", "j1", now=NOW),
    "replay": lambda: operator.replay(
        "tbl", _job(), seen_updated="1", now=NOW, max_attempts=3, audit={"a": 1}
    ),
    "expire": lambda: deadlines.expire(
        "tbl", Envelope("j1", "t"), now=NOW, reason="r", retention_s=1, type_bound_s=60
    ),
    "unblock": lambda: chain_store.unblock("tbl", "c1-01", now=NOW, recheck_at=NOW + 300),
    "drop": lambda: chain_store.drop("tbl", "c1-02", now=NOW, reason="r", retention_s=1),
}
#: Operations that share one write: its condition admits the union of their from-states.
SHARED = {"claim": ("claim", "rescue"), "rescue": ("claim", "rescue")}


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


def test_every_transition_has_a_write_and_every_write_a_transition():
    assert set(WRITES) == set(TRANSITIONS)


@pytest.mark.parametrize("operation", sorted(TRANSITIONS))
def test_the_writes_condition_admits_exactly_the_tables_from_states(operation):
    expected = set().union(*(TRANSITIONS[op][0] for op in SHARED.get(operation, (operation,))))
    assert statuses_in_condition(WRITES[operation]()) == expected


@pytest.mark.parametrize("operation", sorted(TRANSITIONS))
def test_the_write_sets_the_tables_to_state(operation):
    sources, to = TRANSITIONS[operation]
    target = target_status(WRITES[operation]())
    if target is None:  # the write leaves the status alone: a self-transition
        assert sources == {to}
    else:
        assert target is to


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
    assert {name: (set(f), t) for name, (f, t) in TRANSITIONS.items()} == {
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
    assert statuses_in_condition(fresh) == TRANSITIONS["claim"][0]
    assert target_status(fresh) is TRANSITIONS["claim"][1]
    assert Compare("lease_epoch", "=", ":zero") in fresh.fragment("fresh").parts


@pytest.mark.parametrize("operation", ["complete", "schedule_retry", "fail", "abort", "release"])
def test_a_batched_write_admits_and_sets_the_statuses_its_update_item_does(operation):
    params = WRITES[operation]()
    statement = params.statement()
    statuses = {JobStatus(p["S"]) for p in statement["Parameters"] if p.get("S") in set(JobStatus)}
    assert statuses == statuses_in_condition(params) | {target_status(params)}
    assert '"status" = ?' in statement["Statement"].split(" WHERE ")[0]
