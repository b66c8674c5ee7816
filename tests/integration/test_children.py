"""Children awaited durably, attacked from outside (MiniStack): real worker processes, kill -9, a sweeper.

Evidence comes from outside the workers: every child and parent run appends lines to a run log
(tests/apps/parents.py) with its process and times, and the records are read over HTTP.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter, defaultdict

import pytest

from sqsjobs import JobStatus
from sqsjobs.children import records as child_records
from tests.apps import parents as tp
from tests.integration import helpers
from tests.integration.helpers import kill_group, worker_env, worker_process

pytestmark = pytest.mark.slow

APP = "tests.apps.parents:app"


@pytest.fixture
def runs(tmp_path, monkeypatch):
    monkeypatch.setenv("TEST_RUNS_DIR", str(tmp_path))
    return tmp_path


@pytest.fixture
def app(ministack_url, make_app, runs):
    app = make_app(ministack_url, lease_s=3.0, visibility_timeout_s=2, stale_after_s=2.0)
    app.registry.include(tp.app.registry)
    app.provision()
    return app


def start_worker(app, runs, *, concurrency: int = 4, **env: str) -> subprocess.Popen[bytes]:
    return worker_process(
        app, APP, concurrency=concurrency, TEST_RUNS_DIR=str(runs), SQSJOBS_STALE_AFTER_S="2", **env
    )


def sweeper_process(app, runs) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "sqsjobs", "sweep", "--app", APP],
        env=worker_env(app, SQSJOBS_SWEEP_INTERVAL_S="1", SQSJOBS_STALE_AFTER_S="2", TEST_RUNS_DIR=str(runs)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def wait_until(condition, timeout_s: float, what: str) -> float:
    return helpers.wait_until(condition, timeout_s, what, every_s=0.2)


def edges(runs, name: str, edge: str) -> list[dict]:
    return [line for line in tp.read(runs, name) if line["edge"] == edge]


def asleep(runs, app, parent_id: str) -> bool:
    return any(o.get("asleep") for o in edges(runs, "parents", "out")) and app.get(parent_id).status is (
        JobStatus.QUEUED
    )


def test_a_parent_awaits_its_children_and_gets_their_results_in_order(app, runs):
    # GIVEN a parent mapping 5 squares, then shouting two words together, and one worker
    parent = app.enqueue("parent", {"count": 5, "words": ["a", "b"]})
    worker = start_worker(app, runs)
    try:
        wait_until(lambda: app.get(parent).status.terminal, 60, "the parent's end")
    finally:
        kill_group(worker)
    job = app.get(parent)
    assert (job.status, job.result) == (
        JobStatus.SUCCEEDED,
        {"squares": [0, 1, 4, 9, 16], "words": ["A", "B"]},
    )
    # THEN it ran three times (start, woken by the map, woken by the pair), its step once, no attempt used
    assert len(edges(runs, "parents", "in")) == 3
    assert len(tp.read(runs, "before")) == 1
    assert job.attempt == 1


def killed_and_restarted(app, runs, victim, at_children: int, kills: list[tuple[int, float]]):
    """SIGKILL ``victim`` once ``at_children`` children have started, note it, and start it again."""
    wait_until(
        lambda: len(edges(runs, "children", "in")) >= at_children, 60, f"{at_children} children started"
    )
    kills.append((victim.pid, time.time()))
    kill_group(victim)
    return start_worker(app, runs)


def test_a_map_of_200_children_survives_three_kills_and_wakes_its_parent_once_with_results_in_order(
    app, runs
):
    # GIVEN two workers, a sweeper, and a parent mapping 200 squares of 0.25 s each
    sweeper = sweeper_process(app, runs)
    victim, other = start_worker(app, runs), start_worker(app, runs)
    parent = app.enqueue("parent", {"count": 200, "sleep_s": 0.25})
    kills: list[tuple[int, float]] = []
    try:
        wait_until(lambda: asleep(runs, app, parent), 60, "the parent asleep on its children")
        # WHEN one worker is SIGKILLed three times while the children run (and started again)
        for at in (60, 110, 160):
            victim = killed_and_restarted(app, runs, victim, at, kills)
        wait_until(lambda: app.get(parent).status.terminal, 120, "the parent's end")
    finally:
        kill_group(victim, other, sweeper)

    # THEN the results are in order, the parent's step before the map ran once and no attempt was used
    job = app.get(parent)
    assert job.status is JobStatus.SUCCEEDED, job.last_error
    assert job.result == {"squares": [n * n for n in range(200)], "words": []}
    assert job.attempt == 1
    assert len(tp.read(runs, "before")) == 1
    # AND the parent ran twice: its first run (plain code before the map runs in every run) and once
    # woken, after the last child ended
    ins, outs = edges(runs, "parents", "in"), edges(runs, "parents", "out")
    assert len(ins) == 2 and len(outs) == 2, (ins, outs)
    slept, woke = outs[0], ins[1]
    assert outs[0].get("asleep") and outs[1].get("returned")
    child_ins, child_outs = edges(runs, "children", "in"), edges(runs, "children", "out")
    assert woke["at"] >= max(c["at"] for c in child_outs)
    # AND no parent handler ran while the children did: between its sleep and its wake none was
    # running, and most children ran in that window
    assert sum(1 for c in child_ins if slept["at"] < c["at"] < woke["at"]) >= 100
    # AND every child ran once, but a run its worker's SIGKILL cut short (run again after its lease)
    killed = dict(kills)
    runs_of: dict[int, list[dict]] = defaultdict(list)
    for c in child_ins:
        runs_of[c["n"]].append(c)
    assert sorted(runs_of) == list(range(200))
    for n, started in runs_of.items():
        for cut in started[:-1]:
            assert cut["pid"] in killed and cut["at"] < killed[cut["pid"]], (n, started)
    assert Counter(c["n"] for c in child_outs).keys() == set(range(200))
    assert len(kills) == 3 and sum(len(s) - 1 for s in runs_of.values()) <= 3 * 4


def batch_of(parent_id: str, n: int = 1) -> str:
    """The batch of the parent's ``n``-th token's await (its first await takes token 1)."""
    from sqsjobs.batches.records import new_batch_id

    return new_batch_id(child_records.batch_dedupe_key(f"{parent_id}.t{n}"))


def test_a_dead_child_fails_its_parent_with_its_reason_and_the_return_policy_returns_each_outcome(app, runs):
    # GIVEN a parent whose third child fails (raise: the default), and one that returns outcomes
    raising = app.enqueue("parent", {"count": 12, "sleep_s": 0.3, "fail": [2]})
    returning = app.enqueue("parent", {"count": 6, "fail": [4], "on_failure": "return"})
    worker = start_worker(app, runs, concurrency=2, SQSJOBS_HELD_AHEAD="0")
    try:
        wait_until(
            lambda: app.get(raising).status.terminal and app.get(returning).status.terminal, 60, "ends"
        )
        wait_until(lambda: app.batches.get(batch_of(raising)).complete, 30, "the batch's end")
    finally:
        kill_group(worker)
    # THEN the raising parent died at once with the child's reason, and its children not started were cancelled
    job = app.get(raising)
    assert job.status is JobStatus.DEAD and job.last_error is not None
    assert job.last_error.error_class == "ChildrenFailed"
    assert "child 2 told to fail" in job.last_error.message
    ran = {c["job"] for c in edges(runs, "children", "in")}
    ids = [child_records.child_id(batch_of(raising), n, "square", None) for n in range(12)]
    statuses = [app.get(i).status for i in ids]
    assert statuses[2] is JobStatus.DEAD
    cancelled = {i for i, s in zip(ids, statuses, strict=True) if s is JobStatus.CANCELLED}
    assert cancelled and not cancelled & ran
    # AND the returning parent got each outcome, in order
    got = app.get(returning).result
    assert got[4] == ["dead", None, "PermanentError: child 4 told to fail"]
    assert [g[:2] for i, g in enumerate(got) if i != 4] == [["succeeded", n * n] for n in (0, 1, 2, 3, 5)]


def test_cancelling_a_waiting_parent_cancels_its_children_not_yet_run(app, runs):
    # GIVEN a parent asleep on 30 children of 1 s, a worker running two at a time
    parent = app.enqueue("parent", {"count": 30, "sleep_s": 1.0})
    worker = start_worker(app, runs, concurrency=2, SQSJOBS_HELD_AHEAD="0")
    try:
        wait_until(lambda: asleep(runs, app, parent), 60, "the parent asleep")
        wait_until(lambda: len(edges(runs, "children", "in")) >= 2, 30, "children running")
        # WHEN the parent is cancelled
        assert app.cancel(parent) == "cancelled"
        batch = batch_of(parent)
        wait_until(lambda: app.batches.get(batch).complete, 30, "the children's batch cancelled")
        ids = [child_records.child_id(batch, n, "square", None) for n in range(30)]
        wait_until(lambda: all(app.get(i).status.terminal for i in ids), 30, "every child's end")
        time.sleep(1.5)  # the batch's wake job has run: the cancelled parent does not run again
    finally:
        kill_group(worker)
    # THEN the children not started were cancelled and never ran; the parent stayed cancelled
    status = app.batches.get(batch)
    assert status.failed and status.reason == f"parent job {parent} was cancelled"
    ran = {c["job"] for c in edges(runs, "children", "in")}
    cancelled = [i for i in ids if app.get(i).status is JobStatus.CANCELLED]
    assert len(cancelled) >= 20 and not set(cancelled) & ran
    assert app.get(parent).status is JobStatus.CANCELLED
    assert len(edges(runs, "parents", "in")) == 1


def test_on_the_lambda_adapter_a_parent_awaits_its_children_without_holding_an_invocation(app, runs):
    # GIVEN a parent mapping 6 squares, then shouting a word, run only by the Lambda adapter: each
    # batch of received messages is one invocation, as the event source mapping makes them
    from sqsjobs.runtime.lambda_sqs import LambdaWorker
    from tests.integration.lambda_events import FakeContext, event_from

    parent = app.enqueue("parent", {"count": 6, "words": ["hi"]})
    url = helpers.queue_url(app)
    adapter = LambdaWorker(app)
    invocations: list[tuple[float, float, int]] = []
    try:
        deadline = time.monotonic() + 90
        while not app.get(parent).status.terminal:
            assert time.monotonic() < deadline, "the parent did not end"
            got = helpers.sqs_call(
                app,
                "receive_message",
                QueueUrl=url,
                MaxNumberOfMessages=10,
                WaitTimeSeconds=1,
                MessageSystemAttributeNames=["All"],
                MessageAttributeNames=["All"],
            ).get("Messages", [])
            if got:
                began = time.time()
                adapter(event_from(app, got), FakeContext(start_ms=900_000))  # a 15-minute function
                invocations.append((began, time.time(), len(got)))
    finally:
        adapter.close()

    # THEN the results come back in order, the parent's step ran once, and no attempt was used
    job = app.get(parent)
    assert (job.status, job.result) == (
        JobStatus.SUCCEEDED,
        {"squares": [0, 1, 4, 9, 16, 25], "words": ["HI"]},
    )
    assert len(tp.read(runs, "before")) == 1 and job.attempt == 1
    # ... every run of the parent left its invocation before the children it waited for started:
    # the invocation that asked for them had ended (nothing held while they ran)
    parent_outs = [e["at"] for e in tp.read(runs, "parents") if e["edge"] == "out" and e.get("asleep")]
    first_child = min(e["at"] for e in edges(runs, "children", "in"))
    assert parent_outs and parent_outs[0] < first_child
    asked = next(i for i in invocations if i[0] <= parent_outs[0] <= i[1])
    assert asked[1] <= first_child  # that invocation had returned when the first child started
    assert len(edges(runs, "children", "in")) == 6  # each child ran once
