"""Schedule declarations and the local firing loop, with an injected clock: no emulator needed."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import BaseModel

from sqsjobs import App, ConfigurationError, FakeClock, Settings
from sqsjobs import envelope as env
from sqsjobs.schedules.expressions import iso_utc
from sqsjobs.schedules.local import LocalScheduler
from sqsjobs.schedules.sync import check_declarations, diff


def ts(*args: int) -> float:
    return datetime(*args, tzinfo=UTC).timestamp()


def make_app(clock: FakeClock | None = None) -> App:
    app = App("unit", clock=clock)

    @app.job("reports.build")
    def build(payload: dict | None, ctx):
        return None

    return app


# ── declarations ─────────────────────────────────────────────────────────────────────────────
def test_declarations_accept_wrapped_and_bare_expressions():
    app = make_app()
    a = app.schedule(
        "reports.nightly", cron="cron(0 2 * * ? *)", timezone="Europe/Berlin", job="reports.build"
    )
    b = app.schedule("cache.warm", rate="10 minutes", job="reports.build", payload={"kind": "warm"})
    c = app.schedule(
        "launch.mail", at=datetime(2026, 12, 1, 9), job="reports.build", flexible_window_minutes=5
    )
    assert (a.expression, b.expression, c.expression) == (
        "cron(0 2 * * ? *)",
        "rate(10 minutes)",
        "at(2026-12-01T09:00:00)",
    )
    assert [s.kind for s in app.schedules] == ["cron", "rate", "at"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"cron": "cron(* * * * * *)"}, "schedule 'bad.one': cron(* * * * * *): exactly one of day-of-month"),
        (
            {"rate": "rate(1 minutes)"},
            "schedule 'bad.one': rate(1 minutes): a value of 1 takes the singular unit",
        ),
        (
            {"at": "2026-12-01 09:00"},
            "schedule 'bad.one': at(2026-12-01 09:00): expected at(yyyy-mm-ddThh:mm:ss)",
        ),
        ({"at": datetime(2026, 12, 1, 9, tzinfo=UTC)}, "schedule 'bad.one': at= takes a naive datetime"),
        (
            {"cron": "0 2 * * ? *", "timezone": "Europe/Berln"},
            "schedule 'bad.one': unknown time zone 'Europe/Berln'",
        ),
        ({"cron": "0 2 * * ? *", "rate": "rate(1 day)"}, "give exactly one of cron=, rate= or at= (got 2)"),
        ({}, "give exactly one of cron=, rate= or at= (got 0)"),
        (
            {"rate": "rate(1 day)", "flexible_window_minutes": 0},
            "flexible_window_minutes must be 1..1440, got 0",
        ),
    ],
)
def test_a_bad_declaration_is_a_configuration_error_naming_the_schedule(kwargs, message):
    app = make_app()
    with pytest.raises(ConfigurationError) as info:
        app.schedule("bad.one", job="reports.build", **kwargs)
    assert message in str(info.value)
    assert "bad.one" not in app.schedules


def test_names_and_duplicates_are_checked():
    app = make_app()
    with pytest.raises(ConfigurationError, match="must be 1-64 characters"):
        app.schedule("reports nightly", rate="rate(1 day)", job="reports.build")
    app.schedule("reports.daily", rate="rate(1 day)", job="reports.build")
    with pytest.raises(ConfigurationError, match="declared twice"):
        app.schedule("reports.daily", rate="rate(2 days)", job="reports.build")


def test_job_and_payload_are_checked_against_the_registry_before_use():
    app = make_app()
    app.schedule("ghost", rate="rate(1 day)", job="no.such.job")
    with pytest.raises(
        ConfigurationError, match=r"schedule 'ghost': no handler registered for job type 'no\.such\.job'"
    ):
        check_declarations(app)
    other = make_app()
    other.schedule("wrong.payload", rate="rate(1 day)", job="reports.build", payload=[1, 2])
    with pytest.raises(ConfigurationError, match=r"schedule 'wrong\.payload': payload for 'reports\.build'"):
        check_declarations(other)


class WarmOptions(BaseModel):
    depth: int = 1
    region: str = "all"


class Report(BaseModel):
    kind: str


def handler_taking(annotation: Any):
    """A handler whose payload parameter has ``annotation`` (None: unannotated)."""

    def handler(payload, ctx):
        return None

    if annotation is not None:
        handler.__annotations__ = {"payload": annotation}
    return handler


@pytest.mark.parametrize(
    ("annotation", "sent"),
    [
        (dict, {}),
        (dict[str, Any], {}),
        (WarmOptions, {"depth": 1, "region": "all"}),  # the model's defaults, as stored
        (dict | None, None),  # what such schedules have always sent: applied ones show no diff
        (WarmOptions | None, None),
        (Any, None),
        (None, None),  # unannotated
    ],
)
def test_a_schedule_without_payload_sends_the_empty_payload_its_handler_accepts(annotation, sent):
    # GIVEN a handler, and a schedule naming it with no payload= (the README's cache.warm shape)
    app = App("unit")
    app.job("cache.warm")(handler_taking(annotation))
    app.schedule("cache.warm", rate="rate(10 minutes)", job="cache.warm")
    # WHEN the declarations are checked (plan, apply and dev all start here)
    payloads = check_declarations(app)
    # THEN the payload is the first of None and {} that the handler validates, in its stored form
    assert payloads == {"cache.warm": sent}


def test_a_schedule_without_payload_for_a_handler_that_needs_one_says_to_pass_payload():
    # GIVEN a handler whose model has a required field, and a schedule giving no payload
    app = App("unit")
    app.job("reports.build")(handler_taking(Report))
    app.schedule("reports.nightly", cron="cron(0 2 * * ? *)", job="reports.build")
    # WHEN the declarations are checked
    with pytest.raises(ConfigurationError) as info:
        check_declarations(app)
    # THEN one message names the schedule, the job type, what the handler expects, and the fix
    message = str(info.value)
    assert message.startswith("schedule 'reports.nightly': ")
    assert "job type 'reports.build'" in message
    assert "Report" in message
    assert "kind: Field required" in message
    assert "pass payload=" in message


def test_the_local_loop_fires_a_payload_less_schedule_with_the_empty_payload():
    # GIVEN `sqsjobs dev`'s loop over a schedule without payload= for a dict handler
    clock = FakeClock(ts(2026, 1, 1))
    app = App("unit", clock=clock)
    app.job("cache.warm")(handler_taking(dict))
    app.schedule("cache.warm", rate="rate(10 minutes)", job="cache.warm")
    # WHEN it fires (a rate fires at its start)
    fires = LocalScheduler(app, clock=clock).due()
    # THEN the fire carries {}, which the handler accepts
    assert [env.parse(f.body) for f in fires] == [
        env.Fire("cache.warm", "2026-01-01T00:00:00Z", "cache.warm", {})
    ]


# ── the fire envelope ────────────────────────────────────────────────────────────────────────
def test_fire_envelope_round_trips_and_job_envelopes_still_parse():
    fire = env.Fire("reports.nightly", env.SCHEDULED_TIME, "reports.build", {"kind": "daily"})
    parsed = env.parse(fire.to_body())
    assert parsed == fire
    assert env.parse(env.Envelope("j1", "reports.build").to_body()) == env.Envelope("j1", "reports.build")
    with pytest.raises(env.EnvelopeError, match="lacks a schedule name"):
        env.parse('{"v":1,"fire":"x"}')


def test_plan_diff_is_field_by_field_and_compares_the_input_by_key():
    old = {
        "ScheduleExpression": "rate(10 minutes)",
        "FlexibleTimeWindow": {"Mode": "OFF"},
        "Target": {"Arn": "q", "Input": json.dumps({"fire": "a", "payload": {"k": 1}, "v": 1})},
    }
    new = {
        "ScheduleExpression": "rate(5 minutes)",
        "ScheduleExpressionTimezone": "UTC",
        "FlexibleTimeWindow": {"Mode": "OFF"},
        "Target": {"Arn": "q", "Input": '{"v":1,"fire":"a","payload":{"k":2}}'},
    }
    changes = {c.path: (c.old, c.new) for c in diff(old, new)}
    assert changes == {
        "ScheduleExpression": ("rate(10 minutes)", "rate(5 minutes)"),
        "Target.Input.payload": ('{"k": 1}', '{"k": 2}'),
    }


# ── the local firing loop, clock injected ────────────────────────────────────────────────────
def run_clock(
    scheduler: LocalScheduler, clock: FakeClock, until: float, step_s: float = 60.0
) -> list[tuple[str, str]]:
    """Step the clock, collecting (schedule, slot) of each fire as the loop would send it."""
    fired = []
    while clock.now() < until:
        clock.advance(step_s)
        fires = scheduler.due()
        scheduler.mark_sent(fires)
        fired += [(f.schedule, iso_utc(f.slot)) for f in fires]
    return fired


def test_local_loop_fires_cron_in_its_time_zone_across_both_dst_changes():
    clock = FakeClock(ts(2026, 3, 27, 12))
    app = make_app(clock)
    app.schedule("nightly", cron="cron(30 2 * * ? *)", timezone="Europe/Berlin", job="reports.build")
    scheduler = LocalScheduler(app, clock=clock)
    fired = run_clock(scheduler, clock, ts(2026, 3, 31, 12))
    # 28 March 02:30 CET, 29 March skipped (02:00 → 03:00), then 02:30 CEST
    assert fired == [
        ("nightly", "2026-03-28T01:30:00Z"),
        ("nightly", "2026-03-30T00:30:00Z"),
        ("nightly", "2026-03-31T00:30:00Z"),
    ]


def test_local_loop_fires_the_repeated_hour_once_when_clocks_fall_back():
    clock = FakeClock(ts(2026, 10, 24, 23, 50))
    app = make_app(clock)
    app.schedule("half-hourly", cron="cron(0/30 * * * ? *)", timezone="Europe/Berlin", job="reports.build")
    scheduler = LocalScheduler(app, clock=clock)
    fired = [slot for _, slot in run_clock(scheduler, clock, ts(2026, 10, 25, 2, 30))]
    # local 02:00 and 02:30 happen twice on 25 October; each fires once, in summer time
    assert fired == [
        "2026-10-25T00:00:00Z",
        "2026-10-25T00:30:00Z",
        "2026-10-25T02:00:00Z",
        "2026-10-25T02:30:00Z",
    ]
    assert len(set(fired)) == len(fired)


def test_local_loop_fires_rate_from_its_start_and_at_once():
    start = ts(2026, 11, 30, 23, 40)
    clock = FakeClock(start)
    app = make_app(clock)
    app.schedule("warm", rate="rate(10 minutes)", job="reports.build", payload={"kind": "warm"})
    app.schedule("launch", at="2026-12-01T01:00:00", timezone="Europe/Berlin", job="reports.build")
    app.schedule("past", at="2020-01-01T00:00:00", job="reports.build")
    scheduler = LocalScheduler(app, clock=clock)
    first = scheduler.due()  # a rate fires at once, as Scheduler does without a StartDate
    scheduler.mark_sent(first)
    fired = [(f.schedule, iso_utc(f.slot)) for f in first] + run_clock(scheduler, clock, start + 1800)
    assert fired == [
        ("warm", "2026-11-30T23:40:00Z"),
        ("warm", "2026-11-30T23:50:00Z"),
        ("warm", "2026-12-01T00:00:00Z"),
        ("launch", "2026-12-01T00:00:00Z"),  # 01:00 in Berlin
        ("warm", "2026-12-01T00:10:00Z"),
    ]
    # AND the body is what Scheduler would deliver, time substituted
    body = env.parse(scheduler.sent[1].body)
    assert body == env.Fire("warm", "2026-11-30T23:50:00Z", "reports.build", {"kind": "warm"})


def test_local_loop_never_fires_one_slot_twice_even_when_the_clock_jumps():
    start = ts(2026, 1, 1)
    clock = FakeClock(start)
    app = make_app(clock)
    app.schedule("warm", rate="rate(10 minutes)", job="reports.build")
    scheduler = LocalScheduler(app, clock=clock)
    scheduler.mark_sent(scheduler.due())
    assert scheduler.due() == []  # same instant: nothing new
    clock.advance(35 * 60)  # a laptop that slept through three occurrences
    fires = scheduler.due()
    assert [iso_utc(f.slot) for f in fires] == ["2026-01-01T00:30:00Z"]  # only the latest, no backfill
    assert scheduler.due() == fires  # not yet marked sent: a failed send is retried with the same slot
    scheduler.mark_sent(fires)
    assert scheduler.due() == []
    clock.advance(4 * 60)
    assert scheduler.due() == []
    clock.advance(60)
    assert [iso_utc(f.slot) for f in scheduler.due()] == ["2026-01-01T00:40:00Z"]


def test_role_and_group_come_from_the_environment():
    settings = Settings.from_env(
        "shop",
        env={"SQSJOBS_SCHEDULER_ROLE_ARN": "arn:aws:iam::123456789012:role/s", "SQSJOBS_SCHEDULE_GROUP": "g"},
    )
    assert (settings.scheduler_role_arn, settings.schedule_group) == ("arn:aws:iam::123456789012:role/s", "g")
    assert Settings.from_env("shop", env={}).schedule_group == "shop-schedules"
