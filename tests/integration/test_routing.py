"""Priorities, serialize keys and tenant group ids, attacked from outside: real worker processes on MiniStack.

Evidence comes from the run log the handlers append to (tests/apps/routing.py: ``time.monotonic()``
stamps, one clock per host) and from the raw SQS messages; never from inside a worker.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sqsjobs import JobRequest, JobStatus
from sqsjobs._aws import Call, one
from sqsjobs.errors import RoutingError
from sqsjobs.ops.worker_views import list_workers_flow
from sqsjobs.store.runs import CLOCK_SKEW_S
from sqsjobs.transport import routes
from tests.apps import routing
from tests.integration.helpers import sqs_call, wait_until, worker_env, worker_process

pytestmark = pytest.mark.slow

APP = "tests.apps.routing:app"
ROUTED = {"priority_queues": {"work"}, "serialized_queues": {"device"}}
ROUTED_ENV = {"SQSJOBS_PRIORITY_QUEUES": "work", "SQSJOBS_SERIALIZED_QUEUES": "device"}


@pytest.fixture
def app(ministack_url, make_app):
    app = make_app(ministack_url, **ROUTED)
    app.registry.include(routing.app.registry)  # the handlers the worker processes load
    app.provision()
    return app


@pytest.fixture
def start_workers(app):
    procs: list[subprocess.Popen[bytes]] = []

    def start(n: int, concurrency: int, queues: str, **env: str) -> None:
        for _ in range(n):
            procs.append(
                worker_process(app, APP, concurrency=concurrency, queues=queues, **ROUTED_ENV, **env)
            )

    start.procs = procs  # type: ignore[attr-defined]
    yield start
    for proc in procs:
        proc.kill()
        proc.wait(10)


def read_log(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def starts(path: Path) -> list[dict]:
    return sorted(read_log(path), key=lambda r: r["start"])


# ── priorities ──────────────────────────────────────────────────────────────────────────────
def test_a_high_job_enqueued_behind_a_low_backlog_takes_the_next_free_slot(app, start_workers, tmp_path):
    # GIVEN a backlog of low-priority jobs and a worker with one slot, already running the first of them
    log = tmp_path / "runs.jsonl"
    app.enqueue_many(
        [
            JobRequest("work.run", {"label": f"low{i}", "log": str(log), "sleep": 0.6}, priority="low")
            for i in range(6)
        ]
    )
    # (the anti-starvation turn is pushed out of the way here; the next test measures it)
    start_workers(1, 1, "work", SQSJOBS_LOWER_PRIORITY_EVERY="1000")
    wait_until(lambda: read_log(Path(f"{log}.started")), 30, "the first low start")
    # WHEN two high-priority jobs are enqueued while five low ones still wait
    high = [
        app.enqueue("work.run", {"label": f"high{i}", "log": str(log)}, priority="high") for i in range(2)
    ]
    wait_until(lambda: len(read_log(log)) == 8, 60, "all eight runs")
    # THEN the two high jobs are the very next starts, before any waiting low job
    order = [r["label"] for r in starts(log)]
    assert order[:3] == ["low0", "high0", "high1"], order
    # (a finish may wait finish_linger_s for company after the handler's last line)
    wait_until(lambda: all(app.get(j).status is JobStatus.SUCCEEDED for j in high), 10, "the high finishes")


def test_low_jobs_progress_while_high_jobs_keep_arriving(app, start_workers, tmp_path):
    # GIVEN a deep low backlog, a deep high backlog, and more high jobs arriving while the worker runs
    log = tmp_path / "runs.jsonl"
    every = app.settings.lower_priority_every  # the default: 1 batch of every 4 starts with a lower level
    app.enqueue_many(
        [JobRequest("work.run", {"label": f"low{i}", "log": str(log)}, priority="low") for i in range(20)]
        + [JobRequest("work.run", {"label": f"high{i}", "log": str(log)}, priority="high") for i in range(30)]
    )
    start_workers(1, 1, "work")  # one slot: each batch is one start, so batches are starts
    for i in range(30, 50):
        app.enqueue("work.run", {"label": f"high{i}", "log": str(log)}, priority="high")
        time.sleep(0.05)
    wait_until(lambda: len(read_log(log)) == 70, 90, "all seventy runs")
    order = [r["label"][:3] == "low" for r in starts(log)]
    # Every low job was enqueued before the worker started, so one waited at each start up to the
    # last low start. Past it no low waits, and the highs still arriving run in a row: the stretch
    # ends there. (It ended at the last high start, and counted 11 highs in a row once under the
    # suite's load: when the highs arrive slower than the worker runs them, lows fill the gaps and
    # run out first; a producer sleeping 0.4 s instead of 0.05 s between highs counts 16.)
    last_low = max(i for i, is_low in enumerate(order) if is_low)
    waiting = order[: last_low + 1]
    # THEN high jobs are served first: never more than `every - 1` high starts in a row while lows wait
    # (the thirty highs enqueued first fill whole runs) ...
    longest_high_run = max(len(list(g)) for is_low, g in itertools.groupby(waiting) if not is_low)
    assert longest_high_run == every - 1, waiting
    # ... and the lows keep their share: one start in `every` at least (more when the highs run dry)
    lows = sum(waiting)
    print(f"lows {lows} of {len(waiting)} starts while low jobs waited (1 in {len(waiting) / lows:.2f})")
    assert lows * every >= len(waiting), (lows, len(waiting))


# ── serialize keys ─────────────────────────────────────────────────────────────────────────
def test_jobs_of_one_key_never_overlap_and_start_in_enqueue_order_across_processes_and_a_retry(
    app, start_workers, tmp_path
):
    # GIVEN three worker processes with three slots each, all polling (registered) ...
    start_workers(3, 3, "device")
    wait_until(lambda: len(app.run(list_workers_flow(app.settings, time.time()))) == 3, 60, "three workers")
    # ... and three keys of six jobs each, enqueued interleaved; the second job of key k0 fails once
    log = tmp_path / "runs.jsonl"
    keys = ["k0", "k1", "k2"]
    app.enqueue_many(
        [
            JobRequest(
                "device.command",
                {"label": f"{key}-{n}", "log": str(log), "sleep": 0.2, "fail_once": key == "k0" and n == 1},
                serialize_key=key,
            )
            for n in range(6)
            for key in keys
        ]
    )
    # WHEN the workers run them
    wait_until(lambda: sum(not r["failed"] for r in read_log(log)) == 18, 90, "eighteen successful runs")
    runs = starts(log)
    for key in keys:
        mine = [r for r in runs if r["label"].startswith(key + "-")]
        # THEN one key's runs never overlap, across processes ...
        for before, after in itertools.pairwise(mine):
            assert before["end"] <= after["start"], (before, after)
        # ... and they start in enqueue order, the retry in its place (k0-1 twice, before k0-2)
        seq = [int(r["label"].split("-")[1]) for r in mine]
        expected = [0, 1, 1, 2, 3, 4, 5] if key == "k0" else [0, 1, 2, 3, 4, 5]
        assert seq == expected, (key, seq)
    assert [r["attempt"] for r in runs if r["label"] == "k0-1"] == [1, 2]
    # AND different keys do run at the same time
    assert any(
        a["start"] < b["end"] and b["start"] < a["end"]
        for a, b in itertools.combinations(runs, 2)
        if a["label"][:2] != b["label"][:2]
    )
    assert len({r["pid"] for r in runs}) > 1  # more than one process took part


# ── what goes on the wire ─────────────────────────────────────────────────────────────────
def raw_receive(app, key: str, n: int = 10) -> list[dict]:
    url = app.run(app.queue_urls.flow([key]))[key]
    answer = sqs_call(
        app,
        "receive_message",
        QueueUrl=url,
        MaxNumberOfMessages=n,
        WaitTimeSeconds=2,
        MessageSystemAttributeNames=["MessageGroupId"],
    )
    return answer.get("Messages", [])


def test_a_tenant_is_the_message_group_on_a_standard_queue(app):
    # GIVEN jobs with a tenant, with a tenant SQS does not take as a group id, and without one
    app.enqueue("work.run", {"label": "a"}, tenant="acme")
    app.enqueue("work.run", {"label": "b"}, tenant="Zürich GmbH")
    app.enqueue("work.run", {"label": "c"})
    # THEN the tenant is the MessageGroupId (SQS fair queues), a digest when SQS would refuse it, else none
    groups = {
        json.loads(m["Body"])["payload"]["label"]: m.get("Attributes", {}).get("MessageGroupId")
        for m in raw_receive(app, "work")
    }
    assert groups == {"a": "acme", "b": routes.group_id("Zürich GmbH"), "c": None}
    assert groups["b"].startswith("h-")


def test_fair_queues_off_sends_no_group(ministack_url, make_app):
    app = make_app(ministack_url, fair_queues=False)
    app.registry.include(routing.app.registry)
    app.provision()
    app.enqueue("work.run", {"label": "a"}, tenant="acme")
    [message] = raw_receive(app, "work")
    assert "MessageGroupId" not in message.get("Attributes", {})


def test_priority_and_key_pick_the_queue_and_the_record_keeps_them(app):
    high = app.enqueue("work.run", {"label": "h"}, priority="high")
    low = app.enqueue("work.run", {"label": "l"}, priority="low")
    keyed = app.enqueue("device.command", {"label": "k"}, serialize_key="dev-42", tenant="acme")
    assert [json.loads(m["Body"])["id"] for m in raw_receive(app, routes.route("work", "high"))] == [high]
    assert [json.loads(m["Body"])["id"] for m in raw_receive(app, routes.route("work", "low"))] == [low]
    [fifo] = raw_receive(app, routes.route("device", "fifo"))
    # the key is the FIFO group (the tenant does not override it)
    assert (json.loads(fifo["Body"])["id"], fifo["Attributes"]["MessageGroupId"]) == (keyed, "dev-42")
    assert (app.get(high).priority, app.get(low).priority, app.get(keyed).serialize_key) == (
        "high",
        "low",
        "dev-42",
    )
    # a normal job's record gets no routing attribute at all
    normal = app.enqueue("work.run", {"label": "n"}, priority="normal")
    assert app.get(normal).priority is None


def test_jobs_written_inside_another_transaction_go_to_their_level_or_key_queue(app):
    # GIVEN jobs whose records another write carries (a batch item, a transaction's jobs),
    # each with a priority level or a serialize key
    batch = app.batches.create("work.run")
    item_high = batch.add("work.run", {"label": "item"}, priority="high")
    item_keyed = batch.add("device.command", {"label": "item-k"}, serialize_key="dev-7")
    with app.transaction() as tx:
        tx_low = tx.enqueue("work.run", {"label": "tx"}, priority="low")
        tx_keyed = tx.enqueue("device.command", {"label": "tx-k"}, serialize_key="dev-8")
    # THEN each message went to its route's queue at once (not left to the sweeper) ...
    assert {json.loads(m["Body"])["id"] for m in raw_receive(app, routes.route("work", "high"))} == {
        item_high
    }
    assert {json.loads(m["Body"])["id"] for m in raw_receive(app, routes.route("work", "low"))} == {tx_low}
    fifo = raw_receive(app, routes.route("device", "fifo"))
    assert {(json.loads(m["Body"])["id"], m["Attributes"]["MessageGroupId"]) for m in fifo} == {
        (item_keyed, "dev-7"),
        (tx_keyed, "dev-8"),
    }
    # ... and each record's pending entry was cleared once its message left
    for job_id in (item_high, item_keyed, tx_low, tx_keyed):
        assert app.get(job_id).status is JobStatus.QUEUED
        item = raw_record(app, job_id)
        assert "attn" not in item and "payload" not in item, (job_id, sorted(item))


def raw_record(app, job_id: str) -> dict:
    """The raw record: the pending entry (``attn``) and the kept payload are gone once the message left."""
    return app.run(
        one(
            Call("dynamodb", "get_item", {"TableName": app.settings.table_name, "Key": {"id": {"S": job_id}}})
        )
    )["Item"]


def test_routing_options_a_queue_cannot_take_are_refused_before_anything_is_sent(app):
    sent_before = app.requests.counts.copy()
    with pytest.raises(RoutingError, match="priority must be one of"):
        app.enqueue("work.run", {}, priority="urgent")
    with pytest.raises(RoutingError, match="has no priority levels"):
        app.enqueue("device.command", {}, priority="high")
    with pytest.raises(RoutingError, match="takes no serialize_key"):
        app.enqueue("work.run", {}, serialize_key="k")
    with pytest.raises(RoutingError, match="not both"):
        app.enqueue("device.command", {}, serialize_key="k", priority="low")
    with pytest.raises(RoutingError, match="message group id"):
        app.enqueue("device.command", {}, serialize_key="with space")
    assert app.requests.counts == sent_before


def test_a_types_default_priority_applies_and_an_enqueue_overrides_it(ministack_url, make_app):
    app = make_app(ministack_url, **ROUTED)

    @app.job("bulk.export", queue="work", priority="low")
    def export(payload: dict, ctx: object) -> None: ...

    app.provision()
    default = app.enqueue("bulk.export", {})
    urgent = app.enqueue("bulk.export", {}, priority="high")
    assert (app.get(default).priority, app.get(urgent).priority) == ("low", "high")


def test_a_serialized_job_with_a_delay_holds_its_key_until_due(app, start_workers, tmp_path):
    # GIVEN a key's first job due in 3 s and its second due now (FIFO takes no per-message delay)
    log = tmp_path / "runs.jsonl"
    t0 = time.monotonic()
    app.enqueue("device.command", {"label": "first", "log": str(log)}, serialize_key="d1", delay=3)
    app.enqueue("device.command", {"label": "second", "log": str(log)}, serialize_key="d1")
    start_workers(1, 2, "device")
    wait_until(lambda: len(read_log(log)) == 2, 30, "both runs")
    # THEN the first runs when due, and the second only after it: the key keeps enqueue order
    first, second = starts(log)
    assert (first["label"], second["label"]) == ("first", "second")
    # A claim may start a job up to the clock-skew allowance before its run_at (a worker that first
    # polls late takes it at once): that is the bound, not the delay itself.
    assert first["start"] - t0 >= 3 - CLOCK_SKEW_S - 0.1


def test_a_key_keeps_its_order_when_the_worker_running_its_job_is_killed(app, start_workers, tmp_path):
    # GIVEN a key's first job running on a worker, its second waiting
    log = tmp_path / "runs.jsonl"
    started = Path(f"{log}.started")
    first = app.enqueue(
        "device.command", {"label": "first", "log": str(log), "sleep": 2.0}, serialize_key="d"
    )
    app.enqueue("device.command", {"label": "second", "log": str(log)}, serialize_key="d")
    start_workers(1, 4, "device")
    wait_until(lambda: read_log(started), 30, "the first job's start")
    # WHEN that worker is killed (-9) mid-job, and another worker takes over
    victim = start_workers.procs[0]
    victim.kill()
    victim.wait(10)
    start_workers(1, 4, "device")
    wait_until(lambda: len(read_log(log)) == 2, 60, "both jobs finished")
    # THEN the first job runs again (after its lease) before the second starts: the key keeps its order
    assert [(r["label"], r["attempt"]) for r in sorted(read_log(started), key=lambda r: r["start"])] == [
        ("first", 1),
        ("first", 2),
        ("second", 1),
    ]
    assert app.get(first).attempt == 2


def test_a_draining_worker_puts_back_the_key_members_it_had_not_started(ministack_url, make_app, tmp_path):
    # GIVEN a worker (90 s visibility: a message it kept in flight would come back only after that)
    # that received three jobs of one key in one batch and runs the first
    app = make_app(ministack_url, visibility_timeout_s=90, **ROUTED)
    app.registry.include(routing.app.registry)
    app.provision()
    log = tmp_path / "runs.jsonl"
    started = Path(f"{log}.started")
    app.enqueue_many(
        [
            JobRequest("device.command", {"label": f"j{n}", "log": str(log), "sleep": 1.0}, serialize_key="d")
            for n in range(3)
        ]
    )
    command = [
        sys.executable,
        "-m",
        "sqsjobs",
        "worker",
        "--app",
        APP,
        "--queues",
        "device",
        "--concurrency",
        "4",
    ]
    env = worker_env(app, **ROUTED_ENV)
    first = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: read_log(started), 30, "the first job's start")
        # WHEN it is told to stop (SIGTERM): it finishes the running job and exits
        first.terminate()
        assert first.wait(30) == 0
    finally:
        first.kill()
    # THEN a new worker runs the other two, in order, well before a 90 s visibility timeout could
    # have brought them back: the draining worker put them back
    t0 = time.monotonic()
    second = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: len(read_log(log)) == 3, 120, "all three jobs")
    finally:
        second.kill()
        second.wait(10)
    assert [r["label"] for r in starts(log)] == ["j0", "j1", "j2"]
    # (60 s: far from the 90 s a kept message takes, whatever the machine's load; one came at 24 s)
    assert min(r["start"] for r in read_log(started) if r["label"] == "j1") - t0 < 60
