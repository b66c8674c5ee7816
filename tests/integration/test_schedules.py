"""Schedules against the suite's emulator: plan/apply/list, the CLI, fires turned into jobs, dev firing.

The firing of real Scheduler schedules is in ``tests/e2e/test_schedule_firing.py`` (slow: MiniStack's tick).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from pydantic import BaseModel
from typer.testing import CliRunner

from sqsjobs import App, ConfigurationError, FakeClock, JobNotFound, JobStatus, SchedulerError
from sqsjobs import envelope as env
from sqsjobs._aws import Call, one
from sqsjobs.cli.main import cli
from sqsjobs.local.dev import DevStack
from sqsjobs.schedules.expressions import iso_utc
from sqsjobs.schedules.local import LocalScheduler
from sqsjobs.schedules.plugin import idempotency_key
from sqsjobs.schedules.sync import RETRY_MAX_ATTEMPTS, RETRY_MAX_EVENT_AGE_S, apply_flow, list_flow, plan_flow
from sqsjobs.store.codec import idempotent_job_id
from sqsjobs.testing import work_until
from tests.integration.helpers import attr, depth, queue_url, receive_dlq, send_raw, sqs_call

#: Any well-formed role ARN: the emulator does not assume it.
ROLE = "arn:aws:iam::000000000000:role/sqsjobs-scheduler"
#: Where a user would run ``sqsjobs``: ``tests.apps...`` is importable from there.
REPO_ROOT = Path(__file__).resolve().parents[2]


def scheduler(app: App, operation: str, **params):
    return app.run(one(Call("scheduler", operation, params)))


def queue_arn(app: App, queue: str = "default", dlq: bool = False) -> str:
    attrs = sqs_call(
        app, "get_queue_attributes", QueueUrl=queue_url(app, queue, dlq), AttributeNames=["QueueArn"]
    )
    return str(attrs["Attributes"]["QueueArn"])


def succeeded(app: App, job_id: str) -> bool:
    try:
        return app.get(job_id).status is JobStatus.SUCCEEDED
    except JobNotFound:
        return False


def count_jobs(app: App) -> int:
    """Job records: the table's control items (a schedule's last fire: ``schedule#...``) have no status."""
    scan = {
        "TableName": app.settings.table_name,
        "Select": "COUNT",
        "FilterExpression": "attribute_exists(#s)",
        "ExpressionAttributeNames": {"#s": "status"},
    }
    return int(app.run(one(Call("dynamodb", "scan", scan)))["Count"])


def plan(app: App):
    return app.run(plan_flow(app, now=app.clock.now()))


def apply(app: App):
    return app.run(apply_flow(app, plan(app)))


def declare(app: App, *, nightly="cron(0 2 * * ? *)", warm_payload=None, launch_tz="UTC", launch=True) -> App:
    @app.job("reports.build")
    def build(payload: dict | None, ctx):
        return None

    @app.job("cache.warm", queue="cache")
    def warm(payload: dict | None, ctx):
        return None

    app.schedule(
        "reports.nightly",
        cron=nightly,
        timezone="Europe/Berlin",
        job="reports.build",
        payload={"kind": "daily"},
        flexible_window_minutes=5,
    )
    app.schedule(
        "cache.warm", rate="rate(10 minutes)", job="cache.warm", payload=warm_payload or {"depth": 1}
    )
    if launch:
        app.schedule("launch.mail", at="2030-12-01T09:00:00", timezone=launch_tz, job="reports.build")
    return app


def outside_schedule(app: App, name: str, group: str, expression: str = "rate(5 minutes)") -> None:
    scheduler(
        app,
        "create_schedule",
        Name=name,
        GroupName=group,
        ScheduleExpression=expression,
        FlexibleTimeWindow={"Mode": "OFF"},
        Target={"Arn": queue_arn(app), "RoleArn": ROLE, "Input": "{}"},
    )


def test_apply_creates_the_declared_schedules_and_deletes_only_undeclared_ones_in_its_group(
    ministack_url, make_app
):
    # GIVEN an app with three declarations, provisioned
    app = declare(make_app(ministack_url, scheduler_role_arn=ROLE))
    app.provision()
    group = app.settings.schedule_group
    # AND schedules it does not own: the same name in the default group, one in another group,
    # and a leftover in its own group whose declaration was removed
    other_group = f"{app.name}-other"
    scheduler(app, "create_schedule_group", Name=other_group)
    outside_schedule(app, "reports.nightly", "default")
    outside_schedule(app, "stranger", other_group)
    scheduler(app, "create_schedule_group", Name=group)
    outside_schedule(app, "old.digest", group)

    # WHEN planned
    first = plan(app)
    # THEN it creates the three and deletes only the leftover, field by field
    assert {(c.action, c.name) for c in first.changes} == {
        ("create", "reports.nightly"),
        ("create", "cache.warm"),
        ("create", "launch.mail"),
        ("delete", "old.digest"),
    }
    nightly = next(c for c in first.changes if c.name == "reports.nightly")
    fields = {f.path: f.new for f in nightly.fields}
    assert fields["ScheduleExpression"] == "cron(0 2 * * ? *)"
    assert fields["ScheduleExpressionTimezone"] == "Europe/Berlin"
    assert fields["FlexibleTimeWindow.MaximumWindowInMinutes"] == 5

    # WHEN applied
    apply(app)
    # THEN each schedule targets its job's queue with a fire envelope, a retry policy and the queue's DLQ
    got = scheduler(app, "get_schedule", Name="cache.warm", GroupName=group)
    assert got["ScheduleExpression"] == "rate(10 minutes)"
    assert got["Target"]["Arn"] == queue_arn(app, "cache")
    assert got["Target"]["RoleArn"] == ROLE
    assert got["Target"]["DeadLetterConfig"] == {"Arn": queue_arn(app, "cache", dlq=True)}
    assert got["Target"]["RetryPolicy"] == {
        "MaximumEventAgeInSeconds": RETRY_MAX_EVENT_AGE_S,
        "MaximumRetryAttempts": RETRY_MAX_ATTEMPTS,
    }
    assert env.parse(got["Target"]["Input"]) == env.Fire(
        "cache.warm", env.SCHEDULED_TIME, "cache.warm", {"depth": 1}
    )
    launch = scheduler(app, "get_schedule", Name="launch.mail", GroupName=group)
    assert launch["ActionAfterCompletion"] == "DELETE"  # one-time schedules remove themselves
    assert got["ActionAfterCompletion"] == "NONE"
    with pytest.raises(SchedulerError, match="ResourceNotFound"):
        scheduler(app, "get_schedule", Name="old.digest", GroupName=group)

    # AND a second apply is a no-op: nothing to change, no write sent
    second = plan(app)
    assert second.empty
    assert sorted(second.unchanged) == ["cache.warm", "launch.mail", "reports.nightly"]
    before = app.requests.snapshot()
    app.run(apply_flow(app, second))
    writes = [k for k, n in app.requests.snapshot().items() if n != before.get(k) and "Schedule" in k]
    assert not [k for k in writes if k.split(".")[1].startswith(("Create", "Update", "Delete"))]

    # AND the schedules outside its group are untouched
    assert scheduler(app, "get_schedule", Name="reports.nightly", GroupName="default")[
        "ScheduleExpression"
    ] == ("rate(5 minutes)")
    assert scheduler(app, "get_schedule", Name="stranger", GroupName=other_group)["Name"] == "stranger"
    scheduler(app, "delete_schedule", Name="reports.nightly", GroupName="default")


def test_apply_updates_changed_expression_payload_and_timezone_then_deletes_removed(ministack_url, make_app):
    app = declare(make_app(ministack_url, scheduler_role_arn=ROLE))
    app.provision()
    apply(app)
    group = app.settings.schedule_group

    # WHEN the same app is redeclared with a new cron, a new payload and a new time zone
    changed = declare(
        make_app(ministack_url, name=app.name, scheduler_role_arn=ROLE),
        nightly="cron(30 3 * * ? *)",
        warm_payload={"depth": 2},
        launch_tz="Europe/Berlin",
    )
    result = plan(changed)
    # THEN the plan names exactly the changed fields
    assert {
        c.name: {f.path: (f.old, f.new) for f in c.fields} for c in result.changes if c.action == "update"
    } == {
        "reports.nightly": {"ScheduleExpression": ("cron(0 2 * * ? *)", "cron(30 3 * * ? *)")},
        "cache.warm": {"Target.Input.payload": ('{"depth": 1}', '{"depth": 2}')},
        "launch.mail": {"ScheduleExpressionTimezone": ("UTC", "Europe/Berlin")},
    }
    assert result.count("create") == result.count("delete") == 0
    changed.run(apply_flow(changed, result))
    assert scheduler(app, "get_schedule", Name="reports.nightly", GroupName=group)["ScheduleExpression"] == (
        "cron(30 3 * * ? *)"
    )
    assert json.loads(scheduler(app, "get_schedule", Name="cache.warm", GroupName=group)["Target"]["Input"])[
        "payload"
    ] == {"depth": 2}
    assert plan(changed).empty

    # WHEN a declaration is removed, apply deletes its schedule
    fewer = declare(make_app(ministack_url, name=app.name, scheduler_role_arn=ROLE), launch=False)
    result = plan(fewer)
    assert [(c.action, c.name) for c in result.changes] == [
        ("update", "cache.warm"),  # back to the first payload and cron
        ("update", "reports.nightly"),
        ("delete", "launch.mail"),
    ]
    fewer.run(apply_flow(fewer, result))
    names = {s["Name"] for s in scheduler(app, "list_schedules", GroupName=group)["Schedules"]}
    assert names == {"reports.nightly", "cache.warm"}


def test_list_shows_next_fires_computed_in_the_time_zone(ministack_url, make_app):
    app = declare(make_app(ministack_url, scheduler_role_arn=ROLE))
    app.provision()
    apply(app)
    outside_schedule(app, "stray", app.settings.schedule_group, "rate(1 hour)")
    rows = {r.name: r for r in app.run(list_flow(app, now=time.time(), count=3))}
    assert {n: r.status for n, r in rows.items()} == {
        "reports.nightly": "applied",
        "cache.warm": "applied",
        "launch.mail": "applied",
        "stray": "not declared",
    }
    berlin = [
        datetime.fromtimestamp(t, ZoneInfo("Europe/Berlin")) for t in rows["reports.nightly"].next_fires
    ]
    assert [(d.hour, d.minute) for d in berlin] == [(2, 0)] * 3
    assert len({d.date() for d in berlin}) == 3
    warm = rows["cache.warm"].next_fires
    assert [round(b - a) for a, b in itertools.pairwise(warm)] == [600, 600]
    assert [iso_utc(t) for t in rows["launch.mail"].next_fires] == ["2030-12-01T09:00:00Z"]


def test_missing_role_or_queue_is_a_clear_error_before_any_schedule_is_sent(ministack_url, make_app):
    app = declare(make_app(ministack_url))
    with pytest.raises(ConfigurationError, match="SQSJOBS_SCHEDULER_ROLE_ARN"):
        plan(app)
    unprovisioned = declare(make_app(ministack_url, scheduler_role_arn=ROLE))
    with pytest.raises(ConfigurationError, match="run `sqsjobs provision`"):
        plan(unprovisioned)
    assert not [k for k in app.requests.snapshot() if k.startswith("scheduler.")]


# ── the CLI ──────────────────────────────────────────────────────────────────────────────────
def test_cli_plan_apply_list(ministack_url, monkeypatch):
    suffix = uuid.uuid4().hex[:8]
    for key, value in {
        "SQSJOBS_QUEUE_PREFIX": f"cli{suffix}",
        "SQSJOBS_TABLE": f"cli{suffix}-jobs",
        "SQSJOBS_SCHEDULE_GROUP": f"cli{suffix}-schedules",
        "SQSJOBS_SCHEDULER_ROLE_ARN": ROLE,
    }.items():
        monkeypatch.setenv(key, value)
    from tests.apps.scheduled import app

    app.configure(endpoint_url=ministack_url)
    app.provision()
    runner = CliRunner()
    args = ["--app", "tests.apps.scheduled:app", "--endpoint-url", ministack_url]

    planned = runner.invoke(cli, ["schedules", "plan", *args])
    assert planned.exit_code == 0, planned.output
    assert "+ create reports.nightly" in planned.output
    assert "ScheduleExpression: cron(0 2 * * ? *)" in planned.output
    assert "2 to create, 0 to update, 0 to delete" in planned.output

    # apply shows the plan and, with no terminal to ask and no --yes, changes nothing
    refused = runner.invoke(cli, ["schedules", "apply", *args])
    assert refused.exit_code == 2, refused.output
    assert "+ create reports.nightly" in refused.output and "pass --yes" in refused.output
    assert "2 to create" in runner.invoke(cli, ["schedules", "plan", *args]).output

    applied = runner.invoke(cli, ["schedules", "apply", *args, "--yes"])
    assert applied.exit_code == 0, applied.output
    assert "applied" in applied.output
    again = runner.invoke(cli, ["schedules", "apply", *args])  # nothing to change: nothing to confirm
    assert again.exit_code == 0 and "nothing to apply" in again.output

    listed = runner.invoke(cli, ["schedules", "list", *args, "--json", "--count", "2"])
    assert listed.exit_code == 0, listed.output
    rows = {r["name"]: r for r in map(json.loads, listed.stdout.splitlines())}
    assert rows["reports.nightly"]["status"] == "applied"
    assert len(rows["cache.warm"]["next_fires"]) == 2
    app.close()


def sqsjobs_process(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``sqsjobs ...`` as a user runs it: its own process, real stdout/stderr, its own logging."""
    return subprocess.run(
        [sys.executable, "-m", "sqsjobs", *args],
        env=env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def log_lines(stderr: str) -> list[dict]:
    """The JSON log lines a process wrote (rich's error lines are not JSON)."""
    lines = []
    for line in stderr.splitlines():
        try:
            lines.append(json.loads(line))
        except ValueError:
            continue
    return [line for line in lines if isinstance(line, dict)]


@pytest.mark.slow
def test_cli_plan_and_apply_in_a_process_with_default_logging_exit_cleanly(ministack_url):
    # GIVEN a user's shell: fake credentials and a region (the suite's), the app's own resources,
    # the scheduler role, and no log level set: INFO records are built and handled for real
    suffix = uuid.uuid4().hex[:8]
    environ = {k: v for k, v in os.environ.items() if k not in ("SQSJOBS_LOG_LEVEL", "POWERTOOLS_LOG_LEVEL")}
    environ.update(
        SQSJOBS_QUEUE_PREFIX=f"np{suffix}",
        SQSJOBS_TABLE=f"np{suffix}-jobs",
        SQSJOBS_SCHEDULE_GROUP=f"np{suffix}-schedules",
        SQSJOBS_SCHEDULER_ROLE_ARN=ROLE,
        COLUMNS="250",
    )
    args = ["--app", "tests.apps.no_payload:app", "--endpoint-url", ministack_url]
    provisioned = sqsjobs_process("provision", *args, env=environ)
    assert provisioned.returncode == 0, provisioned.stderr

    # WHEN its schedules, declared without payload=, are planned
    planned = sqsjobs_process("schedules", "plan", *args, env=environ)
    # THEN plan exits 0 and shows the empty payload each handler accepts
    assert planned.returncode == 0, planned.stderr
    assert "+ create cache.warm" in planned.stdout
    assert "Target.Input.payload: {}" in planned.stdout  # a dict handler
    assert 'Target.Input.payload: {"kind": "daily"}' in planned.stdout  # a model's defaults
    assert "2 to create, 0 to update, 0 to delete" in planned.stdout

    # WHEN applied
    applied = sqsjobs_process("schedules", "apply", *args, "--yes", env=environ)
    # THEN apply exits 0 without a traceback, and its log line was really written
    output = applied.stdout + applied.stderr
    assert applied.returncode == 0, output
    assert "Traceback" not in output
    assert "applied" in applied.stdout
    logged = [line for line in log_lines(applied.stderr) if line.get("message") == "schedules applied"]
    assert len(logged) == 1
    assert (logged[0]["schedules_created"], logged[0]["schedules_updated"]) == (2, 0)

    # AND the schedules exist: a new plan has nothing to do
    again = sqsjobs_process("schedules", "plan", *args, env=environ)
    assert again.returncode == 0, again.stderr
    assert "0 to create, 0 to update, 0 to delete, 2 unchanged" in again.stdout


def test_cli_rejects_an_invalid_expression_naming_the_schedule():
    result = CliRunner().invoke(cli, ["schedules", "plan", "--app", "tests.apps.bad_schedule:app"])
    assert result.exit_code == 1
    message = " ".join(result.output.split())
    assert "schedule 'reports.hourly'" in message
    assert "exactly one of day-of-month and day-of-week must be '?'" in message


# ── fires turned into jobs ───────────────────────────────────────────────────────────────────
class Report(BaseModel):
    kind: str


def fire_app(make_app, url: str) -> tuple[App, list[dict]]:
    app = make_app(url)
    runs: list[dict] = []

    @app.job("reports.build")
    def build(payload: dict, ctx):
        runs.append(payload)

    app.schedule("reports.hourly", cron="cron(0 * * * ? *)", job="reports.build", payload={"kind": "hourly"})
    app.provision()
    return app, runs


def test_a_fire_delivered_twice_makes_one_job_and_a_bad_fire_is_dead_lettered(ministack_url, make_app):
    app, runs = fire_app(make_app, ministack_url)
    at = "2026-12-01T08:00:00Z"
    body = env.Fire("reports.hourly", at, "reports.build", {"kind": "hourly"}).to_body()
    # GIVEN the same occurrence delivered twice (at-least-once), and a fire naming no known job
    send_raw(app, body)
    send_raw(app, body)
    send_raw(app, env.Fire("ghost", at, "no.such.job", None).to_body())
    job_id = idempotent_job_id(
        "reports.build", idempotency_key("reports.hourly", datetime(2026, 12, 1, 8, tzinfo=UTC).timestamp())
    )

    work_until(app, lambda: succeeded(app, job_id) and depth(app)["visible"] == 0)

    # THEN one job, keyed by (schedule, scheduled time), ran once
    job = app.get(job_id)
    assert job.idempotency_key == "schedule:reports.hourly@2026-12-01T08:00:00Z"
    assert runs == [{"kind": "hourly"}]
    assert count_jobs(app) == 1
    # AND the bad fire is in the DLQ with the reason
    dead = receive_dlq(app)
    assert len(dead) == 1
    assert "schedule 'ghost'" in attr(dead[0], "sqsjobs-reason")


def test_a_fire_without_payload_becomes_a_job_with_the_empty_payload_its_handler_accepts(
    ministack_url, make_app
):
    # GIVEN handlers taking a dict and a model with a required field
    app = make_app(ministack_url)
    runs: list[dict] = []

    @app.job("cache.warm")
    def warm(payload: dict, ctx):
        runs.append(payload)

    @app.job("reports.build")
    def build(payload: Report, ctx):
        runs.append(payload.model_dump())

    app.provision()
    # WHEN fires arrive without a payload (null, as from a schedule declared without payload=)
    at = "2026-12-01T08:00:00Z"
    send_raw(app, env.Fire("cache.warm", at, "cache.warm", None).to_body())
    send_raw(app, env.Fire("reports.nightly", at, "reports.build", None).to_body())
    slot = datetime(2026, 12, 1, 8, tzinfo=UTC).timestamp()
    job_id = idempotent_job_id("cache.warm", idempotency_key("cache.warm", slot))
    work_until(app, lambda: succeeded(app, job_id) and depth(app)["visible"] == 0)

    # THEN the dict handler's job ran with {}
    assert runs == [{}]
    assert app.get(job_id).payload_size == len("{}")  # the record keeps the payload's size and hash
    # AND the fire no empty payload fits is dead-lettered, saying to pass payload=
    dead = receive_dlq(app)
    assert len(dead) == 1
    reason = attr(dead[0], "sqsjobs-reason")
    assert "schedule 'reports.nightly'" in reason and "pass payload=" in reason


def test_the_local_loop_fires_into_the_queue_and_each_slot_becomes_one_job(ministack_url, make_app):
    app, runs = fire_app(make_app, ministack_url)
    clock = FakeClock(datetime(2026, 12, 1, 7, 59, 30, tzinfo=UTC).timestamp())
    local = LocalScheduler(app, clock=clock)

    async def fire_twice() -> list:
        clock.advance(30)
        first = await local.tick()
        again = await local.tick()  # same instant: the slot is spent
        await app.aclose()
        return [first, again]

    first, again = asyncio.run(fire_twice())
    assert [iso_utc(f.slot) for f in first] == ["2026-12-01T08:00:00Z"] and again == []
    send_raw(app, first[0].body)  # a restarted loop re-sending the same occurrence
    job_id = idempotent_job_id("reports.build", idempotency_key("reports.hourly", first[0].slot))
    work_until(app, lambda: succeeded(app, job_id) and depth(app)["visible"] == 0)
    assert runs == [{"kind": "hourly"}]
    assert count_jobs(app) == 1


def test_sqsjobs_dev_fires_the_declarations_locally():
    # GIVEN an app with a rate schedule (first fire at start), run by the dev stack on embedded moto
    app = App(f"dev{uuid.uuid4().hex[:8]}", receive_wait_s=1, visibility_timeout_s=5)
    ran = []

    @app.job("tick.run")
    def tick(payload: dict, ctx):
        ran.append(payload)

    app.schedule("tick.every-minute", rate="rate(1 minute)", job="tick.run", payload={"n": 1})

    async def run(stack: DevStack) -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(stack.run(stop))
        deadline = time.monotonic() + 20
        while not ran and time.monotonic() < deadline and not task.done():
            await asyncio.sleep(0.1)
        stop.set()
        await task

    with DevStack(app) as stack:
        asyncio.run(run(stack))
        assert ran == [{"n": 1}]
        assert count_jobs(app) == 1
