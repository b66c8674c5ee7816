"""``make approval`` (examples/approval.py) runs to completion by itself on the embedded emulator, as a new user runs it."""

from __future__ import annotations

import pytest

from tests.integration.test_demo import run_example

pytestmark = pytest.mark.slow


def test_the_approval_example_ships_the_approved_order_refunds_the_other_and_charges_each_once():
    out = run_example("examples.approval")
    assert "A-100 succeeded" in out and "'approved_by': 'grace'" in out
    assert "B-200 succeeded" in out and "'refunded': 'over budget'" in out
    effects = out.split("side effects: ", 1)[1].replace("\n", "")
    for effect in (
        "charge A-100 x1",
        "charge B-200 x1",
        "ship A-100 x1",
        "review-mail A-100 x1",
        "refund B-200 x1",
    ):
        assert effect in effects
    assert "ship B-200" not in effects
