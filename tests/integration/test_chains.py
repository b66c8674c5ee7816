"""Chains, attacked from outside: real worker processes, raw SQS, kill -9, no sweeper unless named (MiniStack).

Evidence comes from outside the workers: the run log each handler appends to (tests/apps/chains.py),
the records read over HTTP, and the queues.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from sqsjobs import ChainInvalid, ChainPlace, IdempotencyConflict, JobRequest, JobStatus
from sqsjobs.ops.stranded import find_stranded
from sqsjobs.transport import routes
from tests.apps import chains as chain_app
from tests.integration.helpers import kill_group as kill
from tests.integration.helpers import queue_url, sqs_call, wait_until, worker_process

pytestmark = pytest.mark.slow

APP = "tests.apps.chains:app"


def start_worker(app, *, concurrency: int = 4, **env: str) -> subprocess.Popen[bytes]:
    return worker_process(app, APP, concurrency=concurrency, **env)


def runs(runs_dir: Path, job_id: str) -> list[dict]:
    path = runs_dir / job_id
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def all_runs(runs_dir: Path) -> list[dict]:
    return sorted(
        (r | {"job": p.name} for p in runs_dir.iterdir() for r in runs(runs_dir, p.name)),
        key=lambda r: r["at"],
    )


@pytest.fixture
def app(ministack_url, make_app):
    app = make_app(ministack_url, lease_s=3.0, visibility_timeout_s=2)
    app.registry.include(chain_app.app.registry)  # the handlers the worker processes load
    app.provision()
    return app


def step(name: str, add: int, runs_dir: Path, **extra) -> tuple[str, dict]:
    return ("chain.add", {"name": name, "add": add, "runs_dir": str(runs_dir), **extra})


def test_a_three_step_chain_runs_in_order_and_each_step_sees_the_previous_result(app, tmp_path):
    # GIVEN a chain of three steps, and a worker process
    chain_id = app.chains.start(
        [step("fetch", 1, tmp_path), step("transform", 10, tmp_path), step("store", 100, tmp_path)]
    )
    proc = start_worker(app)
    try:
        wait_until(lambda: app.chains.get(chain_id).status == "succeeded", 60, "chain succeeded")
    finally:
        kill(proc)
    # THEN each step ran once, in order, each seeing the one before's result
    status = app.chains.get(chain_id)
    log = all_runs(tmp_path)
    assert [r["step"] for r in log] == [0, 1, 2]
    assert [r["previous"] for r in log] == [
        None,
        {"total": 1, "path": ["fetch"]},
        {"total": 11, "path": ["fetch", "transform"]},
    ]
    assert [s.status for s in status.steps] == [JobStatus.SUCCEEDED] * 3
    assert [s.type for s in status.steps] == ["chain.add"] * 3
    assert app.get(status.steps[2].job_id).result == {"total": 111, "path": ["fetch", "transform", "store"]}
    assert status.stopped_at is None and status.finished_at is not None
    job = app.get(status.steps[1].job_id)
    assert job.chain == ChainPlace(chain_id, 1, 3)


def test_a_step_that_dies_stops_the_chain_and_the_later_steps_never_run(app, tmp_path):
    # GIVEN a chain whose second step dies (no retry), and a worker
    chain_id = app.chains.start(
        [
            step("fetch", 1, tmp_path),
            ("chain.boom", {"name": "transform", "runs_dir": str(tmp_path)}),
            step("store", 100, tmp_path),
        ]
    )
    proc = start_worker(app)
    try:
        wait_until(lambda: app.chains.get(chain_id).status != "running", 60, "chain ended")
        wait_until(
            lambda: all(s.status.terminal for s in app.chains.get(chain_id).steps), 30, "steps dropped"
        )
        time.sleep(2)  # a third step that ran anyway would have written its line by now
    finally:
        kill(proc)
    # THEN the chain says where and why it stopped, and the third step never ran
    status = app.chains.get(chain_id)
    assert status.status == "stopped" and status.stopped_at == 1
    assert "boom at transform" in (status.reason or "") and "chain.boom" in (status.reason or "")
    assert [s.status for s in status.steps] == [JobStatus.SUCCEEDED, JobStatus.DEAD, JobStatus.CANCELLED]
    assert [r["step"] for r in all_runs(tmp_path)] == [0, 1]
    assert app.get(status.steps[2].job_id).reason == "chain ended at step 1"


def test_a_step_whose_worker_is_killed_mid_run_is_rescued_and_the_chain_goes_on_without_a_sweeper(
    app, tmp_path
):
    # GIVEN a chain whose first step runs 4 s, and two worker processes
    chain_id = app.chains.start(
        [step("fetch", 1, tmp_path, sleep_s=4), step("transform", 10, tmp_path), step("store", 100, tmp_path)]
    )
    first = app.chains.get(chain_id).steps[0].job_id
    procs = [start_worker(app), start_worker(app)]
    try:
        wait_until(lambda: len(runs(tmp_path, first)) == 1, 30, "first step started")
        victim = next(p for p in procs if p.pid == runs(tmp_path, first)[0]["pid"])
        # WHEN the worker running it is killed mid-run
        os.killpg(victim.pid, signal.SIGKILL)
        victim.wait(10)
        # THEN the other worker rescues it once its lease expires, and the chain runs to its end
        wait_until(lambda: app.chains.get(chain_id).status == "succeeded", 60, "chain succeeded")
    finally:
        for p in procs:
            kill(p)
    log = all_runs(tmp_path)
    assert [(r["step"], r["attempt"]) for r in log] == [(0, 1), (0, 2), (1, 1), (2, 1)]
    assert log[1]["pid"] != log[0]["pid"]
    assert app.get(app.chains.get(chain_id).steps[2].job_id).result == {
        "total": 111,
        "path": ["fetch", "transform", "store"],
    }


def step_bodies(app, chain_id: str) -> list[str]:
    """The message each step's hint carries, built from its record as the chain hook builds it."""
    from sqsjobs.store import enqueue

    return [enqueue.envelope_of(app.get(s.job_id)).to_body() for s in app.chains.get(chain_id).steps]


def send_copies(app, bodies: list[str], copies: int) -> None:
    url = queue_url(app)
    entries = [
        {"Id": str(n), "MessageBody": b} for n, b in enumerate(b for b in bodies for _ in range(copies))
    ]
    for i in range(0, len(entries), 10):
        sqs_call(app, "send_message_batch", QueueUrl=url, Entries=entries[i : i + 10])


def queue_drained(app) -> bool:
    attrs = sqs_call(app, "get_queue_attributes", QueueUrl=queue_url(app), AttributeNames=["All"])[
        "Attributes"
    ]
    return all(
        int(attrs[k]) == 0
        for k in (
            "ApproximateNumberOfMessages",
            "ApproximateNumberOfMessagesNotVisible",
            "ApproximateNumberOfMessagesDelayed",
        )
    )


def test_copies_of_every_step_message_never_run_a_waiting_step_early_nor_any_step_twice(app, tmp_path):
    # GIVEN a chain, and three copies of each later step's message in the queue while those steps wait
    chain_id = app.chains.start(
        [step("fetch", 1, tmp_path, sleep_s=2), step("transform", 10, tmp_path), step("store", 100, tmp_path)]
    )
    bodies = step_bodies(app, chain_id)  # the waiting records keep their payloads: these are the real hints
    send_copies(app, bodies[1:], copies=3)
    proc = start_worker(app, concurrency=8)
    try:
        wait_until(lambda: app.chains.get(chain_id).status == "succeeded", 60, "chain succeeded")
        # WHEN copies of every step's message are put back after the chain finished
        send_copies(app, bodies, copies=2)
        wait_until(lambda: queue_drained(app), 30, "copies consumed")
    finally:
        kill(proc)
    # THEN each step ran once, in order, each after the one before had finished
    log = all_runs(tmp_path)
    assert [(r["step"], r["attempt"]) for r in log] == [(0, 1), (1, 1), (2, 1)]
    assert log[1]["at"] >= log[0]["at"] + 2
    assert log[1]["previous"] == {"total": 1, "path": ["fetch"]}


def test_a_crash_between_a_steps_commit_and_the_next_hint_is_repaired_by_the_sweeper(
    ministack_url, make_app, tmp_path
):
    import asyncio

    from sqsjobs import sweep_once
    from sqsjobs.chains.plugin import ChainHook
    from sqsjobs.runtime.execution import Execution
    from sqsjobs.transport import sqs

    app = make_app(ministack_url, lease_s=3.0, visibility_timeout_s=2, stale_after_s=1.0)
    app.registry.include(chain_app.app.registry)
    app.provision()
    chain_id = app.chains.start([step("fetch", 1, tmp_path), step("transform", 10, tmp_path)])
    second = app.chains.get(chain_id).steps[1].job_id

    class CrashesAfterCommit(ChainHook):
        async def landed(self, finish):  # the process dies right after the commit: no hint, no clear
            return None

    # WHEN step 0 is run by a worker that dies between its commit and step 1's hint
    url = queue_url(app)
    response = sqs_call(app, "receive_message", **sqs.receive(url, max_messages=1, wait_s=20))
    (delivery,) = sqs.deliveries("default", url, response)

    async def run_once():
        try:
            return await Execution(app, "w-crash", hooks=[CrashesAfterCommit(app)]).handle(delivery)
        finally:
            await app.aclose()

    assert asyncio.run(run_once()).kind == "delete"
    sqs_call(app, "delete_message", QueueUrl=url, ReceiptHandle=delivery.receipt_handle)
    # THEN step 1 is queued with a pending entry and no message, and the chain says step 1 is current
    record = app.clients.boto3.get("dynamodb").get_item(
        TableName=app.settings.table_name, Key={"id": {"S": second}}, ConsistentRead=True
    )["Item"]
    assert record["status"]["S"] == "queued" and record["attn"]["S"].startswith("pending#")
    assert queue_drained(app)
    assert app.chains.get(chain_id).current == 1
    # AND the sweeper, once the entry is due, sends the hint; a worker runs step 1 and the chain ends
    wait_until(lambda: second in asyncio.run(_sweep(app, sweep_once)).redispatched, 10, "sweeper sent step 1")
    proc = start_worker(app)
    try:
        wait_until(lambda: app.chains.get(chain_id).status == "succeeded", 60, "chain succeeded")
    finally:
        kill(proc)
    assert [(r["step"], r["previous"]) for r in all_runs(tmp_path)] == [
        (0, None),
        (1, {"total": 1, "path": ["fetch"]}),
    ]


async def _sweep(app, sweep_once):
    try:
        return await sweep_once(app)
    finally:
        await app.aclose()


def test_a_dedupe_key_names_one_chain_and_other_steps_under_it_conflict(app, tmp_path):
    steps = [step("fetch", 1, tmp_path), step("store", 2, tmp_path)]
    chain_id = app.chains.start(steps, dedupe_key="order-7")
    # WHEN the same key comes again with the same steps, and then with other steps
    assert app.chains.start(steps, dedupe_key="order-7") == chain_id
    with pytest.raises(IdempotencyConflict, match="order-7"):
        app.chains.start([step("fetch", 1, tmp_path), step("store", 3, tmp_path)], dedupe_key="order-7")
    assert app.chains.start(steps, dedupe_key="order-8") != chain_id
    # THEN the chain ran once
    proc = start_worker(app)
    try:
        wait_until(lambda: app.chains.get(chain_id).status == "succeeded", 60, "chain succeeded")
    finally:
        kill(proc)
    assert [len(runs(tmp_path, s.job_id)) for s in app.chains.get(chain_id).steps] == [1, 1]


def test_more_than_99_steps_are_refused_before_anything_is_written(app, tmp_path):
    app.requests.reset()
    with pytest.raises(ChainInvalid, match="1 to 99 steps"):
        app.chains.start([step(f"s{n}", 1, tmp_path) for n in range(100)])
    with pytest.raises(ChainInvalid, match="1 to 99"):
        app.chains.start([])
    assert not [k for k in app.requests.counts if k[0] == "dynamodb"]
    # 99 fit one transaction with the chain record
    chain_id = app.chains.start([step(f"s{n}", 1, tmp_path) for n in range(99)])
    status = app.chains.get(chain_id)
    assert len(status.steps) == 99 and status.steps[98].status is JobStatus.WAITING


def test_large_step_payloads_and_results_go_through_s3(app, tmp_path):
    # GIVEN steps whose payloads are over the record's inline limit, and a step whose result is over the record's
    blob = "p" * (app.settings.held_inline_payload_bytes * 3)
    chain_id = app.chains.start(
        [
            (
                "chain.big",
                {
                    "runs_dir": str(tmp_path),
                    "blob": blob,
                    "result_bytes": app.settings.inline_result_bytes * 2,
                },
            ),
            ("chain.measure", {"runs_dir": str(tmp_path), "blob": blob}),
        ]
    )
    steps = app.chains.get(chain_id).steps
    assert (
        app.get(steps[1].job_id).payload_ref is not None
    )  # the waiting record keeps a reference, not the payload
    proc = start_worker(app)
    try:
        wait_until(lambda: app.chains.get(chain_id).status == "succeeded", 60, "chain succeeded")
    finally:
        kill(proc)
    # THEN step 1 saw step 0's result (read from S3) and its own payload, whole
    assert app.get(steps[0].job_id, load_result=False).result_ref is not None
    assert app.get(steps[1].job_id).result == {
        "previous_blob": app.settings.inline_result_bytes * 2,
        "payload_blob": len(blob),
    }


def test_cancel_of_a_chain_whose_step_is_queued_cancels_every_step_and_nothing_runs(app, tmp_path):
    chain_id = app.chains.start(
        [step("fetch", 1, tmp_path), step("transform", 10, tmp_path), step("store", 100, tmp_path)]
    )
    assert app.chains.cancel(chain_id) == "cancelled"
    proc = start_worker(app)
    try:
        wait_until(lambda: queue_drained(app), 30, "step 0's message consumed")
    finally:
        kill(proc)
    status = app.chains.get(chain_id)
    assert (status.status, status.stopped_at) == ("cancelled", 0)
    assert [s.status for s in status.steps] == [JobStatus.CANCELLED] * 3
    assert all_runs(tmp_path) == []
    assert app.chains.cancel(chain_id) == "cancelled"  # again: its end state, nothing written


def test_cancel_of_a_chain_whose_step_is_running_stops_it_at_its_heartbeat(app, tmp_path):
    chain_id = app.chains.start([step("fetch", 1, tmp_path, sleep_s=20), step("transform", 10, tmp_path)])
    first = app.chains.get(chain_id).steps[0].job_id
    proc = start_worker(app)
    try:
        wait_until(lambda: len(runs(tmp_path, first)) == 1, 30, "first step started")
        assert app.chains.cancel(chain_id) == "requested"
        assert app.chains.get(chain_id).cancel_requested
        wait_until(lambda: app.chains.get(chain_id).status == "cancelled", 30, "chain cancelled")
        # the later steps are dropped after the finish that ended the chain (its landed()), not with it
        wait_until(
            lambda: all(s.status.terminal for s in app.chains.get(chain_id).steps), 30, "steps dropped"
        )
    finally:
        kill(proc)
    status = app.chains.get(chain_id)
    assert status.stopped_at == 0 and [s.status for s in status.steps] == [JobStatus.CANCELLED] * 2
    assert [r["step"] for r in all_runs(tmp_path)] == [0]


def test_a_step_that_succeeds_after_its_chain_was_cancelled_does_not_start_the_next(
    ministack_url, make_app, tmp_path
):
    # GIVEN a lease long enough that the running step sees no heartbeat before it returns
    app = make_app(ministack_url, lease_s=60.0, visibility_timeout_s=2)
    app.registry.include(chain_app.app.registry)
    app.provision()
    chain_id = app.chains.start(
        [step("fetch", 1, tmp_path, sleep_s=3), step("transform", 10, tmp_path), step("store", 1, tmp_path)]
    )
    first = app.chains.get(chain_id).steps[0].job_id
    proc = start_worker(app)
    try:
        wait_until(lambda: len(runs(tmp_path, first)) == 1, 30, "first step started")
        assert app.chains.cancel(chain_id) == "requested"
        wait_until(lambda: app.chains.get(chain_id).status == "cancelled", 30, "chain cancelled")
        wait_until(
            lambda: all(s.status.terminal for s in app.chains.get(chain_id).steps), 30, "steps dropped"
        )
    finally:
        kill(proc)
    # THEN step 0 finished its work, step 1 refused to start, step 2 was dropped
    status = app.chains.get(chain_id)
    assert [s.status for s in status.steps] == [JobStatus.SUCCEEDED, JobStatus.CANCELLED, JobStatus.CANCELLED]
    assert status.stopped_at == 1 and "cancel" in (status.reason or "")
    assert [r["step"] for r in all_runs(tmp_path)] == [0]


def measure_chain(ministack_url, make_app, tmp_path, *, steps: int, pad_bytes: int):
    """Create and run one chain in-process; the write units of its creation and of its run (the worker's own
    registry item taken out: a cost per worker process, not per step), and the run's read requests."""
    from sqsjobs.testing import work_until

    name = f"cost{os.getpid()}{time.monotonic_ns() % 10**6}"
    producer = make_app(ministack_url, name, measure_capacity=True)
    producer.registry.include(chain_app.app.registry)
    producer.provision()
    worker = make_app(ministack_url, name, measure_capacity=True, receive_wait_s=20)
    worker.registry.include(chain_app.app.registry)
    producer.requests.reset()
    chain_id = producer.chains.start([step("s", 1, tmp_path, pad="p" * pad_bytes) for _ in range(steps)])
    created = producer.requests.units("write")
    ran = work_until(
        worker, lambda: producer.chains.get(chain_id).status == "succeeded", concurrency=4, timeout_s=120
    )
    run = worker.requests.units("write") - sum(ran.presence.capacity.values())
    reads = {op: n for (svc, op), n in worker.requests.counts.items() if op in ("GetItem", "BatchGetItem")}
    return created, run, reads


@pytest.mark.parametrize(("pad_bytes", "units"), [(100, 1), (1024, 2)])
def test_write_units_per_step_counted_with_consumed_capacity(
    ministack_url, make_app, tmp_path, pad_bytes, units
):
    """docs/workflows-chains.md, "Cost per step": DynamoDB's own count (MiniStack), table and index.

    ``units``: what one write of a step's record costs while it keeps its payload (1 under 1 KB,
    2 for a 1 KB payload); after its hint went the record is a plain one again (1 unit).
    """
    steps = 10
    created, run, reads = measure_chain(ministack_url, make_app, tmp_path, steps=steps, pad_bytes=pad_bytes)
    print(
        f"\n{pad_bytes} B payloads: create {created} WU, run {run} WU, {(created + run) / steps} WU per step"
    )
    # Creation: every item of the transaction at twice its units (the chain record, every step with
    # its payload), step 0's pending index entry, then step 0's clear (billed on the larger item) and
    # its index entry's removal.
    assert created == 2 * 1 + 2 * units * steps + 1 + (units + 1)
    # Each step but the last: claim 1; its finish transaction: complete 2, next step unblocked
    # 2 * units, its pending index entry 1, chain record 2; the next step's clear units + 1 (index).
    # The last: claim 1, complete 2, chain record 2. A claim that reaches the next step before its
    # clear lands (the hint goes first, so the payload is never lost) is billed on the item still
    # holding the payload: units instead of 1 (seen once under load: 123 for 122).
    floor = (steps - 1) * (1 + 2 + 2 * units + 1 + 2 + units + 1) + (1 + 2 + 2)
    assert floor <= run <= floor + (steps - 1) * (units - 1)
    # Reads: one GetItem of the predecessor per step after the first, one BatchGetItem per finish.
    assert reads == {"GetItem": steps - 1, "BatchGetItem": steps}


def test_each_step_goes_to_its_own_queue_level_or_key_and_a_worker_killed_between_steps_strands_none(
    ministack_url, make_app, tmp_path
):
    # GIVEN queues with priority levels ("work") and serialized keys ("device"), and a chain whose
    # steps route three ways: the default queue, work's high level, a device key
    routing = {"priority_queues": {"work"}, "serialized_queues": {"device"}}
    env = {"SQSJOBS_PRIORITY_QUEUES": "work", "SQSJOBS_SERIALIZED_QUEUES": "device"}
    app = make_app(ministack_url, lease_s=3.0, visibility_timeout_s=2, **routing)
    app.registry.include(chain_app.app.registry)
    app.provision(["default", "work", "device"])
    fetch, transform, store = (
        step("fetch", 1, tmp_path),
        step("transform", 10, tmp_path),
        step("store", 100, tmp_path),
    )
    chain_id = app.chains.start(
        [
            fetch,
            JobRequest(*transform, queue="work", priority="high"),
            JobRequest(*store, queue="device", serialize_key="k1"),
        ]
    )
    ids = [s.job_id for s in app.chains.get(chain_id).steps]

    def waiting_on(route: str) -> int:
        url = app.run(app.queue_urls.flow([route]))[route]
        attrs = sqs_call(app, "get_queue_attributes", QueueUrl=url, AttributeNames=["All"])["Attributes"]
        return int(attrs["ApproximateNumberOfMessages"]) + int(attrs["ApproximateNumberOfMessagesDelayed"])

    plan = [
        ("default", routes.job_route("default", None, None)),
        ("work", routes.job_route("work", "high", None)),
        ("device", routes.job_route("device", None, "k1")),
    ]
    pids = []
    for n, (queue, route) in enumerate(plan):
        # WHEN only a worker serving the step's own queue runs
        assert waiting_on(route) == 1, (n, route)  # the step's hint waits on its own route
        worker = worker_process(app, APP, concurrency=2, queues=queue, **env)
        try:
            wait_until(lambda n=n: app.get(ids[n]).status is JobStatus.SUCCEEDED, 30, f"step {n}")
            if n + 1 < len(ids):  # the next step's hint sent, to a route this worker does not read
                wait_until(lambda n=n: waiting_on(plan[n + 1][1]) == 1, 10, f"step {n + 1}'s hint")
        finally:
            kill(worker)  # THEN killed (SIGKILL) between two steps, it strands nothing
        pids.append(worker.pid)
    # THEN each step ran once, on its queue's own worker, in order, each seeing the one before
    log = all_runs(tmp_path)
    assert [(r["step"], r["attempt"]) for r in log] == [(0, 1), (1, 1), (2, 1)]
    assert [r["pid"] for r in log] == pids
    assert [app.get(i).queue for i in ids] == ["default", "work", "device"]
    assert app.chains.get(chain_id).status == "succeeded"
    assert app.get(ids[2]).result == {"total": 111, "path": ["fetch", "transform", "store"]}
    assert find_stranded(app.run, app.settings, time.time(), segments=1, grace_s=0.0).stranded == []
