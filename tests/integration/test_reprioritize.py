"""Moving waiting jobs to another priority level over HTTP, attacked from outside: real worker processes on MiniStack.

Evidence comes from the run log the handlers append to (tests/apps/routing.py), the raw SQS queues
and the records; never from inside a worker.
"""

from __future__ import annotations

import pytest

from sqsjobs import JobRequest, JobStatus
from sqsjobs.transport import routes
from tests.api.helpers import client, serving
from tests.apps import routing
from tests.integration.helpers import depth, worker_process
from tests.integration.test_routing import APP, ROUTED, ROUTED_ENV, read_log, starts, wait_until

pytestmark = pytest.mark.slow

TOKEN = "prio-token"


@pytest.fixture
def app(ministack_url, make_app):
    app = make_app(ministack_url, **ROUTED)
    app.registry.include(routing.app.registry)  # the handlers the worker processes load
    app.provision()
    return app


@pytest.fixture
def http(app):
    with serving(app, token=TOKEN) as url, client(url, TOKEN) as http:
        yield http


@pytest.fixture
def worker(app):
    procs = []

    def start(**env: str) -> None:
        procs.append(worker_process(app, APP, concurrency=1, queues="work", **ROUTED_ENV, **env))

    yield start
    for proc in procs:
        proc.kill()
        proc.wait(10)


def visible(app, level: str) -> int:
    return depth(app, routes.route("work", level))["visible"]


def test_jobs_moved_to_high_start_before_the_rest_and_each_runs_once(app, http, worker, tmp_path):
    # GIVEN ten normal jobs waiting, and no worker yet
    log = tmp_path / "runs.jsonl"
    ids = app.enqueue_many([JobRequest("work.run", {"label": f"n{i}", "log": str(log)}) for i in range(10)])
    late = ids[-3:]  # the last three enqueued: a worker would reach them last
    # WHEN the operator dry-runs moving the last three to high
    dry = http.post("/jobs/priority", json={"to": "high", "job_ids": late})
    assert dry.status_code == 200, dry.text
    # THEN the dry run lists them and changes nothing
    assert dry.json()["job_ids"] == late and dry.json()["dry_run"] is True
    assert all(app.get(i).priority is None for i in late) and visible(app, "high") == 0
    # WHEN the operator confirms exactly those ids
    done = http.post("/jobs/priority", json={"to": "high", "job_ids": late, "dry_run": False})
    assert done.status_code == 200, done.text
    # THEN the records and their messages are on the high level, with an audit entry each
    assert sorted(done.json()["moved"]) == sorted(late) == sorted(done.json()["messages_moved"])
    assert done.json()["left"] == [] and done.json()["skipped"] == {}
    for job_id in late:
        job = http.get(f"/jobs/{job_id}").json()
        [entry] = [e for e in job["audit"] if e.get("action") == "priority"]
        assert (entry["from"], entry["to"]) == ("normal", "high") and entry["by"].startswith("operator@")
        assert app.get(job_id).status is JobStatus.QUEUED
    assert visible(app, "high") == 3 and visible(app, "normal") == 7
    # ... and moving them again is a no-op the dry run says so
    again = http.post("/jobs/priority", json={"to": "high", "job_ids": late}).json()
    assert again["job_ids"] == [] and {c["reason"] for c in again["candidates"]} == {"already high"}
    # WHEN one worker with one slot starts
    worker(SQSJOBS_LOWER_PRIORITY_EVERY="1000")
    wait_until(lambda: len(read_log(log)) == 10, 90, "all ten runs")
    # THEN the three moved jobs are its first three starts
    labels = [r["label"] for r in starts(log)]
    assert sorted(labels[:3]) == ["n7", "n8", "n9"], labels
    # ... every job ran exactly once, and no message is left behind
    assert sorted(labels) == sorted(f"n{i}" for i in range(10))
    # (a finish may wait finish_linger_s for company after the handler's last line)
    wait_until(lambda: all(app.get(i).status is JobStatus.SUCCEEDED for i in ids), 10, "the ten finishes")
    wait_until(lambda: visible(app, "normal") == 0 and visible(app, "high") == 0, 30, "empty queues")


def test_a_move_by_type_and_tenant_moves_only_that_tenants_waiting_jobs(app, http):
    # GIVEN waiting jobs of two tenants
    acme = [app.enqueue("work.run", {"label": f"a{i}"}, tenant="acme") for i in range(3)]
    other = app.enqueue("work.run", {"label": "g"}, tenant="globex")
    # WHEN the operator dry-runs acme's jobs of the type to low, then confirms
    dry = http.post("/jobs/priority", json={"to": "low", "type": "work.run", "tenant": "acme"}).json()
    assert sorted(dry["job_ids"]) == sorted(acme) and dry["read"] >= 4
    done = http.post("/jobs/priority", json={"to": "low", "job_ids": dry["job_ids"], "dry_run": False}).json()
    # THEN acme's are low, with their messages, and globex's is untouched
    assert sorted(done["messages_moved"]) == sorted(acme)
    assert all(app.get(i).priority == "low" for i in acme) and app.get(other).priority is None
    assert visible(app, "low") == 3 and visible(app, "normal") == 1
