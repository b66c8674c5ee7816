"""Schedules made at runtime (``app.schedules``), overlap policies and catch-up, on MiniStack.

The HTTP path with a real ``sqsjobs dev`` process is ``tests/api/test_runtime_schedules_dev.py``.
A runtime schedule here fires far in the future (``FAR``), so MiniStack's own Scheduler never fires
it during a test: the tests send the fire Scheduler would send, with its time filled in, or step the
local loop's ``FakeClock``.
"""

from __future__ import annotations

import asyncio
import threading
from datetime import UTC, datetime

import pytest

from sqsjobs import App, FakeClock, JobNotFound, JobStatus, ScheduleExists, ScheduleNotFound
from sqsjobs import envelope as env
from sqsjobs._aws import Call, one
from sqsjobs.schedules import records
from sqsjobs.schedules.expressions import iso_utc
from sqsjobs.schedules.local import LocalScheduler
from sqsjobs.schedules.plugin import idempotency_key
from sqsjobs.schedules.sync import apply_flow, plan_flow
from sqsjobs.store.codec import idempotent_job_id
from sqsjobs.testing import work_until
from tests.integration.helpers import send_raw, wait_until

ROLE = "arn:aws:iam::000000000000:role/sqsjobs-scheduler"
#: Never fires while a test runs (MiniStack's Scheduler would fire a near one into the queue).
FAR = "cron(0 3 1 1 ? 2199)"


def scheduler(app: App, operation: str, **params):
    return app.run(one(Call("scheduler", operation, params)))


def group_names(app: App, group: str) -> set[str]:
    page = scheduler(app, "list_schedules", GroupName=group)
    return {s["Name"] for s in page["Schedules"] if s.get("GroupName", group) == group}


def status_of(app: App, job_id: str) -> JobStatus | None:
    try:
        return app.get(job_id).status
    except JobNotFound:
        return None


def runtime_app(make_app, url: str, **settings) -> App:
    app = make_app(url, scheduler_role_arn=ROLE, **settings)

    @app.job("report.build")
    def build(payload: dict, ctx):
        return None

    app.provision()
    return app


def test_runtime_schedules_are_made_changed_paused_resumed_deleted_and_listed_per_tenant(
    ministack_url, make_app
):
    app = runtime_app(make_app, ministack_url)
    group = app.settings.runtime_schedule_group
    # GIVEN schedules of two tenants and one without a tenant
    made = app.schedules.create("daily", job="report.build", cron=FAR, tenant="acme", payload={"c": 1})
    app.schedules.create("weekly", job="report.build", cron=FAR, tenant="acme", overlap="skip")
    app.schedules.create("daily", job="report.build", cron=FAR, tenant="globex")
    app.schedules.create("ops", job="report.build", rate="rate(7 days)", catchup_window=600)
    assert (made.tenant, made.name, made.state, made.overlap) == ("acme", "daily", "active", "allow_all")
    assert made.next_fires and made.last_job is None
    # THEN each tenant lists its own, from the index; without a tenant, every one
    assert [v.name for v in app.schedules.list(tenant="acme")] == ["daily", "weekly"]
    assert [(v.tenant, v.name) for v in app.schedules.list(tenant="globex")] == [("globex", "daily")]
    assert len(app.schedules.list()) == 4
    assert group_names(app, group) == {"acme.daily", "acme.weekly", "globex.daily", ".ops"}
    # AND a name a tenant has already is refused, another tenant's is not theirs
    with pytest.raises(ScheduleExists):
        app.schedules.create("daily", job="report.build", cron=FAR, tenant="acme")
    # WHEN one is changed, paused, resumed
    changed = app.schedules.update("daily", tenant="acme", payload={"c": 2}, overlap="buffer_one")
    assert (changed.payload, changed.overlap) == ({"c": 2}, "buffer_one")
    paused = app.schedules.pause("daily", tenant="acme")
    assert paused.state == "paused" and paused.next_fires == ()
    deployed = scheduler(app, "get_schedule", Name="acme.daily", GroupName=group)
    assert deployed["State"] == "DISABLED" and '"c":2' in deployed["Target"]["Input"]
    assert app.schedules.resume("daily", tenant="acme").state == "active"
    assert scheduler(app, "get_schedule", Name="acme.daily", GroupName=group)["State"] == "ENABLED"
    # AND deleted: from Scheduler and from the listing
    assert app.schedules.delete("daily", tenant="acme") is True
    assert app.schedules.delete("daily", tenant="acme") is False
    with pytest.raises(ScheduleNotFound):
        app.schedules.describe("daily", tenant="acme")
    assert [v.name for v in app.schedules.list(tenant="acme")] == ["weekly"]
    assert "acme.daily" not in group_names(app, group)


def test_schedules_apply_never_touches_the_runtime_group(ministack_url, make_app):
    # GIVEN a declared schedule applied, and a runtime one
    app = runtime_app(make_app, ministack_url)
    app.schedule("nightly", cron=FAR, job="report.build", payload={})
    app.run(apply_flow(app, app.run(plan_flow(app, now=app.clock.now()))))
    app.schedules.create("per-customer", job="report.build", cron=FAR, tenant="acme")
    # WHEN the declarations change (nightly removed) and are applied again
    again = App(app.name, endpoint_url=ministack_url, scheduler_role_arn=ROLE)
    again.job("report.build")(lambda payload, ctx: None)
    plan = again.run(plan_flow(again, now=again.clock.now()))
    assert [(c.action, c.name) for c in plan.changes] == [("delete", "nightly")]
    again.run(apply_flow(again, plan))
    again.close()
    # THEN the runtime schedule is still there, in Scheduler and in the listing
    assert group_names(app, app.settings.runtime_schedule_group) == {"acme.per-customer"}
    assert group_names(app, app.settings.schedule_group) == set()
    assert [v.name for v in app.schedules.list(tenant="acme")] == ["per-customer"]


class Gate:
    """A job type whose runs wait until released (or cancelled): a long-running previous job."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.started: list[dict] = []
        self.cancelled: list[dict] = []


def gated_app(make_app, url: str, gate: Gate) -> App:
    # lease 4 s: a running job's lease is renewed every 2 s, and a renewal is where it learns of a
    # cancel request (cancel_previous); at the default 60 s, it learnt only ~30 s later, and a loaded
    # fresh-clone run (63) missed the test's 30 s bound
    app = make_app(url, scheduler_role_arn=ROLE, visibility_timeout_s=6, lease_s=4.0)

    @app.job("report.build")
    def build(payload: dict, ctx):
        gate.started.append(payload)
        while not gate.release.is_set():
            if ctx.cancel_requested:
                gate.cancelled.append(payload)
                return None
            gate.release.wait(0.05)

    app.provision()
    return app


def fire_body(key: str, slot: float, payload: dict) -> str:
    return env.Fire(key, iso_utc(slot), "report.build", payload).to_body()


def job_of(key: str, slot: float, tenant: str | None) -> str:
    return idempotent_job_id("report.build", idempotency_key(key, slot), tenant)


def background_worker(app: App) -> tuple[threading.Thread, threading.Event]:
    stop = threading.Event()
    thread = threading.Thread(target=work_until, args=(app, stop.is_set), kwargs={"timeout_s": 120})
    thread.start()
    return thread, stop


def item(app: App, key: str) -> dict:
    return app.run(one(Call("dynamodb", "get_item", records.get(app.settings.table_name, key)))).get(
        "Item", {}
    )


def counted(app: App, key: str, name: str) -> int:
    return int(item(app, key).get(name, {"N": "0"})["N"])


@pytest.mark.parametrize("policy", ["allow_all", "skip", "buffer_one", "cancel_previous"])
def test_a_fire_while_the_previous_job_runs_follows_the_overlap_policy(ministack_url, make_app, policy):
    gate = Gate()
    app = gated_app(make_app, ministack_url, gate)
    app.schedules.create("sync", job="report.build", cron=FAR, tenant="acme", overlap=policy, payload={})
    key = records.runtime_key("acme", "sync")
    base = (int(app.clock.now()) // 60 - 5) * 60  # recent occurrences, well inside the catch-up window
    first, second, third = (job_of(key, base + 60 * n, "acme") for n in range(3))
    thread, stop = background_worker(app)
    try:
        # GIVEN the first fire's job running
        send_raw(app, fire_body(key, base, {}))
        wait_until(lambda: status_of(app, first) is JobStatus.RUNNING, 30, "first job running")
        # WHEN the next two occurrences fire while it runs
        send_raw(app, fire_body(key, base + 60, {}))
        if policy == "buffer_one":
            wait_until(lambda: "buffered" in item(app, key), 30, "second fire buffered")
        elif policy == "cancel_previous":
            wait_until(lambda: gate.cancelled, 30, "first job told to stop")
        elif policy == "skip":
            wait_until(lambda: counted(app, key, "skipped") == 1, 30, "second fire skipped")
        else:
            wait_until(lambda: status_of(app, second) is JobStatus.RUNNING, 30, "second job running")
        send_raw(app, fire_body(key, base + 120, {}))
        if policy == "cancel_previous":  # the second, running or still queued, is cancelled
            wait_until(lambda: status_of(app, second) is JobStatus.CANCELLED, 30, "second job cancelled")
        if policy in ("skip", "buffer_one"):
            wait_until(lambda: counted(app, key, "skipped") == (2 if policy == "skip" else 1), 30, "skipped")
            assert status_of(app, second) is None and status_of(app, third) is None
        gate.release.set()
        # THEN
        if policy == "skip":  # nothing made while it ran
            wait_until(lambda: status_of(app, first) is JobStatus.SUCCEEDED, 30, "first done")
            assert status_of(app, second) is None and status_of(app, third) is None
        elif policy == "buffer_one":  # one waited, and ran after the first; the third was dropped
            wait_until(lambda: status_of(app, second) is JobStatus.SUCCEEDED, 60, "buffered one ran")
            assert status_of(app, first) is JobStatus.SUCCEEDED and status_of(app, third) is None
            assert "buffered" not in item(app, key)
        elif policy == "cancel_previous":  # each fire cancelled the one before
            wait_until(lambda: status_of(app, third) is JobStatus.SUCCEEDED, 60, "third ran")
            assert status_of(app, first) is JobStatus.CANCELLED
            assert status_of(app, second) is JobStatus.CANCELLED
        else:  # all three made, two ran at once
            wait_until(lambda: status_of(app, third) is JobStatus.SUCCEEDED, 60, "third ran")
            assert status_of(app, first) is status_of(app, second) is JobStatus.SUCCEEDED
    finally:
        gate.release.set()
        stop.set()
        thread.join()
    view = app.schedules.describe("sync", tenant="acme")
    assert view.last_outcome == "succeeded"
    assert view.last_job == {"allow_all": third, "skip": first, "buffer_one": second}.get(policy, third)


def test_a_fire_delivered_twice_makes_one_job_and_one_past_the_window_is_missed(ministack_url, make_app):
    app = runtime_app(make_app, ministack_url)
    app.schedules.create("tick", job="report.build", cron=FAR, overlap="skip", catchup_window=600, payload={})
    key = records.runtime_key(None, "tick")
    now = int(app.clock.now()) // 60 * 60
    # GIVEN one occurrence delivered twice, and one an hour old (workers were down)
    send_raw(app, fire_body(key, now, {}))
    send_raw(app, fire_body(key, now, {}))
    send_raw(app, fire_body(key, now - 3600, {}))
    made = job_of(key, now, None)
    work_until(app, lambda: status_of(app, made) is JobStatus.SUCCEEDED and counted(app, key, "missed") == 1)
    view = app.schedules.describe("tick")
    assert (view.fires, view.missed, view.last_job, view.last_outcome) == (1, 1, made, "succeeded")
    assert status_of(app, job_of(key, now - 3600, None)) is None


def test_resume_makes_the_fires_missed_within_the_window_and_counts_older_ones(ministack_url, make_app):
    # GIVEN a runtime rate schedule fired by the local loop on a fake clock
    start = datetime(2026, 12, 1, 8, 0, tzinfo=UTC).timestamp()
    clock = FakeClock(start)
    app = runtime_app(make_app, ministack_url, clock=clock)
    app.schedules.create("poll", job="report.build", rate="rate(5 minutes)", catchup_window=1200, payload={})
    key = records.runtime_key(None, "poll")
    local = LocalScheduler(app, clock=clock)

    async def tick():
        fires = await local.tick()
        await app.aclose()
        return [iso_utc(f.slot) for f in fires if f.schedule == key]

    assert asyncio.run(tick()) == ["2026-12-01T08:00:00Z"]  # a rate fires at its creation
    work_until(app, lambda: counted(app, key, "fires") == 1)
    # WHEN it is paused for an hour: the loop sends nothing
    app.schedules.pause("poll")
    clock.advance(3600)
    assert asyncio.run(tick()) == []
    # AND resumed: the five occurrences of the last 20 minutes are made, the seven before are counted
    view = app.schedules.resume("poll")
    assert view.missed == 7
    jobs = [job_of(key, start + 60 * m, None) for m in (40, 45, 50, 55, 60)]
    work_until(app, lambda: all(status_of(app, j) is JobStatus.SUCCEEDED for j in jobs))
    assert status_of(app, job_of(key, start + 60 * 35, None)) is None
    assert asyncio.run(tick()) == []  # the loop does not send them again
    # AND a loop restarted after an outage sends what it missed within the window, once each
    clock.advance(1800)
    restarted = LocalScheduler(app, clock=clock)

    async def restarted_tick():
        fires = await restarted.tick()
        await app.aclose()
        return [iso_utc(f.slot) for f in fires if f.schedule == key]

    assert asyncio.run(restarted_tick()) == [iso_utc(start + 60 * m) for m in (70, 75, 80, 85, 90)]
    assert app.schedules.describe("poll").missed == 7 + 1


def test_the_cli_makes_lists_pauses_and_deletes_runtime_schedules(ministack_url, monkeypatch):
    import json
    import uuid

    from typer.testing import CliRunner

    from sqsjobs.cli.main import cli

    suffix = uuid.uuid4().hex[:8]
    for key, value in {
        "SQSJOBS_QUEUE_PREFIX": f"rcli{suffix}",
        "SQSJOBS_TABLE": f"rcli{suffix}-jobs",
        "SQSJOBS_SCHEDULE_GROUP": f"rcli{suffix}-schedules",
        "SQSJOBS_RUNTIME_SCHEDULE_GROUP": f"rcli{suffix}-runtime",
        "SQSJOBS_SCHEDULER_ROLE_ARN": ROLE,
    }.items():
        monkeypatch.setenv(key, value)
    from tests.apps.scheduled import app

    app.configure(endpoint_url=ministack_url)
    app.provision()
    runner = CliRunner()
    args = ["--app", "tests.apps.scheduled:app", "--endpoint-url", ministack_url]
    made = runner.invoke(
        cli,
        [
            "schedules",
            "create",
            "sync",
            *args,
            "--job",
            "reports.build",
            "--cron",
            FAR,
            "--tenant",
            "acme",
            "--payload",
            '{"kind": "acme"}',
            "--overlap",
            "skip",
            "--json",
        ],
    )
    assert made.exit_code == 0, made.output
    assert json.loads(made.stdout)["overlap"] == "skip"
    paused = runner.invoke(cli, ["schedules", "pause", "sync", *args, "--tenant", "acme"])
    assert paused.exit_code == 0 and "paused" in paused.output, paused.output
    listed = runner.invoke(cli, ["schedules", "runtime", *args, "--tenant", "acme", "--json"])
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    assert [(r["tenant"], r["name"], r["state"]) for r in rows] == [("acme", "sync", "paused")]
    assert runner.invoke(cli, ["schedules", "runtime", *args, "--tenant", "other"]).output.strip() == (
        "no runtime schedules"
    )
    # apply of the declarations leaves it alone
    assert runner.invoke(cli, ["schedules", "apply", *args, "--yes"]).exit_code == 0
    assert runner.invoke(cli, ["schedules", "show", "sync", *args, "--tenant", "acme"]).exit_code == 0
    gone = runner.invoke(cli, ["schedules", "delete", "sync", *args, "--tenant", "acme"])
    assert gone.exit_code == 0 and "deleted" in gone.output
    missing = runner.invoke(cli, ["schedules", "show", "sync", *args, "--tenant", "acme"])
    assert missing.exit_code != 0 and "no runtime schedule" in missing.output
