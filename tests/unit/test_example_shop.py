"""The README's handler tests ("Use it"), run against examples/shop.py with sqsjobs.testing.run_job."""

from __future__ import annotations

import pytest

from examples.shop import Charge, Receipt, app, charge, send_receipt, sync_inventory
from sqsjobs import PayloadInvalid
from sqsjobs.testing import run_job


def test_a_receipt_is_sent():
    run = run_job(app, send_receipt, Receipt(order_id="o-1", email="a@b.c"))
    assert run.outcome == "succeeded"
    assert run.result == {"sent_to": "a@b.c"}


def test_a_payload_without_email_is_refused():
    with pytest.raises(PayloadInvalid):
        run_job(app, "receipts.send", {"order_id": "o-1"})


def test_a_flaky_warehouse_is_retried_and_the_retry_succeeds():
    first = run_job(app, sync_inventory, {"sku": "SKU-42"})
    assert (first.outcome, type(first.error)) == ("retry", ConnectionError)
    assert run_job(app, sync_inventory, {"sku": "SKU-42"}, attempt=2).result == "synced on attempt 2"


def test_a_declined_card_is_dead_at_once():
    run = run_job(app, charge, Charge(order_id="o-2", cents=1999))
    assert (run.outcome, run.reason) == ("dead", "permanent error")
