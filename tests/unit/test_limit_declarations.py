"""``app.limit`` and ``@app.job(limits=...)``: mistakes are ``ConfigurationError`` before any job runs."""

from __future__ import annotations

import pytest

from sqsjobs import App, Breaker, ConfigurationError
from sqsjobs.limits.declarations import NO_KEY, Rate, parse_rate
from sqsjobs.limits.plugin import Gate
from sqsjobs.limits.records import next_start, rate_id


def test_an_unknown_limit_name_fails_the_worker_start_naming_the_declared_ones():
    app = App("decl")
    app.limit("stripe", concurrency=5)
    app.job("charge", limits=["strpe"])(lambda payload, ctx: None)
    with pytest.raises(ConfigurationError, match=r"'strpe'.*declared: stripe"):
        Gate(app.kernel, app.limits)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "limits nothing"),
        ({"concurrency": 0}, "at least 1"),
        ({"rate": "fast"}, "not a rate"),
        ({"concurrency": 2, "key": "customer"}, "'tenant' or 'payload.<field>'"),
        ({"breaker": Breaker(), "key": "tenant"}, "give concurrency= or rate="),
        ({"rate": "5/s", "key": "tenant", "weights": {"vip": 2}}, "weights= multiply"),
        ({"concurrency": 2, "key": "tenant", "weights": {"vip": 0}}, "weights >= 1"),
    ],
)
def test_a_limit_that_cannot_work_is_refused_when_declared(kwargs, message):
    with pytest.raises(ConfigurationError, match=message):
        App("decl").limit("x", **kwargs)


def test_a_key_partitions_the_rate_and_a_weight_multiplies_its_slots():
    lim = App("decl").limit(
        "shop", concurrency=2, rate="5/s", key=lambda p: p.get("shop"), weights={"vip": 3}
    )
    assert lim.key_of(None, {"shop": "vip"}) == "vip"
    assert lim.key_of(None, {}) == NO_KEY
    assert (lim.slots("vip"), lim.slots("other")) == (6, 2)
    assert rate_id("shop", 0, "vip") != rate_id("shop", 0, "other") != rate_id("shop", 0)


def test_names_that_would_break_item_ids_are_refused():
    with pytest.raises(ConfigurationError, match="no '#'"):
        App("decl").limit("a#b", concurrency=1)


def test_rates_and_their_shards_add_up_to_the_declared_rate():
    assert parse_rate("20/s") == Rate(20, 1.0)
    assert parse_rate("600/min") == Rate(600, 60.0)
    rate = parse_rate("250/s")
    assert rate.shards == 3
    assert sum(rate.shard_starts(s) for s in range(rate.shards)) == 250


def test_the_next_start_keeps_n_starts_in_any_window():
    assert next_start([], allowed=2, window_s=1.0) == 0.0
    assert next_start([10.0], allowed=2, window_s=1.0) == 10.0
    assert next_start([10.0, 10.2], allowed=2, window_s=1.0) == 11.0


def test_partition_keys_come_from_the_tenant_or_a_payload_field():
    app = App("decl")
    by_tenant = app.limit("t", concurrency=1, key="tenant")
    by_field = app.limit("f", concurrency=1, key="payload.account")
    assert by_tenant.key_of("acme", {}) == "acme"
    assert by_tenant.key_of(None, {}) == NO_KEY
    assert by_field.key_of(None, {"account": 42}) == "42"
    assert by_field.key_of(None, "not a dict") == NO_KEY


def test_a_breaker_needs_positive_numbers():
    with pytest.raises(ConfigurationError):
        Breaker(failures=0)
