"""Batches and trees, attacked from outside (MiniStack): real worker processes, copied messages, kill -9.

Evidence comes from outside the workers: every item run and every completion callback appends a line
to a run log (tests/apps/batches.py), and the records and counter shards are read over HTTP. The
sweeper runs only where a test says so: completion must not wait for it except after a crash.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections import Counter

import pytest

from sqsjobs import BatchSealed, IdempotencyConflict, JobStatus
from sqsjobs.batches import completion
from sqsjobs.batches import records as batch_records
from sqsjobs.batches.namespace import env_of
from sqsjobs.testing import work_until
from tests.apps import batches as tb
from tests.integration import helpers
from tests.integration.helpers import copy_messages, depth, kill_group, worker_env, worker_process

pytestmark = pytest.mark.slow

APP = "tests.apps.batches:app"


@pytest.fixture
def runs(tmp_path, monkeypatch):
    monkeypatch.setenv("TEST_RUNS_DIR", str(tmp_path))
    return tmp_path


@pytest.fixture
def app(ministack_url, make_app, runs):
    app = make_app(ministack_url, lease_s=3.0, visibility_timeout_s=2, stale_after_s=2.0)
    app.registry.include(tb.app.registry)  # the handlers the worker processes load
    app.provision()
    return app


def start_worker(app, runs, *, concurrency: int = 4, **env: str) -> subprocess.Popen[bytes]:
    return worker_process(
        app, APP, concurrency=concurrency, TEST_RUNS_DIR=str(runs), SQSJOBS_STALE_AFTER_S="2", **env
    )


stop = kill_group


def wait_until(condition, timeout_s: float, what: str) -> float:
    """The shared poll, less often: these conditions read many records."""
    return helpers.wait_until(condition, timeout_s, what, every_s=0.2)


def callbacks(runs, batch_id: str | None = None) -> list[dict]:
    return [c for c in tb.read(runs, "callbacks") if batch_id is None or c["batch"] == batch_id]


def item_runs(runs) -> Counter[str]:
    return Counter(r["job"] for r in tb.read(runs, "runs"))


def shards(app, batch_id: str) -> batch_records.Counts:
    record = app.run(completion.read_record_flow(env_of(app.kernel), batch_id))
    return batch_records.read_counts(app.run(completion.read_shards_flow(env_of(app.kernel), record)))


def drained_queue(app) -> bool:
    d = depth(app)
    return d["visible"] + d["in_flight"] + d["delayed"] == 0


# ── exactly once, counted once ───────────────────────────────────────────────────────────────
def test_counts_are_exact_and_the_callback_runs_once_when_every_item_message_is_delivered_twice(app, runs):
    # GIVEN a sealed batch of 20 items, and a copy of each item's message sent straight into the queue
    b = app.batches.create("report")
    ids = [b.add("calc", {"n": n, "sleep_s": 0.2}) for n in range(20)]
    b.seal()
    copy_messages(app, len(ids), copies=1)

    # WHEN two worker processes drain the 40 item messages (and the callback's)
    procs = [start_worker(app, runs, concurrency=8), start_worker(app, runs, concurrency=8)]
    try:
        wait_until(lambda: len(callbacks(runs, b.id)) == 1, 60, "the callback ran")
        wait_until(lambda: drained_queue(app), 60, "every copy handled")
    finally:
        stop(*procs)

    # THEN each item ran once and counted once, and the callback ran once with the exact counts
    assert item_runs(runs) == dict.fromkeys(ids, 1)
    status = app.batches.get(b.id)
    assert status.complete and not status.failed
    assert status.counts == {"pending": 0, "succeeded": 20, "failed": 0}
    assert shards(app, b.id) == batch_records.Counts(added=20, succeeded=20, failed=0, sealed=True)
    (callback,) = callbacks(runs, b.id)
    assert callback["payload"]["counts"] == {"pending": 0, "succeeded": 20, "failed": 0}
    assert callback["job"] == status.callback_id


def test_a_worker_killed_between_the_last_finish_and_the_completion_check_is_repaired_by_the_sweeper(
    app, runs
):
    # GIVEN a sealed batch whose one item is run by a worker that dies right after the item's finish
    b = app.batches.create("report")
    item = b.add("calc", {"n": 1})
    b.seal()
    victim = start_worker(app, runs, TEST_DIE_AFTER_FINISH="1")
    try:
        wait_until(lambda: victim.poll() is not None, 30, "the worker died after the finish")
    finally:
        stop(victim)
    # THEN the finish and its count landed together, and nothing completed the batch
    assert app.get(item).status is JobStatus.SUCCEEDED
    status = app.batches.get(b.id)
    assert status.status == "sealed" and status.counts == {"pending": 0, "succeeded": 1, "failed": 0}
    # AND a worker alone does not complete it (the item is finished: no message will bring it back)
    worker = start_worker(app, runs)
    try:
        time.sleep(4)
        assert app.batches.get(b.id).status == "sealed" and callbacks(runs) == []
        # WHEN the sweeper runs once the batch's repair entry is due (stale_after_s = 2)
        sweep = [sys.executable, "-m", "sqsjobs", "sweep", "--once", "--app", APP]
        subprocess.run(sweep, env=worker_env(app, TEST_RUNS_DIR=str(runs)), check=True, capture_output=True)
        # THEN it completes the batch, and the callback runs once
        assert app.batches.get(b.id).complete
        wait_until(lambda: len(callbacks(runs, b.id)) == 1, 30, "the callback ran")
    finally:
        stop(worker)
    assert len(callbacks(runs, b.id)) == 1


def test_a_batch_sealed_while_its_last_item_finishes_completes_exactly_once(app, runs):
    # GIVEN a worker, and eight batches of one 0.5 s item each, started together
    worker = start_worker(app, runs, concurrency=8)
    try:
        handles = [app.batches.create("report") for _ in range(8)]
        for h in handles:
            h.add("calc", {"n": 1, "sleep_s": 0.5})
        # WHEN each is sealed at a different moment around its item's finish (before, during, after)
        wait_until(lambda: len(tb.read(runs, "runs")) >= 4, 30, "items started")
        for h in handles:
            h.seal()
            time.sleep(0.12)
        wait_until(lambda: len(callbacks(runs)) >= 8, 60, "every callback ran")
        wait_until(lambda: drained_queue(app), 30, "queue drained")
    finally:
        stop(worker)
    # THEN each batch completed once: one callback each
    assert Counter(c["batch"] for c in callbacks(runs)) == {h.id: 1 for h in handles}
    assert all(app.batches.get(h.id).counts == {"pending": 0, "succeeded": 1, "failed": 0} for h in handles)


def test_two_workers_finishing_the_last_two_items_at_once_produce_one_callback(app, runs):
    # GIVEN two workers that each run one job at a time and claim none ahead of a free slot (with
    # one held ahead, one worker could take both items of a pair in one receive, every time)
    procs = [
        start_worker(app, runs, concurrency=1, SQSJOBS_HELD_AHEAD="0"),
        start_worker(app, runs, concurrency=1, SQSJOBS_HELD_AHEAD="0"),
    ]
    try:
        wait_until(lambda: drained_queue(app), 10, "idle")
        time.sleep(2)  # both long-polling
        spread = []
        for _ in range(4):
            # WHEN a sealed batch's two items run at the same moment, one on each worker
            b = app.batches.create("report")
            pair = [b.add("calc", {"n": k, "sleep_s": 0.3}) for k in range(2)]
            b.seal()
            wait_until(lambda b=b: len(callbacks(runs, b.id)) == 1, 30, "the callback ran")
            spread.append(len({r["pid"] for r in tb.read(runs, "runs") if r["job"] in pair}))
        wait_until(lambda: drained_queue(app), 30, "queue drained")
    finally:
        stop(*procs)
    # THEN every batch has exactly one callback, and the pairs did run on both workers at once
    assert set(Counter(c["batch"] for c in callbacks(runs)).values()) == {1}
    assert 2 in spread, spread


def test_a_second_detector_that_read_before_the_first_completed_is_refused_whole(app, runs):
    # GIVEN a drained batch, and what a second checker read before the first one completed it
    b = app.batches.create("report")
    b.add("calc", {"n": 1})
    work_until(app, lambda: shards(app, b.id).done == 1, timeout_s=30)
    env = env_of(app.kernel)
    stale = app.run(completion.read_record_flow(env, b.id))
    b.seal()  # the sealer's check completes it
    first = app.batches.get(b.id)
    assert first.complete
    # WHEN the second completes from its stale read
    items = app.run(completion.read_shards_flow(env, stale))
    sealed = [dict(i, sealed={"BOOL": True}) for i in items]
    again = app.run(
        completion._complete(
            env, stale, batch_records.read_counts(sealed), sealed, app.clock.now(), failed=False, reason=None
        )
    )
    # THEN its transaction is cancelled whole: no second callback, the record unchanged
    assert again is False
    assert app.batches.get(b.id).completed_at == first.completed_at
    work_until(app, lambda: len(callbacks(runs, b.id)) == 1, timeout_s=30)
    assert len(callbacks(runs, b.id)) == 1


# ── failures ─────────────────────────────────────────────────────────────────────────────────
def test_a_dead_item_counts_as_failed_and_the_callback_says_so(app, runs):
    b = app.batches.create("report")
    b.add("calc", {"n": 1})
    dead = b.add("calc", {"fail": True})
    b.seal()
    work_until(app, lambda: len(callbacks(runs, b.id)) == 1, timeout_s=30)
    assert app.get(dead).status is JobStatus.DEAD
    status = app.batches.get(b.id)
    assert status.complete and not status.failed  # done, one item failed: not an early failure
    assert status.counts == {"pending": 0, "succeeded": 1, "failed": 1}
    assert callbacks(runs, b.id)[0]["payload"]["counts"] == status.counts


def test_more_failures_than_max_item_failures_fail_the_batch_at_once_and_cancel_its_pending_items(app, runs):
    # GIVEN an open batch allowing one failure: two items that fail, three that wait a minute
    b = app.batches.create("report", max_item_failures=1)
    b.add("calc", {"fail": True})
    b.add("calc", {"fail": True})
    waiting = [b.add("calc", {"n": k}, delay=60) for k in range(3)]
    # WHEN both failures are recorded (the batch was never sealed)
    work_until(app, lambda: len(callbacks(runs, b.id)) == 1, timeout_s=30)
    # THEN it completed at once as failed, its callback says why, and its waiting items are cancelled
    status = app.batches.get(b.id)
    assert status.complete and status.failed and "max_item_failures=1" in (status.reason or "")
    payload = callbacks(runs, b.id)[0]["payload"]
    assert (
        payload["failed"] is True
        and payload["status"] == "failed"
        and "max_item_failures" in payload["reason"]
    )
    assert {app.get(i).status for i in waiting} == {JobStatus.CANCELLED}
    with pytest.raises(BatchSealed):
        b.add("calc", {"n": 9})


def test_an_unknown_item_type_is_rejected_and_counted_as_failed(app, runs):
    b = app.batches.create("report")
    ghost = b.add("not.registered", {"x": 1}, queue="default")
    b.seal()
    work_until(app, lambda: len(callbacks(runs, b.id)) == 1, timeout_s=30)
    assert app.get(ghost).status is JobStatus.DEAD
    assert app.batches.get(b.id).counts == {"pending": 0, "succeeded": 0, "failed": 1}


# ── trees ────────────────────────────────────────────────────────────────────────────────────
def test_a_three_level_tree_with_streamed_items_completes_root_last(app, runs):
    # GIVEN root → child → grandchild, created up front; the root's items stream two items each into
    # the child, whose items stream two each into the grandchild
    root = app.batches.create("report")
    child = app.batches.create("report", parent=root.id)
    grandchild = app.batches.create("report", parent=child.id)
    for k in range(2):
        root.add(
            "calc", {"n": k, "stream": 2, "into": child.id, "child": {"stream": 2, "into": grandchild.id}}
        )
    root.seal()  # the child and grandchild are sealed by their parents once those drain
    procs = [start_worker(app, runs, concurrency=4), start_worker(app, runs, concurrency=4)]
    try:
        wait_until(lambda: len(callbacks(runs)) == 3, 90, "three callbacks")
    finally:
        stop(*procs)
    statuses = {
        name: app.batches.get(h.id) for name, h in (("root", root), ("child", child), ("grand", grandchild))
    }
    assert {n: s.counts["succeeded"] for n, s in statuses.items()} == {"root": 2, "child": 4, "grand": 8}
    assert all(s.complete and not s.failed for s in statuses.values())
    # THEN completion went leaves first, root last (each completion is written after its children's)
    assert statuses["grand"].completed_at <= statuses["child"].completed_at <= statuses["root"].completed_at
    assert {c["batch"] for c in callbacks(runs)} == {root.id, child.id, grandchild.id}
    assert {s.root_id for s in statuses.values()} == {root.id}
    # AND a streamed item's parent is the job that added it, its root the tree's root batch
    streamed = app.get(next(j for j in item_runs(runs) if app.get(j).batch.id == grandchild.id))
    assert streamed.root_id == root.id and app.get(streamed.parent_id).batch.id == child.id


def test_cancelling_a_batch_cancels_its_pending_items_and_its_sub_tree(app, runs):
    b = app.batches.create("report")
    child = app.batches.create("report", parent=b.id)
    waiting = [b.add("calc", {"n": k}, delay=60) for k in range(3)]
    child_item = child.add("calc", {"n": 9}, delay=60)
    status = app.batches.cancel(b.id)
    assert status.complete and status.failed and status.reason == "cancelled by request"
    assert {app.get(i).status for i in [*waiting, child_item]} == {JobStatus.CANCELLED}
    assert app.batches.get(child.id).failed
    assert app.batches.get(b.id).children_complete == 1
    with pytest.raises(BatchSealed):
        b.add("calc", {"n": 1})


def test_an_operator_cancel_of_one_item_counts_it_and_a_retry_puts_it_back(app, runs):
    b = app.batches.create("report")
    keep = b.add("calc", {"n": 1}, delay=60)
    drop = b.add("calc", {"n": 2}, delay=60)
    assert app.cancel(drop) == "cancelled"
    assert app.batches.get(b.id).counts == {"pending": 1, "succeeded": 0, "failed": 1}
    app.retry(drop)  # back to pending on its batch while it is not complete
    assert app.batches.get(b.id).counts == {"pending": 2, "succeeded": 0, "failed": 0}
    assert app.get(keep).status is JobStatus.QUEUED


# ── dedupe ───────────────────────────────────────────────────────────────────────────────────
def test_dedupe_keys_name_one_batch_and_one_item(app, runs):
    b = app.batches.create("report", dedupe_key="payroll-2026-11")
    assert app.batches.create("report", dedupe_key="payroll-2026-11").id == b.id
    with pytest.raises(IdempotencyConflict):
        app.batches.create("other.callback", dedupe_key="payroll-2026-11")
    first = b.add("calc", {"n": 1}, dedupe_key="emp-1")
    assert b.add("calc", {"n": 1}, dedupe_key="emp-1") == first
    with pytest.raises(IdempotencyConflict):
        b.add("calc", {"n": 2}, dedupe_key="emp-1")
    assert app.batches.get(b.id).counts == {"pending": 1, "succeeded": 0, "failed": 0}
    assert shards(app, b.id).added == 1


def test_adding_from_many_threads_counts_every_item_once(app, runs):
    b = app.batches.create("report", shards=4)
    added: list[str] = []

    def add(k: int) -> None:
        for n in range(5):
            added.append(b.add("calc", {"n": n}, dedupe_key=f"{k}-{n}", delay=60))

    threads = [threading.Thread(target=add, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(added)) == 20 and shards(app, b.id).added == 20


# ── cost, counted ────────────────────────────────────────────────────────────────────────────
def _spent(app, before):
    return {k: v - before.get(k, 0.0) for k, v in app.requests.capacity.items() if v != before.get(k, 0.0)}


def test_write_units_per_item_counted_by_dynamodb(ministack_url, make_app, runs):
    # GIVEN an open batch (so no finish below completes it), measured with DynamoDB's ConsumedCapacity
    app = make_app(ministack_url, measure_capacity=True)
    app.registry.include(tb.app.registry)
    app.provision()
    before = dict(app.requests.capacity)
    b = app.batches.create("report")
    # (creating it: the record and its 16 shards in one transaction, 17 x 2, and its list entry)
    assert _spent(app, before) == {("write", "table"): 34.0, ("write", "index:batch_items"): 1.0}
    # WHEN an item is added: one transaction (its record + ADD added on its shard, 2 + 2), then the
    # hint and the clearing of its pending entry (1), like a transactional enqueue
    before = dict(app.requests.capacity)
    item = b.add("calc", {"n": 1})
    added = _spent(app, before)
    # THEN 5 table units, the attention entry made and removed (1 + 1), one batch_items entry (1)
    assert added == {
        ("write", "table"): 5.0,
        ("write", "index:attention"): 2.0,
        ("write", "index:batch_items"): 1.0,
    }
    # WHEN a worker claims it (1) and finishes it with its count in one transaction (2 + 2)
    before = dict(app.requests.capacity)
    work_until(app, lambda: app.get(item).status is JobStatus.SUCCEEDED, timeout_s=30)
    finished = {k: v for k, v in _spent(app, before).items() if k[0] == "write"}
    registry = {
        ("write", "table"): 3.0,
        ("write", "index:attention"): 2.0,
    }  # the worker's own item, per process
    assert {k: v - registry.get(k, 0.0) for k, v in finished.items() if v != registry.get(k)} == {
        ("write", "table"): 5.0
    }
    # WHEN it is sealed, which completes it (its only item is done)
    before = dict(app.requests.capacity)
    b.seal()
    sealed = {k: v for k, v in _spent(app, before).items() if k[0] == "write"}
    # THEN the seal (record + 16 shards, transactional: 34; its repair entry: 1 index unit) and the
    # completion (record, callback record, 16 shard checks, transactional: 36; the repair entry
    # removed, the callback's pending entry made: 2; the callback's entry cleared once sent: 1 + 1)
    assert sealed == {("write", "table"): 71.0, ("write", "index:attention"): 4.0}
    # (the plain job's budget, 3 write units and no index write, is tests/integration/test_cost.py's)


def test_item_writes_spread_evenly_over_the_counter_shards():
    """No hot partition (docs/scale.md): no shard of a busy batch takes more than half a partition's 1,000 write units/s.

    Each item writes its shard twice, add and finish, each transactional (2 units): a batch whose
    items finish at R/s puts about 2R/shards units/s on each shard (4R/shards while items are also
    being added at R/s). The hottest shard of 10,000 real ids is what is measured here.
    """
    ids = [f"{n:032x}" for n in range(10_000)]
    for shards, rate in ((batch_records.DEFAULT_SHARDS, 3_500), (batch_records.MAX_SHARDS, 10_000)):
        per_shard = Counter(batch_records.item_shard(i, shards) for i in ids)
        assert len(per_shard) == shards
        hottest = max(per_shard.values()) / len(ids)
        assert hottest < 1.25 / shards  # within 25 % of an even split (10,000 random ids)
        assert hottest * rate * 2 < 500  # finishing at `rate` items/s: under 50 % of 1,000 WU/s
