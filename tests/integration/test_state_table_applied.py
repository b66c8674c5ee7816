"""The state table, executed: every row's write, sent through ``store.apply``, lands from exactly its statuses.

For each row of ``STATE_TABLE`` (the core's and the features') and each ``JobStatus``, a record in
that status — on which every other term of the write holds (``tests/state_table_examples.py``) — is
written to a real table on both emulators, and the row's write is sent as every writer sends one:
``store.apply``. It must land exactly when the status is one the row admits (with the rows that share
its builder: a claim and a rescue are one write), leave the record in the row's target, and
otherwise be refused with the record untouched (and returned as it was, when the write asks for it).
"""

from __future__ import annotations

import uuid
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import pytest

from sqsjobs._aws import Call, one
from sqsjobs.job import JobStatus
from sqsjobs.store.apply import Landed, Refusal, Refused, apply
from sqsjobs.store.codec import av_s, str_attr
from sqsjobs.store.state_table import STATE_TABLE
from tests.state_table_examples import CALLS, example, record

if TYPE_CHECKING:
    from sqsjobs.store.codec import Item


def test_every_row_is_exercised():
    assert set(CALLS) == {row.name for row in STATE_TABLE}


def _comparable(item: Item) -> dict[str, Any]:
    """An item with its numbers as numbers (a store may write ``1799999990.0`` back as ``1799999990``)."""
    return {name: Decimal(value["N"]) if "N" in value else value for name, value in item.items()}


@pytest.mark.parametrize("row", [row.name for row in STATE_TABLE])
def test_the_rows_write_lands_from_exactly_its_statuses(row, backend_url, make_app):
    app = make_app(backend_url)
    app.provision()
    table = app.settings.table_name
    admitted = STATE_TABLE.sharing(row)
    target = STATE_TABLE[row].target
    for status in JobStatus:
        job_id = f"{row}-{status}-{uuid.uuid4().hex[:6]}"
        app.run(
            one(
                Call("dynamodb", "put_item", {"TableName": table, "Item": record(table, job_id, status, row)})
            )
        )

        write = example(row, table, job_id)
        outcome = app.run(apply(write))

        after = app.run(one(Call("dynamodb", "get_item", {"TableName": table, "Key": {"id": av_s(job_id)}})))[
            "Item"
        ]
        if status in admitted:
            assert isinstance(outcome, Landed), f"{row} refused from {status}"
            assert str_attr(after, "status") == target
        else:
            assert isinstance(outcome, Refused), f"{row} landed from {status}"
            assert outcome.reason is Refusal.CHANGED
            if write.old_on_refusal:  # the record as the refusal found it (a token's wake asks for none)
                assert outcome.item is not None and str_attr(outcome.item, "status") == status
            assert _comparable(after) == _comparable(record(table, job_id, status, row))
