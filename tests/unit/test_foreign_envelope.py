"""The message format for senders outside sqsjobs (docs/enqueue-from-aws.md): what parses, what is refused and why."""

from __future__ import annotations

import json

import pytest

from sqsjobs import App
from sqsjobs import envelope as env
from sqsjobs._clock import FakeClock
from sqsjobs.delivery import Delivery
from sqsjobs.errors import EnvelopeError, UnknownEnvelopeVersion
from sqsjobs.ingress.plugin import job_of
from sqsjobs.store.codec import idempotent_job_id


def test_every_field_is_read_and_the_body_round_trips():
    body = '{"sqsjobs": 1, "type": "orders.ship", "payload": {"order_id": 7}, "idempotency_key": "evt-1", "tenant": "acme", "delay_s": 30}'
    message = env.parse(body)
    assert message == env.Foreign(
        "orders.ship", {"order_id": 7}, idempotency_key="evt-1", tenant="acme", delay_s=30.0
    )
    assert isinstance(message, env.Foreign)
    assert env.parse(message.to_body()) == message


def test_only_the_marker_and_the_type_are_required():
    assert env.parse('{"sqsjobs":1,"type":"t"}') == env.Foreign("t")
    assert env.parse('{"sqsjobs":1,"type":"t","payload":null,"tenant":null,"delay_s":0}') == env.Foreign("t")


def test_a_non_raw_sns_notification_is_unwrapped_and_keyed_by_its_sns_message_id():
    inner = '{"sqsjobs": 1, "type": "orders.ship", "payload": {"order_id": 7}}'
    body = json.dumps(
        {
            "Type": "Notification",
            "MessageId": "sns-1",
            "TopicArn": "arn:aws:sns:us-east-1:1:t",
            "Message": inner,
        }
    )
    assert env.parse(body) == env.Foreign("orders.ship", {"order_id": 7}, sns_message_id="sns-1")


@pytest.mark.parametrize(
    ("body", "error", "match"),
    [
        ('{"sqsjobs": 2, "type": "t"}', UnknownEnvelopeVersion, "version 2 is newer than this worker's 1"),
        ('{"sqsjobs": "1", "type": "t"}', EnvelopeError, "must be the format version 1"),
        ('{"sqsjobs": true, "type": "t"}', EnvelopeError, "must be the format version 1"),
        ('{"sqsjobs": 1}', EnvelopeError, 'lacks its job "type"'),
        ('{"sqsjobs": 1, "type": ""}', EnvelopeError, 'lacks its job "type"'),
        # a misspelt key must not silently lose the deduplication it was meant to give
        (
            '{"sqsjobs": 1, "type": "t", "idempotencyKey": "k"}',
            EnvelopeError,
            "unknown field.*idempotencyKey",
        ),
        (
            '{"sqsjobs": 1, "type": "t", "idempotency_key": 7}',
            EnvelopeError,
            '"idempotency_key" must be a string',
        ),
        ('{"sqsjobs": 1, "type": "t", "tenant": ""}', EnvelopeError, '"tenant" must be a string'),
        ('{"sqsjobs": 1, "type": "t", "idempotency_key": "' + "k" * 257 + '"}', EnvelopeError, "1 to 256"),
        ('{"sqsjobs": 1, "type": "t", "delay_s": -1}', EnvelopeError, '"delay_s" must be a number'),
        ('{"sqsjobs": 1, "type": "t", "delay_s": "30"}', EnvelopeError, '"delay_s" must be a number'),
        ('{"sqsjobs": 1, "type": "t", "delay_s": 1e308}', EnvelopeError, '"delay_s" must be a number'),
        # the marker forgotten: say what the format is rather than "no envelope version"
        ('{"type": "orders.ship", "payload": {}}', EnvelopeError, 'no "sqsjobs" version'),
        (
            json.dumps({"Type": "Notification", "MessageId": "m", "TopicArn": "arn:t", "Message": "hello"}),
            EnvelopeError,
            "SNS notification from arn:t does not carry an sqsjobs message.*raw message delivery",
        ),
    ],
)
def test_bad_messages_are_refused_with_a_reason_that_says_what_to_send(body, error, match):
    with pytest.raises(error, match=match):
        env.parse(body)


def test_our_own_envelopes_and_fires_still_parse_as_before():
    hint = env.Envelope("j1", "t")
    assert env.parse(hint.to_body()) == hint
    fire = env.Fire("nightly", "2026-01-01T00:00:00Z", "t")
    assert env.parse(fire.to_body()) == fire


def test_the_job_counts_its_delay_from_the_send_and_a_long_delay_is_held_for_the_sweeper():
    app = App("unit-foreign", clock=FakeClock(1_000_100.0))

    @app.job("orders.ship")
    def ship(payload: dict[str, int], ctx: object) -> None: ...

    delivery = Delivery("default", "url", "mid-1", "rh", "{}", 1, sent_at=1_000_000.0)
    soon = job_of(app, env.Foreign("orders.ship", {"n": 1}, delay_s=30), delivery)
    assert (soon.run_at, soon.held, soon.id) == (
        1_000_030.0,
        False,
        idempotent_job_id("orders.ship", "sqs:mid-1"),
    )
    later = job_of(app, env.Foreign("orders.ship", {"n": 1}, idempotency_key="k", delay_s=3600), delivery)
    assert (later.run_at, later.held, later.idempotency_key) == (1_003_600.0, True, "k")


def test_the_job_continues_the_senders_trace():
    app = App("unit-trace", clock=FakeClock(1_000_100.0))

    @app.job("t")
    def handler(payload: None, ctx: object) -> None: ...

    xray = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"
    w3c = "00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-01"

    def delivery(attributes, message_attributes):
        return Delivery("default", "url", "m", "rh", "{}", 1, 1_000_000.0, attributes, message_attributes)

    assert job_of(app, env.Foreign("t"), delivery({"AWSTraceHeader": xray}, {})).trace == xray
    assert job_of(app, env.Foreign("t"), delivery({}, {"traceparent": {"StringValue": w3c}})).trace == w3c
    assert job_of(app, env.Foreign("t"), delivery({"AWSTraceHeader": "garbage"}, {})).trace is None
