"""The message envelope and the handler registry."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from sqsjobs import App, DuplicateHandler, HandlerNotFound, PayloadInvalid, Registry
from sqsjobs.envelope import Envelope
from sqsjobs.errors import EnvelopeError, UnknownEnvelopeVersion


def test_an_envelope_round_trips_and_stays_small():
    body = Envelope("job-1", "receipts.send").to_body()
    assert Envelope.from_body(body) == Envelope("job-1", "receipts.send")
    assert len(body) < 64


@pytest.mark.parametrize(
    ("body", "error", "match"),
    [
        ("not json", EnvelopeError, "not JSON"),
        ("[1, 2]", EnvelopeError, "not a JSON object"),
        ('{"id": "x", "type": "t"}', EnvelopeError, "no sqsjobs envelope version"),
        ('{"v": 1, "type": "t"}', EnvelopeError, "lacks a job id"),
        ('{"v": 4, "id": "x", "type": "t"}', UnknownEnvelopeVersion, "newer than this worker"),
        (
            '{"v": 3, "id": "x", "type": "t", "queue": "q", "payload": null, "hash": "h", "created": 1, '
            '"run_at": 1}',
            EnvelopeError,
            "S3 reference",
        ),
    ],
)
def test_bad_bodies_are_rejected_with_the_reason(body, error, match):
    with pytest.raises(error, match=match):
        Envelope.from_body(body)


class Receipt(BaseModel):
    order_id: str


def test_the_decorator_records_a_spec_and_returns_the_function_unchanged():
    registry = Registry()

    def send(payload: Receipt, ctx: Any) -> str:
        return payload.order_id

    decorated = registry.job("receipts.send", queue="mail", max_attempts=7, timeout=12, version=2)(send)
    assert decorated is send
    spec = registry.get("receipts.send")
    assert (spec.queue, spec.max_attempts, spec.timeout_s, spec.version, spec.payload_type) == (
        "mail",
        7,
        12.0,
        2,
        Receipt,
    )
    assert not spec.is_async
    assert registry.queues() == ["mail"]


def test_payloads_are_validated_and_dumped_by_the_handler_annotation():
    app = App("unit")

    @app.job("receipts.send")
    def send(payload: Receipt, ctx: Any) -> None: ...

    spec = app.registry.get("receipts.send")
    assert spec.dump(Receipt(order_id="o-1")) == {"order_id": "o-1"}
    assert spec.validate({"order_id": "o-1"}) == Receipt(order_id="o-1")
    with pytest.raises(PayloadInvalid, match="order_id: Field required"):
        spec.validate({})


def test_names_are_unique_and_lookups_say_what_exists():
    registry = Registry()
    registry.job("a")(lambda payload, ctx: None)
    with pytest.raises(DuplicateHandler):
        registry.job("a")(lambda payload, ctx: None)
    with pytest.raises(HandlerNotFound, match=r"'b' \(registered: a\)"):
        registry.get("b")


def test_registries_compose_with_a_prefix():
    billing = Registry()
    billing.job("invoice")(lambda payload, ctx: None)
    root = Registry()
    root.include(billing, prefix="billing.")
    assert "billing.invoice" in root
