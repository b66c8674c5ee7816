"""Dedup modes as data: which id a key gets in each mode, and when a ``while_active`` holder lets go."""

from __future__ import annotations

import pytest

from sqsjobs import App, Debounce, DedupeFor, JobRequest, Throttle, WhileActive
from sqsjobs.dedupe import debounce, modes, records
from sqsjobs.dedupe.modes import DEFAULT_MAX_QUIETS, MAX_WINDOW_S, Dedupe
from sqsjobs.errors import ConfigurationError, DedupeInvalid
from sqsjobs.producer import build_new_job
from sqsjobs.store.codec import av_n, av_s, idempotent_job_id
from sqsjobs.store.enqueue import NewJob
from sqsjobs.store.schema import TTL_ATTRIBUTE

NOW = 1_800_000_000.0


def test_a_window_mode_keeps_one_id_within_an_aligned_window_and_a_new_one_after():
    mode = Dedupe("window", 60.0)
    start = (NOW // 60) * 60
    ids = {mode.job_id("t", "k", None, start + s) for s in (0.0, 30.0, 59.999)}
    assert len(ids) == 1
    assert mode.job_id("t", "k", None, start + 60.0) not in ids
    # ... scoped like the key itself (type and tenant), and never the default key's id
    assert mode.job_id("t", "k", "acme", start) not in ids
    assert idempotent_job_id("t", "k") not in ids
    # ... and a throttle window of the same length is another key space
    assert Dedupe("throttle", 60.0).job_id("t", "k", None, start) not in ids


def test_while_active_makes_a_new_id_each_time_and_the_default_keeps_the_keys():
    live = Dedupe("while_active")
    assert live.job_id("t", "k", None, NOW) != live.job_id("t", "k", None, NOW)
    # ... and an enqueue with a key and no mode has the key's own id
    app = App("x")
    keyed = JobRequest("t", idempotency_key="k", queue="work")
    assert build_new_job(
        keyed, registry=app.registry, settings=app.settings, now=NOW
    ).id == idempotent_job_id("t", "k")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("once", None, None), "while_active"),
        (("while_active", 5.0, None), "one of"),
        ((None, 0.0, None), "between"),
    ],
)
def test_a_mode_that_cannot_work_is_refused(args, message):
    with pytest.raises(ValueError, match=message):
        modes.of_options(*args)


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"dedupe_for_s": 2.2e-16}, "dedupe_for"),  # rounds to a 0 ms window: a division by zero
        ({"dedupe_for_s": 1e308}, "dedupe_for"),  # its slot overflows
        ({"throttle_s": 1e308}, "throttle"),
        ({"throttle_s": float("nan")}, "throttle"),
        ({"debounce_s": 1e308}, "debounce"),
        ({"debounce_s": 1.0, "debounce_max_s": 1e308}, "debounce_max"),  # DynamoDB's numbers overflow
    ],
)
def test_a_window_out_of_bounds_is_refused_naming_its_option(options, field):
    unique, dedupe_for, throttle = None, options.pop("dedupe_for_s", None), options.pop("throttle_s", None)
    with pytest.raises(DedupeInvalid, match="between") as refused:
        modes.of_options(unique, dedupe_for, throttle, **options)
    assert refused.value.field == field
    assert modes.of_options(None, MAX_WINDOW_S, None) == DedupeFor(MAX_WINDOW_S)


def test_the_typed_modes_are_the_flat_options_modes():
    assert modes.of_options("while_active", None, None) == WhileActive() == Dedupe("while_active")
    assert modes.of_options(None, 60.0, None) == DedupeFor(60) == Dedupe("window", 60.0)
    assert modes.of_options(None, None, 9.0) == Throttle(9) == Dedupe("throttle", 9.0)
    assert modes.of_options(None, None, None, debounce_s=5.0, debounce_max_s=30.0) == Debounce(5, max=30)
    assert modes.of_options(None, None, None) is None
    with pytest.raises(DedupeInvalid, match="between") as refused:
        Throttle(0)
    assert refused.value.field == "throttle"


def test_an_enqueues_mode_wins_over_the_types_default_and_anything_else_is_refused():
    app = App("dedupe-modes", region="us-east-1")

    @app.job("t", dedupe=WhileActive())
    def t(payload: dict, ctx) -> None: ...

    def mode_of(**options) -> str | None:
        request = JobRequest("t", {}, idempotency_key="k", **options)
        policy = build_new_job(request, registry=app.registry, settings=app.settings, now=NOW).policy
        return None if policy is None else policy.mode

    assert mode_of() == "while_active"
    assert mode_of(dedupe=Throttle(9)) == "throttle"
    with pytest.raises(DedupeInvalid, match="give DedupeFor"):
        mode_of(dedupe="while_active")
    with pytest.raises(ConfigurationError, match="give DedupeFor"):
        app.job("u", dedupe=60)(t)


def test_a_holder_lets_go_when_its_job_finished_or_its_record_never_came():
    key_item = {"id": av_s("unique#x"), "job_id": av_s("j"), "created_at": av_n(NOW)}
    for status, free in (("queued", False), ("running", False), ("retry_scheduled", False)):
        assert records.is_free({"status": av_s(status)}, key_item, NOW + 1) is free
    for status in ("succeeded", "dead", "cancelled", "expired"):
        assert records.is_free({"status": av_s(status)}, key_item, NOW + 1)
    assert not records.is_free(None, key_item, NOW + 60)
    assert records.is_free(None, key_item, NOW + records.STRANDED_AFTER_S + 1)


def test_debounce_is_due_a_quiet_period_after_each_enqueue_never_past_the_maximum_wait():
    assert debounce.due(NOW, 5.0, NOW + 60) == NOW + 5
    assert debounce.due(NOW + 58, 5.0, NOW + 60) == NOW + 60
    mode = modes.of_options(None, None, None, debounce_s=5.0)
    assert mode == Debounce(5) == Dedupe("debounce", 5.0, 5.0 * DEFAULT_MAX_QUIETS)
    with pytest.raises(ValueError, match="at least the quiet period"):
        modes.of_options(None, None, None, debounce_s=5.0, debounce_max_s=1.0)
    with pytest.raises(ValueError, match="needs debounce"):
        modes.of_options(None, None, None, debounce_max_s=1.0)


def test_a_later_enqueue_rewrites_only_a_job_never_claimed_and_not_rewritten_by_a_later_one():
    job = NewJob(
        id="new",
        type="t",
        queue="default",
        payload={"v": 2},
        payload_version=1,
        max_attempts=3,
        run_at=NOW,
        now=NOW,
    )
    update = debounce.gather("tbl", "held", job, at=NOW + 5).update_item()
    assert update["Key"] == {"id": {"S": "held"}}
    condition = update["ConditionExpression"]
    values = update["ExpressionAttributeValues"]
    assert {"S": "queued"} in values.values() and {"N": "0"} in values.values()
    assert "attribute_not_exists" in condition and "<" in condition
    assert values[":payload"] == {"S": '{"v":2}'} and values[":due"] == {"N": str(NOW + 5)}


def test_a_key_item_expires_a_retention_after_its_job_may_start_or_after_a_debounced_keys_maximum_wait():
    job = NewJob(
        id="j",
        type="t",
        queue="default",
        payload={},
        payload_version=1,
        max_attempts=3,
        run_at=NOW + 60,
        now=NOW,
        idempotency_key="k",
    )
    held = records.take_key("tbl", job, retention_s=100).item
    assert held[TTL_ATTRIBUTE] == {"N": str(int(NOW + 60 + 100))} and "until" not in held
    gathering = records.take_key("tbl", job, retention_s=100, until=NOW + 30).item
    assert gathering["until"] == {"N": str(NOW + 30)}
    assert gathering[TTL_ATTRIBUTE] == {"N": str(int(NOW + 30 + 100))}
