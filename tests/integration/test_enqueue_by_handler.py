"""Enqueue by handler end to end: every producer form stores the registered name."""

from __future__ import annotations

import asyncio

from pydantic import BaseModel

from sqsjobs import JobContext, JobRequest, JobStatus
from sqsjobs.testing import all_finished, work_until


class Receipt(BaseModel):
    order_id: str


def test_every_producer_form_accepts_the_handler_and_records_its_name(ministack_url, make_app):
    # GIVEN an app with a handler
    app = make_app(ministack_url)
    seen: list[str] = []

    @app.job("receipts.send")
    def send_receipt(payload: Receipt, ctx: JobContext) -> str:
        seen.append(payload.order_id)
        return payload.order_id

    app.provision()

    # WHEN the handler itself names the type, in the sync, async and batch forms
    async def aenqueue() -> str:
        try:
            return await app.aenqueue(send_receipt, Receipt(order_id="o-2"))
        finally:
            await app.aclose()

    ids = [
        app.enqueue(send_receipt, Receipt(order_id="o-1")),
        asyncio.run(aenqueue()),
        *app.enqueue_many(
            [
                JobRequest(send_receipt, Receipt(order_id="o-3")),
                {"type": send_receipt, "payload": {"order_id": "o-4"}},
            ]
        ),
    ]
    work_until(app, all_finished(app, ids))

    # THEN each record carries the registered name and each job ran once
    jobs = [app.get(i) for i in ids]
    assert {(j.type, j.status) for j in jobs} == {("receipts.send", JobStatus.SUCCEEDED)}
    assert sorted(seen) == ["o-1", "o-2", "o-3", "o-4"]
