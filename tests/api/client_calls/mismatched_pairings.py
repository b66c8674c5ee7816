"""Calls the document must make a type checker refuse.

Each refusal is an ignore of the error it must cause: mypy's ``warn_unused_ignores`` (``--strict``)
fails this file if any of them is not refused there, for that reason.
"""

from __future__ import annotations

from shop_client import AuthenticatedClient
from shop_client.api.jobs import enqueue
from shop_client.models import Charge, Receipt
from shop_client.models import EnqueueRequestOfPaymentsCharge as ChargeRequest
from shop_client.models import EnqueueRequestOfReceiptsSend as ReceiptRequest

client = AuthenticatedClient(base_url="http://127.0.0.1:8000", token="operator-token")
receipt = Receipt(order_id="o-1", email="a@example.com")

# payments.charge carries a Charge, not a Receipt
ChargeRequest(type_="payments.charge", payload=receipt)  # type: ignore[arg-type]
# a request class names its own type only
ReceiptRequest(type_="payments.charge", payload=receipt)  # type: ignore[arg-type]
# a Charge's cents are an integer
Charge(order_id="o-1", cents="12.50")  # type: ignore[arg-type]
# a type the App does not register has no request class, and a bare dict passes for none
enqueue.sync(client=client, body={"type": "payments.refund", "payload": {}})  # type: ignore[arg-type]
