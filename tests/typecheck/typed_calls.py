"""Calls that mypy must accept, and calls marked ``# E: <code>`` that it must refuse with that code.

Checked by ``test_typed_api.py`` (``mypy --strict``), never run: the calls sit in a function nobody calls.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from sqsjobs import App, JobContext, JobRequest
from sqsjobs.testing import arun_job, run_job

app = App("shop")


class Receipt(BaseModel):
    order_id: str


@app.job("receipts.send")
def send_receipt(payload: Receipt, ctx: JobContext) -> dict[str, str]:
    return {"sent_to": payload.order_id}


@app.job("inventory.sync")
async def sync_inventory(payload: dict[str, int], ctx: JobContext) -> None:
    return None


@app.job("anything")
def anything(payload: Any, ctx: JobContext) -> None:
    return None


def producer_calls() -> None:
    # By name: any payload, as before.
    app.enqueue("receipts.send", {"order_id": "o-1"})
    app.enqueue("receipts.send")
    # By handler: the payload must be the handler's payload type.
    app.enqueue(send_receipt, Receipt(order_id="o-1"), delay=30, idempotency_key="o-1")
    app.enqueue(sync_inventory, {"sku": 3})
    app.enqueue(anything, [1, "two"])
    app.enqueue(send_receipt, {"order_id": "o-1"})  # E: arg-type
    app.enqueue(sync_inventory, {"sku": "3"})  # E: arg-type
    # The batch form: a JobRequest by handler is checked the same way.
    app.enqueue_many(
        [
            JobRequest(send_receipt, Receipt(order_id="o-1")),
            JobRequest("receipts.send", {"order_id": "o-2"}),
            {"type": send_receipt, "payload": {"order_id": "o-3"}},
        ]
    )
    JobRequest(sync_inventory, {"sku": "3"})  # E: arg-type


async def async_producer_calls() -> None:
    await app.aenqueue(sync_inventory, {"sku": 3})
    await app.aenqueue(send_receipt, Receipt(order_id="o-1"))
    await app.aenqueue(send_receipt, "o-1")  # E: arg-type


async def testing_calls() -> None:
    # run_job is typed like enqueue.
    run_job(app, "receipts.send", {"order_id": "o-1"})
    run_job(app, send_receipt, Receipt(order_id="o-1"), attempt=2)
    await arun_job(app, sync_inventory, {"sku": 3})
    run_job(app, send_receipt, {"order_id": "o-1"})  # E: arg-type
    await arun_job(app, sync_inventory, {"sku": "3"})  # E: arg-type
