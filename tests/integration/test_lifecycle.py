"""The job lifecycle end to end, on both backends: enqueue → claim → run → record → ack."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from sqsjobs import IdempotencyConflict, JobStatus, PayloadInvalid, PayloadTooLarge
from sqsjobs.testing import all_finished, work_until
from tests.integration.helpers import depth


class Receipt(BaseModel):
    order_id: str
    email: str


def test_a_job_runs_once_and_its_result_is_recorded(backend_url, make_app):
    app = make_app(backend_url)
    seen = []

    @app.job("receipts.send", max_attempts=3)
    def send_receipt(payload: Receipt, ctx):
        seen.append((payload.order_id, ctx.attempt, ctx.fencing_token))
        return {"sent_to": payload.email}

    app.provision()
    job_id = app.enqueue("receipts.send", {"order_id": "o-1", "email": "a@b.c"})
    assert app.get(job_id).status is JobStatus.QUEUED

    work_until(app, all_finished(app, [job_id]))

    job = app.get(job_id)
    assert job.status is JobStatus.SUCCEEDED
    assert job.result == {"sent_to": "a@b.c"}
    assert job.attempt == 1
    assert job.lease_owner is None
    assert job.history == ()  # a first attempt that succeeds adds no history entry (one write unit)
    assert (job.started_at, job.finished_at) != (None, None)
    assert seen == [("o-1", 1, f"{job_id}:1")]
    assert depth(app) == {"visible": 0, "in_flight": 0, "delayed": 0}


def test_async_handlers_run_on_the_loop(backend_url, make_app):
    app = make_app(backend_url)

    @app.job("math.double")
    async def double(payload: int, ctx) -> int:
        return payload * 2

    app.provision()
    job_id = app.enqueue("math.double", 21)
    work_until(app, all_finished(app, [job_id]))
    assert app.get(job_id).result == 42


def test_the_same_idempotency_key_returns_the_same_job(backend_url, make_app):
    app = make_app(backend_url)

    @app.job("receipts.send")
    def send_receipt(payload: Receipt, ctx):
        return None

    app.provision()
    first = app.enqueue("receipts.send", {"order_id": "o-1", "email": "a@b.c"}, idempotency_key="o-1")
    again = app.enqueue("receipts.send", Receipt(order_id="o-1", email="a@b.c"), idempotency_key="o-1")
    assert first == again
    with pytest.raises(IdempotencyConflict, match="different payload"):
        app.enqueue("receipts.send", {"order_id": "o-1", "email": "other@b.c"}, idempotency_key="o-1")
    other = app.enqueue("receipts.send", {"order_id": "o-2", "email": "a@b.c"}, idempotency_key="o-2")
    assert other != first


def test_enqueue_validates_the_payload_and_its_size(backend_url, make_app):
    app = make_app(backend_url, max_payload_bytes=1024)

    @app.job("receipts.send")
    def send_receipt(payload: Receipt, ctx):
        return None

    @app.job("blob.store")
    def store(payload: str, ctx):
        return None

    app.provision()
    with pytest.raises(PayloadInvalid, match="email: Field required"):
        app.enqueue("receipts.send", {"order_id": "o-1"})
    with pytest.raises(PayloadTooLarge, match="store the data elsewhere"):
        app.enqueue("blob.store", "x" * 2000)
    assert depth(app)["visible"] == 0
