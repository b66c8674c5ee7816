"""Producers may name a job type by its handler; the registry maps the function back to its name."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from sqsjobs import App, HandlerNotFound, JobContext, JobRequest, PayloadInvalid, Registry
from sqsjobs.producer import build_new_job


class Receipt(BaseModel):
    order_id: str


def make_shop() -> App:
    app = App("shop")

    @app.job("receipts.send", queue="mail")
    def send_receipt(payload: Receipt, ctx: JobContext) -> None: ...

    return app


def test_a_handler_names_the_type_it_was_registered_under():
    # GIVEN a handler registered under a stable name
    registry = Registry()

    def send(payload: Receipt, ctx: JobContext) -> None: ...

    assert registry.job("receipts.send")(send) is send
    # THEN the function maps back to that name, and a name maps to itself, registered or not
    assert registry.name_of(send) == "receipts.send"
    assert registry.name_of("receipts.send") == "receipts.send"
    assert registry.name_of("elsewhere.type") == "elsewhere.type"


def test_an_included_handler_is_named_with_its_prefix():
    # GIVEN a blueprint registry included with a prefix
    billing = Registry()

    def invoice(payload: dict[str, str], ctx: JobContext) -> None: ...

    billing.job("invoice")(invoice)
    root = Registry()
    root.include(billing, prefix="billing.")
    # THEN each registry names the function as it knows it
    assert (billing.name_of(invoice), root.name_of(invoice)) == ("invoice", "billing.invoice")


def test_a_method_handler_is_found_though_each_access_makes_a_new_bound_method():
    class Mailer:
        def send(self, payload: Receipt, ctx: JobContext) -> None: ...

    mailer = Mailer()
    registry = Registry()
    registry.job("receipts.send")(mailer.send)
    assert registry.name_of(mailer.send) == "receipts.send"


def test_an_unregistered_function_says_how_to_register_it():
    # GIVEN a function this registry does not have
    def stray(payload: Receipt, ctx: JobContext) -> None: ...

    # WHEN it is used as a job type, THEN HandlerNotFound says to decorate it or pass the name
    with pytest.raises(
        HandlerNotFound, match=r"stray is not a registered handler: decorate it with @app\.job"
    ):
        Registry().name_of(stray)


def test_a_function_registered_under_two_names_must_be_named():
    registry = Registry()

    def send(payload: Receipt, ctx: JobContext) -> None: ...

    registry.job("receipts.send")(send)
    registry.job("receipts.resend")(send)
    with pytest.raises(HandlerNotFound, match=r"several names \(receipts\.resend, receipts\.send\)"):
        registry.name_of(send)


def test_a_request_by_handler_becomes_the_same_record_as_one_by_name():
    # GIVEN an app and its handler
    app = make_shop()
    [spec] = app.registry
    # WHEN a request names the type by handler and another by name
    by_handler = build_new_job(
        JobRequest(spec.fn, Receipt(order_id="o-1"), idempotency_key="k"),
        registry=app.registry,
        settings=app.settings,
        now=1_800_000_000.0,
    )
    by_name = build_new_job(
        JobRequest("receipts.send", {"order_id": "o-1"}, idempotency_key="k"),
        registry=app.registry,
        settings=app.settings,
        now=1_800_000_000.0,
    )
    # THEN both are stored under the type's name, with the same id, queue and JSON payload
    assert by_handler == by_name
    assert (by_handler.type, by_handler.queue, by_handler.payload) == (
        "receipts.send",
        "mail",
        {"order_id": "o-1"},
    )


def test_a_request_by_handler_is_validated_like_one_by_name():
    app = make_shop()
    [spec] = app.registry
    with pytest.raises(PayloadInvalid, match="order_id: Field required"):
        build_new_job(JobRequest(spec.fn, {}), registry=app.registry, settings=app.settings, now=0.0)


def test_enqueue_refuses_another_apps_handler_before_any_aws_call():
    # GIVEN a handler registered in one app
    shop = make_shop()
    [spec] = shop.registry
    # WHEN another app enqueues it (its mapping form too), THEN HandlerNotFound, and no request was made
    other = App("other")
    with pytest.raises(HandlerNotFound, match=r"decorate it with @app\.job"):
        other.enqueue(spec.fn, Receipt(order_id="o-1"))
    with pytest.raises(HandlerNotFound, match=r"decorate it with @app\.job"):
        other.enqueue_many([{"type": spec.fn, "payload": {"order_id": "o-1"}}])
    assert other.requests.total() == 0
