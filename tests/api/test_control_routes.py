"""Flow control over HTTP, attacked from outside: real worker processes of tests/apps/limited.py on
MiniStack, the served API, the workers' JSON log lines (one ``job deferred`` line per deferral) and
the records.

Pause stops the workers' starts and resume restarts them; a breaker held open for ten minutes is
closed by hand and a job of its limit then starts at once; every refusal is a problem body.
"""

from __future__ import annotations

import json
import time

import pytest

from sqsjobs import JobStatus
from sqsjobs.limits import plugin as limits_plugin_module
from sqsjobs.limits import records as limit_records
from sqsjobs.store.apply import apply
from tests.api.conftest import TOKEN
from tests.api.helpers import assert_problem, client, serving
from tests.apps import limited
from tests.integration.test_limits import Workers, finished, wait_until

pytestmark = pytest.mark.slow


@pytest.fixture
def api(ministack_url, make_app, tmp_path):
    app = make_app(ministack_url, lease_s=4.0, visibility_timeout_s=4)
    app.registry.include(limited.app.registry)  # the handlers the worker processes load
    app.limits.include(limited.app.limits)
    app.provision()
    fleet = Workers(app, tmp_path)
    with serving(app, token=TOKEN) as url, client(url, TOKEN) as http:
        yield app, http, fleet
    fleet.stop()


def deferred(fleet: Workers, reason: str) -> set[str]:
    return {e["job_id"] for e in fleet.events("job deferred") if e.get("reason") == reason}


def test_pausing_a_type_over_http_stops_its_starts_and_resuming_restarts_them(api, tmp_path):
    app, http, fleet = api
    log = tmp_path / "runs.log"
    # GIVEN the type paused over HTTP, with a reason
    paused = http.post("/types/report/pause", json={"reason": "db migration"})
    assert paused.status_code == 200, paused.text
    assert paused.json() == {"type": "report", "paused": True, "was_paused": None}
    assert http.get("/limits").json()["paused"]["report"]["reason"] == "db migration"
    # WHEN jobs of it are enqueued and a worker process runs
    ids = app.enqueue_many([{"type": "report", "payload": {"log": str(log)}} for _ in range(3)])
    fleet.start(1, concurrency=4)
    wait_until(lambda: set(ids) <= deferred(fleet, "paused"), 30, "each job deferred as paused")
    # THEN none started: queued, attempts untouched, the handler never ran
    assert all(app.get(i, load_result=False).status is JobStatus.QUEUED for i in ids)
    assert all(app.get(i, load_result=False).attempt == 0 for i in ids)
    assert not log.exists()
    # WHEN resumed over HTTP: every one runs, once
    resumed = http.post("/types/report/resume")
    assert resumed.json() == {"type": "report", "paused": False, "was_paused": True}
    assert http.get("/limits").json()["paused"] == {}
    wait_until(lambda: finished(app, ids), 60, "the reports after resume")
    assert all(app.get(i, load_result=False).status is JobStatus.SUCCEEDED for i in ids)
    assert len(log.read_text().splitlines()) == 3
    # ... and resuming again says it was not paused
    assert http.post("/types/report/resume").json()["was_paused"] is False


def test_a_breaker_closed_by_hand_lets_its_jobs_start_before_the_cooldown_ends(api, tmp_path):
    app, http, fleet = api
    table, log, mode = app.settings.table_name, tmp_path / "runs.log", tmp_path / "mode"
    mode.write_text("ok")
    # GIVEN the crm breaker open for ten minutes, and a job of it deferred by a worker process
    app.run(
        apply(
            limit_records.open_breaker(
                table, limit_records.breaker_id("crm"), version=0, now=time.time(), cooldown_s=600
            )
        )
    )
    crm = {lim["name"]: lim for lim in http.get("/limits").json()["limits"]}["crm"]
    assert crm["breaker"] == "open" and crm["breaker_until"] > time.time() + 500
    first = app.enqueue("crm.call", {"log": str(log), "mode": str(mode)})
    fleet.start(1, concurrency=2)
    wait_until(lambda: first in deferred(fleet, "breaker"), 30, "the job deferred by the breaker")
    # WHEN the operator closes it over HTTP
    closed = http.post("/limits/crm/breaker/close")
    assert closed.status_code == 200, closed.text
    assert closed.json() == {"limit": "crm", "breaker": "closed", "was": "open"}
    # THEN the limits say closed, and a new job of the limit starts at once, on its first attempt
    crm = {lim["name"]: lim for lim in http.get("/limits").json()["limits"]}["crm"]
    assert crm["breaker"] == "closed" and crm["breaker_until"] is None
    # A worker serves limit items from a cache of CACHE_S: it sees the close within that, by design.
    time.sleep(limits_plugin_module.CACHE_S * 1.5)
    second = app.enqueue("crm.call", {"log": str(log), "mode": str(mode)})
    wait_until(lambda: finished(app, [second]), 30, "a job of the closed breaker")
    job = app.get(second, load_result=False)
    assert (job.status, job.attempt) == (JobStatus.SUCCEEDED, 1)
    assert second not in deferred(fleet, "breaker")
    # ... and closing it again is refused: nothing to close
    again = assert_problem(http.post("/limits/crm/breaker/close"), 409, "name")
    assert again["type"].endswith(":invalid-state") and "already closed" in again["detail"]


def test_flow_control_refusals_are_problems_naming_what_to_fix(api):
    _, http, _ = api
    # a type its workers never check for a pause
    plain = assert_problem(http.post("/types/plain/pause"), 422, "job_type")
    assert plain["type"].endswith(":not-pausable") and "pausable=True" in plain["detail"]
    assert_problem(http.post("/types/plain/resume"), 422, "job_type")
    # a type the App does not register
    unknown = assert_problem(http.post("/types/nope/pause", json={}), 422, "type")
    assert unknown["type"].endswith(":unknown-job-type")
    # a limit that is not declared, or has no breaker
    for name in ("nope", "pair"):
        missing = assert_problem(http.post(f"/limits/{name}/breaker/close"), 404, "name")
        assert missing["type"].endswith(":limit-not-found")
    # malformed bodies
    assert_problem(http.post("/types/report/pause", json={"reason": 5}), 422, "reason")
    assert_problem(http.post("/types/report/pause", json={"why": "x"}), 422, "why")
    assert_problem(http.post("/types/report/pause", json={"reason": "x" * 501}), 422, "reason")
    assert_problem(
        http.post("/types/report/pause", content=b"{", headers={"content-type": "application/json"}),
        400,
        "body",
    )
    assert_problem(http.get("/limits", params={"key": ["k"] * 21}), 422, "key")
    # nothing was paused by any of them
    assert http.get("/limits").json()["paused"] == {}


def test_each_change_writes_one_audit_line_naming_who_and_a_refusal_writes_none(
    ministack_url, make_app, monkeypatch, capfd
):
    # GIVEN an App logging at INFO (its JSON logger writes to stderr, captured at the descriptor)
    monkeypatch.setenv("SQSJOBS_LOG_LEVEL", "INFO")
    app = make_app(ministack_url)
    app.registry.include(limited.app.registry)
    app.limits.include(limited.app.limits)
    app.provision()
    with serving(app, token=TOKEN) as url, client(url, TOKEN) as http:
        capfd.readouterr()
        # WHEN a type is paused, a non-pausable one refused, and the type resumed
        assert http.post("/types/report/pause", json={"reason": "maintenance"}).status_code == 200
        assert http.post("/types/plain/pause").status_code == 422
        assert http.post("/types/report/resume").json()["was_paused"] is True
        err = capfd.readouterr().err
    # THEN two audit lines, in order, each with the action, the target and who asked
    lines = [json.loads(line) for line in err.splitlines() if '"operator action"' in line]
    assert [(e["action"], e["job_type"]) for e in lines] == [("pause", "report"), ("resume", "report")]
    assert all(e["by"] == "operator@127.0.0.1" and e["route"].startswith("/types/report/") for e in lines)
    assert lines[0]["reason"] == "maintenance"
