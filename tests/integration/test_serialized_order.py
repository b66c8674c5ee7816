"""Serialize keys keep their order however long their jobs are deferred: real worker processes on MiniStack.

Three worker processes run nine keyed jobs over three keys while a limit, a pause or a breaker
holds them back for several redrive limits' worth of deferrals (the redrive limit is 8 receives,
the deferrals come every second), and one of those workers is SIGKILLed (or drained) meanwhile. Evidence comes
from outside the workers: the handlers' run log (``tests/apps/ordered.py``), the workers' own log
lines (``job deferred``, counted) and the queues.
"""

from __future__ import annotations

import itertools
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sqsjobs import JobRequest, JobStatus
from sqsjobs.envelope import DLQ_JOB_ID
from sqsjobs.limits.namespace import state_flow
from sqsjobs.transport import routes
from sqsjobs.transport.lifespan import RESEND_MARGIN
from tests.apps import ordered
from tests.integration.helpers import (
    attr,
    depth,
    kill_group,
    receive_dlq,
    sqs_call,
    wait_until,
    worker_env,
    worker_process,
)

pytestmark = pytest.mark.slow

APP = "tests.apps.ordered:app"
REDRIVE = 8
ENV = {
    "SQSJOBS_SERIALIZED_QUEUES": "device",
    "SQSJOBS_MAX_RECEIVE_COUNT": str(REDRIVE),
    "SQSJOBS_DEFER_RECHECK_MAX_S": "1",
    "SQSJOBS_LOG_LEVEL": "INFO",  # the workers log each deferral: the test counts them
}
KEYS = ("k0", "k1", "k2")


def device_worker(app, log: Path, env: dict[str, str] = ENV) -> subprocess.Popen[bytes]:
    """A worker of the keyed queue whose JSON log lines go to ``log`` (the deferrals are counted there)."""
    argv = [
        sys.executable,
        "-m",
        "sqsjobs",
        "worker",
        "--app",
        APP,
        "--concurrency",
        "2",
        "--queues",
        "device",
    ]
    with log.open("wb") as out:
        return subprocess.Popen(
            argv, env=worker_env(app, **env), stdout=out, stderr=out, start_new_session=True
        )


def deferrals(logs: list[Path]) -> list[int]:
    """``job deferred`` lines per worker log."""
    return [sum('"job deferred"' in line for line in p.read_text().splitlines()) for p in logs]


def deferred_at(log: Path) -> set[int]:
    """The receive counts of the ``job deferred`` lines in a worker's log."""
    lines = log.read_text().splitlines() if log.exists() else []
    return {json.loads(line)["receive_count"] for line in lines if '"job deferred"' in line}


def breaker(app) -> str | None:
    state = app.run(state_flow(app.settings.table_name, app.registry, app.limits, now=time.time()))
    return next(lim.breaker for lim in state.limits if lim.name == "dep")


def read_runs(path: Path) -> list[dict]:
    lines = path.read_text().splitlines() if path.exists() else []
    return sorted((json.loads(line) for line in lines), key=lambda r: r["start"])


@pytest.mark.parametrize(
    ("wait", "stop"), [("limit", "kill"), ("pause", "kill"), ("breaker", "kill"), ("limit", "drain")]
)
def test_keys_start_in_enqueue_order_after_deferrals_past_the_redrive_limit_and_a_kill(
    ministack_url, make_app, tmp_path, wait, stop
):
    # GIVEN a serialized queue with a redrive limit of 6 receives, deferrals rechecked every second
    app = make_app(
        ministack_url, serialized_queues={"device"}, max_receive_count=REDRIVE, defer_recheck_max_s=1
    )
    app.registry.include(ordered.app.registry)
    app.limits.include(ordered.app.limits)
    app.provision()
    job_type = f"keyed.{wait}"
    release, started = tmp_path / "release", tmp_path / "started"
    # The holder and the probe run under a long lease: on a loaded machine a late renewal of a 5 s
    # lease let the probe's lapse and a keyed job take the breaker's probe (CI: no deferrals).
    others = [worker_process(app, APP, concurrency=2, queues="default", **ENV, SQSJOBS_LEASE_S="60")]
    # ... and what holds the keyed jobs back: the limit's only slot taken, the type paused, the breaker open
    dead: set[str] = set()  # the jobs meant to end in a DLQ
    if wait == "limit":
        app.enqueue("hold", {"release": str(release), "started": str(started)})
        wait_until(started.exists, 30, "the holder's start")
    elif wait == "pause":
        app.limits.pause(job_type)
    else:  # opened by a failure, then half-open while its probe runs
        dead.add(app.enqueue("trip", {}))
        wait_until(lambda: breaker(app) == "open", 30, "the breaker open")
        app.enqueue("probe", {"release": str(release), "started": str(started)})
        wait_until(started.exists, 30, "the probe's start")
    logs = [tmp_path / f"worker{n}.log" for n in range(3)]
    workers = [device_worker(app, p) for p in logs]
    try:
        # WHEN nine jobs over three keys are enqueued, interleaved, and wait far past the redrive limit
        runs = tmp_path / "runs.jsonl"
        jobs = app.enqueue_many(
            [
                JobRequest(job_type, {"label": f"{key}-{n}", "log": str(runs)}, serialize_key=key)
                for n in range(3)
                for key in KEYS
            ]
        )
        wait_until(lambda: sum(deferrals(logs)) >= REDRIVE * len(KEYS), 60, "a redrive limit's worth")
        # ... a worker that deferred a key's head is SIGKILLed (or drained: SIGTERM, and it exits) ...
        victim = max(range(3), key=lambda n: deferrals(logs)[n])
        if stop == "kill":
            kill_group(workers[victim])
        else:
            workers[victim].send_signal(signal.SIGTERM)
            assert workers[victim].wait(30) == 0
        # ... and the others wait on, three redrive limits' worth per key in all
        wait_until(
            lambda: sum(deferrals(logs)) >= 3 * REDRIVE * len(KEYS), 120, "three redrive limits' worth"
        )
        if wait == "pause":
            app.limits.resume(job_type)
        else:  # the holder ends; the probe succeeds and closes the breaker
            release.touch()
        wait_until(
            lambda: all(app.get(j, load_result=False).status is JobStatus.SUCCEEDED for j in jobs),
            120,
            "every keyed job succeeded",
        )
        done = read_runs(runs)
        # THEN each ran exactly once ...
        assert sorted(r["label"] for r in done) == sorted(f"{k}-{n}" for k in KEYS for n in range(3))
        for key in KEYS:
            mine = [r for r in done if r["label"].startswith(key + "-")]
            # ... in enqueue order ...
            assert [r["label"] for r in mine] == [f"{key}-{n}" for n in range(3)], (key, mine)
            # ... never overlapping
            for before, after in itertools.pairwise(mine):
                assert before["end"] <= after["start"], (before, after)
        # AND the deferrals spent no receives: a job's are its first, the stop's (its worker killed
        # or drained) and one per head before it that waited in place (putting it back behind
        # itself), never within RESEND_MARGIN of the redrive limit, where it would yield its place
        counts = [
            json.loads(line)["receive_count"]
            for p in logs
            for line in p.read_text().splitlines()
            if '"job deferred"' in line
        ]
        assert len(counts) >= 3 * REDRIVE * len(KEYS), len(counts)
        assert max(counts) < REDRIVE - RESEND_MARGIN, sorted(counts)
        assert all(app.get(j).extra.get("order_yielded") is None for j in jobs)
        # AND no keyed job's message went to any DLQ (the worker's own, or SQS's redrive backstop)
        assert depth(app, "device", dlq=True) == {"visible": 0, "in_flight": 0, "delayed": 0}
        assert {attr(m, DLQ_JOB_ID) for m in receive_dlq(app, "default")} == dead
        backstop = sqs_call(app, "get_queue_url", QueueName=routes.fifo_dlq_name(app.settings, "device"))
        attrs = sqs_call(app, "get_queue_attributes", QueueUrl=backstop["QueueUrl"], AttributeNames=["All"])[
            "Attributes"
        ]
        assert (
            int(attrs["ApproximateNumberOfMessages"]) + int(attrs["ApproximateNumberOfMessagesNotVisible"])
            == 0
        )
    finally:
        release.touch()
        kill_group(*workers, *others)


def test_a_keyed_job_waiting_on_a_token_lets_its_key_go_on_and_its_record_says_so(
    ministack_url, make_app, tmp_path
):
    # GIVEN a key whose first job waits on a token, and two jobs enqueued behind it
    app = make_app(ministack_url, serialized_queues={"device"})
    app.registry.include(ordered.app.registry)
    app.limits.include(ordered.app.limits)
    app.provision()
    runs = tmp_path / "runs.jsonl"
    first = app.enqueue("keyed.approval", {"label": "k-0", "log": str(runs)}, serialize_key="k")
    later = [
        app.enqueue("keyed.pause", {"label": f"k-{n}", "log": str(runs)}, serialize_key="k") for n in (1, 2)
    ]
    worker = worker_process(app, APP, concurrency=2, queues="device", **ENV)
    try:
        # WHEN the first waits for its answer
        token = tmp_path / "runs.jsonl.token"
        wait_until(token.exists, 30, "the token handed out")
        # THEN the key goes on without it (the guarantee names this wait) ...
        wait_until(lambda: len(read_runs(runs)) == 2, 30, "the later jobs run")
        # ... and its record says it gave up its place, as `sqsjobs jobs get` shows
        shown = subprocess.run(
            [sys.executable, "-m", "sqsjobs", "jobs", "get", first, "--app", APP],
            env=worker_env(app, **ENV),
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
        assert "order yielded" in shown and "waits on a token" in shown, shown
        assert app.get(later[0]).extra.get("order_yielded") is None
        # AND once answered it runs, after them
        app.tokens.complete(token.read_text(), "yes")
        wait_until(lambda: app.get(first).status is JobStatus.SUCCEEDED, 30, "the first job's run")
    finally:
        kill_group(worker)
    assert [r["label"] for r in read_runs(runs)] == ["k-1", "k-2", "k-0"]


def test_a_head_that_spends_its_receives_yields_its_place_and_its_record_says_so(
    ministack_url, make_app, tmp_path
):
    # GIVEN a redrive limit of 4 receives (a waiting head is re-sent once received 2 times), a key of
    # two jobs whose head is deferred by the limit's slot, held
    env = {**ENV, "SQSJOBS_MAX_RECEIVE_COUNT": "4"}
    app = make_app(ministack_url, serialized_queues={"device"}, max_receive_count=4, defer_recheck_max_s=1)
    app.registry.include(ordered.app.registry)
    app.limits.include(ordered.app.limits)
    app.provision()
    release, started, runs = tmp_path / "release", tmp_path / "started", tmp_path / "runs.jsonl"
    others = [worker_process(app, APP, concurrency=2, queues="default", **env)]
    app.enqueue("hold", {"release": str(release), "started": str(started)})
    head, later = (
        app.enqueue("keyed.limit", {"label": f"k-{n}", "log": str(runs)}, serialize_key="k") for n in (0, 1)
    )
    workers: list[subprocess.Popen[bytes]] = []
    try:
        wait_until(started.exists, 30, "the holder's start")
        # WHEN two workers in turn hold the head in place and are drained: a receive each
        for n, count in enumerate((1, 2)):
            log = tmp_path / f"worker{n}.log"
            workers.append(worker := device_worker(app, log, env))
            wait_until(
                lambda log=log, count=count: count in deferred_at(log), 30, f"a deferral at receive {count}"
            )
            worker.send_signal(signal.SIGTERM)
            assert worker.wait(30) == 0
        # THEN the second drain re-sent it rather than let a third receive near SQS's redrive: the
        # job is kept, its place is not, and its record says so
        noted = app.get(head).extra.get("order_yielded", {}).get("S", "")
        assert "re-sent to the end of its key: received 2 times, near the redrive limit" in noted, noted
        assert app.get(later).extra.get("order_yielded") is None
        workers.append(device_worker(app, tmp_path / "worker2.log", env))
        release.touch()
        wait_until(
            lambda: all(app.get(j).status is JobStatus.SUCCEEDED for j in (head, later)), 60, "both ran"
        )
    finally:
        release.touch()
        kill_group(*workers, *others)
    assert [r["label"] for r in read_runs(runs)] == ["k-1", "k-0"]
    assert depth(app, "device", dlq=True) == {"visible": 0, "in_flight": 0, "delayed": 0}
