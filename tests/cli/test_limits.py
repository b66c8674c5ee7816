"""``sqsjobs pause``, ``resume`` and ``limits``, and the flow-control part of ``stats`` (MiniStack).

The slots and the breaker are written as the gate writes them (``sqsjobs.limits.records``): the CLI
must show what the table holds, whoever wrote it.
"""

from __future__ import annotations

import uuid

from sqsjobs import App, Breaker
from sqsjobs.limits import records as limit_records
from sqsjobs.store.apply import apply
from sqsjobs.store.write import Put, Write
from tests.cli.conftest import invoke
from tests.conftest import FAST


def _app(endpoint: str) -> App:
    app = App(f"l{uuid.uuid4().hex[:10]}", endpoint_url=endpoint, **FAST)
    # A minute's window: the logged start is still "recent" however slowly a loaded machine gets to ask.
    app.limit("stripe", concurrency=3, rate="600/min")
    app.limit("per-tenant", concurrency=2, key="tenant")
    app.limit("crm", breaker=Breaker(failures=2, window_s=60, cooldown_s=30))
    app.job("payments.charge", limits=["stripe", "per-tenant"])(lambda payload, ctx: None)
    app.job("crm.sync", limits=["crm"])(lambda payload, ctx: None)
    app.job("reports.build", pausable=True)(lambda payload, ctx: None)
    app.job("plain")(lambda payload, ctx: None)
    app.provision()
    return app


def _write(app: App, write: Write | Put) -> None:
    app.run(apply(write))


def test_pause_and_resume_show_in_limits_and_stats(ministack_url):
    app = _app(ministack_url)
    # WHEN a type is paused from the shell
    run = invoke(app, ministack_url, "pause", "reports.build", "--reason", "db migration")
    assert run.code == 0, run.err
    assert "paused reports.build (db migration)" in run.out
    # THEN `limits` and `stats` list it with its reason
    state = invoke(app, ministack_url, "limits", "--json").json
    assert state["paused"]["reports.build"]["reason"] == "db migration"
    stats = invoke(app, ministack_url, "stats", "--json").json
    assert list(stats["flow_control"]["paused"]) == ["reports.build"]
    assert "reports.build" in invoke(app, ministack_url, "stats").out
    # WHEN resumed: no longer listed; resuming again says it was not paused
    assert invoke(app, ministack_url, "resume", "reports.build").out.strip() == "resumed reports.build"
    assert invoke(app, ministack_url, "limits", "--json").json["paused"] == {}
    assert "was not paused" in invoke(app, ministack_url, "resume", "reports.build").out


def test_pausing_a_type_its_workers_never_check_is_refused_with_what_to_do(ministack_url):
    app = _app(ministack_url)
    run = invoke(app, ministack_url, "pause", "plain")
    assert run.code == 1
    assert "not pausable" in run.err and "pausable=True" in run.err
    unknown = invoke(app, ministack_url, "pause", "nope")
    assert unknown.code == 2 and "no handler registered" in unknown.err


def test_limits_shows_running_slots_rate_breaker_and_waiting_jobs(ministack_url):
    app = _app(ministack_url)
    table, now = app.settings.table_name, app.clock.now()
    # GIVEN two live stripe slots and one expired (its worker died), a tenant slot, a logged start,
    # an open breaker, and three charges waiting
    for n, until in ((0, 60), (1, 60), (2, -5)):
        _write(
            app,
            limit_records.take_slot(
                table,
                limit_records.slot_id("stripe", n, None),
                job_id=f"j{n}",
                token="t",
                now=now - 1,
                lease_s=until + 1,
            ),
        )
    _write(
        app,
        limit_records.take_slot(
            table, limit_records.slot_id("per-tenant", 0, "acme"), job_id="j9", token="t", now=now, lease_s=60
        ),
    )
    _write(
        app,
        limit_records.record_start(
            table, limit_records.rate_id("stripe", 0), starts=[], version=0, now=now, allowed=600, wid="w"
        ),
    )
    _write(
        app,
        limit_records.open_breaker(table, limit_records.breaker_id("crm"), version=0, now=now, cooldown_s=30),
    )
    app.enqueue_many([{"type": "payments.charge", "payload": {}} for _ in range(3)])
    # WHEN the operator asks
    state = {
        lim["name"]: lim
        for lim in invoke(app, ministack_url, "limits", "--json", "--key", "acme").json["limits"]
    }
    # THEN each limit shows what the table holds
    assert state["stripe"]["running"] == 2  # the expired slot is free
    assert state["stripe"]["recent_starts"] == 1 and state["stripe"]["rate"] == "600/min"
    assert state["stripe"]["waiting"] == 3 and state["per-tenant"]["waiting"] == 3
    assert state["per-tenant"]["running_by_key"] == {"acme": 1}
    assert state["crm"]["breaker"] == "open" and state["crm"]["waiting"] == 0
    table_out = invoke(app, ministack_url, "limits").out
    assert "2/3" in table_out and "open until" in table_out and "per tenant" in table_out
