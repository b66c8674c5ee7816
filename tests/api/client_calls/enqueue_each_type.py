"""Enqueue each of the shop example's job types through the generated client: all of it type-checks."""

from __future__ import annotations

from shop_client import AuthenticatedClient
from shop_client.api.jobs import enqueue
from shop_client.models import (
    Charge,
    EnqueueRequestOfInventoryAudit,
    EnqueueRequestOfInventoryAuditPayload,
    EnqueueRequestOfInventorySync,
    EnqueueRequestOfInventorySyncPayload,
    EnqueueRequestOfPaymentsCharge,
    EnqueueRequestOfReceiptsSend,
    EnqueueRequestOfRemindersSend,
    EnqueueRequestOfRemindersSendPayload,
    EnqueueResponse,
    Problem,
    Receipt,
)

client = AuthenticatedClient(base_url="http://127.0.0.1:8000", token="operator-token")


def scope(**members: str) -> dict[str, str]:
    return members


answers: list[EnqueueResponse | Problem | None] = [
    enqueue.sync(
        client=client,
        body=EnqueueRequestOfReceiptsSend(
            type_="receipts.send",
            payload=Receipt(order_id="o-1", email="a@example.com"),
            idempotency_key="r-1",
        ),
    ),
    enqueue.sync(
        client=client,
        body=EnqueueRequestOfPaymentsCharge(
            type_="payments.charge", payload=Charge(order_id="o-1", cents=1250)
        ),
    ),
    enqueue.sync(
        client=client,
        body=EnqueueRequestOfInventorySync(
            type_="inventory.sync", payload=EnqueueRequestOfInventorySyncPayload.from_dict(scope(sku="s-1"))
        ),
    ),
    enqueue.sync(
        client=client,
        body=EnqueueRequestOfInventoryAudit(
            type_="inventory.audit",
            payload=EnqueueRequestOfInventoryAuditPayload.from_dict(scope(scope="all")),
        ),
    ),
    enqueue.sync(
        client=client,
        body=EnqueueRequestOfRemindersSend(
            type_="reminders.send",
            payload=EnqueueRequestOfRemindersSendPayload.from_dict(scope(email="a@example.com")),
            delay=600.0,
        ),
    ),
]
job_ids = [answer.id for answer in answers if isinstance(answer, EnqueueResponse)]
