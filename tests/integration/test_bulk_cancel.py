"""Bulk cancel (``sqsjobs jobs cancel --type T``), attacked from outside: the CLI as a process on MiniStack.

The CLI is killed with ``kill -9`` half-way and resumed: no job is cancelled twice (each record's
audit list shows one entry of the operation), none is missed, and the counts add up. Jobs of other
types, tenants and statuses — a running one included, run by a real worker process — are untouched.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from sqsjobs import JobStatus
from sqsjobs._aws import Call, one
from sqsjobs.envelope import Envelope
from sqsjobs.errors import StoreError
from sqsjobs.ops.bulk_cancel import BulkCancel, bulk_cancel_flow
from sqsjobs.store import runs
from sqsjobs.store.operator import audit_entries
from tests.apps import expiring
from tests.integration.helpers import wait_until, worker_env

pytestmark = pytest.mark.slow

APP = "tests.apps.expiring:app"
MATCHING = 30


@pytest.fixture
def app(ministack_url, make_app):
    app = make_app(ministack_url, lease_s=3.0, visibility_timeout_s=2)
    app.registry.include(expiring.app.registry)
    app.provision(["default", "other"])
    return app


@pytest.fixture
def population(app, tmp_path):
    """30 queued ``reports.free`` jobs of tenant acme, and around them what must stay as it is."""
    worker = subprocess.Popen(
        [sys.executable, "-m", "sqsjobs", "worker", "--app", APP, "--queues", "other", "--concurrency", "2"],
        env=worker_env(app),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    runs = str(tmp_path)
    done = app.enqueue("reports.free", {"runs_dir": runs}, tenant="acme", queue="other")
    wait_until(lambda: app.get(done).status is JobStatus.SUCCEEDED, 30, "a finished job")
    running = app.enqueue("reports.free", {"runs_dir": runs, "sleep_s": 120}, tenant="acme", queue="other")
    wait_until(lambda: app.get(running).status is JobStatus.RUNNING, 30, "a running job")
    matching = [
        app.enqueue("reports.free", {"runs_dir": runs, "i": i}, tenant="acme") for i in range(MATCHING)
    ]
    others = [app.enqueue("reports.free", {"runs_dir": runs}, tenant="globex") for _ in range(3)]
    others += [
        app.enqueue("reports.build", {"runs_dir": runs}, tenant="acme", expires_after=600) for _ in range(3)
    ]
    yield {"matching": matching, "others": others, "running": running, "done": done}
    worker.kill()
    worker.wait(10)


def cli(app, *args: str, **popen) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "sqsjobs", "jobs", "cancel", "--app", APP, *args],
        env=worker_env(app),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        **popen,
    )


def run_cli(app, *args: str) -> dict:
    proc = cli(app, *args, "--json")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    return json.loads(out)


def statuses(app, ids) -> list[JobStatus]:
    return [app.get(i).status for i in ids]


def bulk_entries(app, job_id: str) -> list[dict]:
    return [e for e in audit_entries(app.get(job_id)) if e.get("action") == "bulk_cancel"]


def untouched(app, population) -> None:
    assert set(statuses(app, population["others"])) == {JobStatus.QUEUED}
    assert app.get(population["running"]).status is JobStatus.RUNNING
    assert app.get(population["done"]).status is JobStatus.SUCCEEDED


def test_a_dry_run_counts_the_matching_jobs_and_changes_nothing(app, population):
    report = run_cli(app, "--type", "reports.free", "--tenant", "acme", "--dry-run")
    assert (report["matched"], report["cancelled"], report["done"]) == (MATCHING, MATCHING, True)
    assert set(statuses(app, population["matching"])) == {JobStatus.QUEUED}
    untouched(app, population)
    # not even the operation's control item was written
    items = app.run(one(Call("dynamodb", "scan", {"TableName": app.settings.table_name})))["Items"]
    assert not [i for i in items if i["id"]["S"].startswith("op#")]


def test_killed_half_way_and_resumed_it_cancels_exactly_the_matching_jobs_once(app, population):
    # GIVEN a bulk cancel paced at 3 cancels/s, 8 items read per page (a checkpoint after each): the
    # 30 take 10 s, so the kill lands mid-run even when one poll of the 30 records takes seconds
    proc = cli(app, "--type", "reports.free", "--tenant", "acme", "--rate", "3", "--page-size", "8")
    first = proc.stdout.readline().split()
    assert first[0] == "operation", first
    op_id = first[1]
    # WHEN it is killed with SIGKILL once some jobs are cancelled, mid-run
    wait_until(
        lambda: statuses(app, population["matching"]).count(JobStatus.CANCELLED) >= 8, 60, "8 cancelled"
    )
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(10)
    proc.stdout.close()
    proc.stderr.close()
    killed_at = statuses(app, population["matching"]).count(JobStatus.CANCELLED)
    assert killed_at < MATCHING, "killed too late to prove anything"
    # AND resumed
    report = run_cli(app, "--resume", op_id)
    # THEN every matching job is cancelled, each once, by this operation; the counts add up
    assert set(statuses(app, population["matching"])) == {JobStatus.CANCELLED}
    for job_id in population["matching"]:
        entries = bulk_entries(app, job_id)
        assert len(entries) == 1 and entries[0]["op"] == op_id and entries[0]["by"], entries
    assert report == {
        **report,
        "op_id": op_id,
        "matched": MATCHING,
        "cancelled": MATCHING,
        "skipped": {},
        "done": True,
    }
    untouched(app, population)
    # AND resuming a finished operation does nothing more
    assert run_cli(app, "--resume", op_id)["cancelled"] == MATCHING


def test_a_job_that_starts_between_the_scan_and_its_cancel_is_skipped_as_running(app, population):
    # GIVEN the operation's flow, driven request by request over HTTP
    flow = bulk_cancel_flow(
        app.settings, app.registry, BulkCancel("reports.free", tenant="acme", page_size=100), app.clock
    )
    started = None
    call, answer, report = next(flow), None, None
    while report is None:
        if (
            call.operation == "update_item"
            and started is None
            and "cancel_op" in call.params["UpdateExpression"]
        ):
            # WHEN a worker claims that job after the Scan saw it queued, before its cancel lands
            started = call.params["Key"]["id"]["S"]
            claim = runs.claim(
                app.settings.table_name,
                Envelope(started, "reports.free"),
                owner="w",
                token="t",
                message_id="m",
                now=time.time(),
                lease_s=60,
                max_attempts=3,
            )
            app.run(one(Call("dynamodb", "update_item", claim.update_item())))
        try:
            answer = app.run(one(call))
        except StoreError as exc:
            try:
                call = flow.throw(exc)
            except StopIteration as stop:
                report = stop.value
            continue
        try:
            call = flow.send(answer)
        except StopIteration as stop:
            report = stop.value
    # THEN it is skipped (not sent a cancel request), the others are cancelled
    assert (
        report.skipped == {"running": 1} and report.cancelled == MATCHING - 1 and report.matched == MATCHING
    )
    job = app.get(started)
    assert job.status is JobStatus.RUNNING and not job.cancel_requested and bulk_entries(app, started) == []
    untouched(app, population)
