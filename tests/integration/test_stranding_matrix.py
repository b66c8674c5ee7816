"""The stranding matrix: every feature crossed with every disturbance, through real processes on MiniStack.

Rows (``MATRIX_ROWS``, built by ``tests/integration/matrix_rows.py``): a plain job, a chain step, a
batch item, a serialized key's, a limited one, a paused type's, one a breaker deferred, a priority
level's, one enqueued in a transaction, a claim-checked S3 payload, a foreign message (sent by a
producer that is not sqsjobs), a batch handler's job, a job of two durable steps, one asleep
(``ctx.sleep``) when the disturbance hits, a ``unique="while_active"`` job and a debounced one (its
window open when the disturbance hits: the key's later enqueue, whose payload alone is counted,
lands while it waits), a job waiting on a token, a hook's job (an ``on_succeeded`` hook enqueued by
its ended job's finish), a schedule's fire (its message as EventBridge Scheduler sends it, which a
worker turns into the occurrence's job) and an outbox row (committed in a Postgres transaction,
moved into the table and the queue by a relay process). Columns, one test each, whose cells share
one app and one set of worker processes: deferred 20 times and more (past the redrive limit),
retried past the message retention, expired by the sweeper, worker SIGKILLed mid-job, redriven by
SQS, SIGTERM during a long poll. Each cell ends terminal with a reason that says what happened (or
runs the expected number of times, and calls each durable step's function once), and each column
ends with the stranded-record audit (``sqsjobs doctor --stranded``) finding no record without a
witness. No cell is left out, though some rows take a column's disturbance their own way:

- the stepped job is disturbed between its two steps (killed, deferred by a pause, retried past
  the retention); where no worker ran it before the disturbance (redriven, held until expired,
  enqueued as a worker drains) its steps come after, as a plain job's run does;
- the asleep job sleeps through the kill (it wakes on the rescuer), wakes into a pause (deferred
  20 times), sleeps as long as the retention (held in its record), sleeps past its own deadline (it
  started, so it is not expired: expiry bounds a first start), and falls asleep on the worker that
  then drains; in the redrive column no worker serves its queue before the redrive, so its message
  is redriven before its first run, and then it sleeps as often as SQS receives a message before
  redriving it (each wake-up is a receive: the message must be re-sent, not re-armed, near the
  limit);
- the debounced job's window is open when the worker is killed, as the pause defers it, as its
  deadline passes (its attention entry, due a minute after its maximum wait, is the sweeper's
  way to it), as SQS redrives its bare message, and through a burst of enqueues as a worker drains
  (each pushes its start, so its hint is received, not yet due, more often than the redrive
  limit); past the retention it retries, as a plain job does (a window longer than the retention
  would only wait for its entry);
- the token's job waits on its token as the asleep one sleeps: through the kill (answered once the
  worker died, it wakes on the rescuer), answered while its type is paused (deferred 20 times), past
  its own deadline (it started, so it is not expired), longer than the retention (held in its record;
  answered once the retried rows ran again), and on the worker that then drains (answered as the next
  one starts); in the redrive column it is redriven before its first run, and waits after it;
- the hook's job is its ended job's (which ran first, on the deps worker in the redrive column); in
  the expiry column the hook and the fire's job are of a type on the queue no worker serves yet, as
  the chain step is, and the worker that then receives them expires them;
- the schedule's fire is redriven as the bare fire it is, before any worker turned it into a job:
  there is no record yet, so the reconciler sends the fire itself back to its queue (the count on
  the message bounds it), and a worker then enqueues and runs its occurrence's job once. In every
  other column the fire's job takes the disturbance;
- the outbox row is committed while its column's disturbance is in force (held 1,000 s in the
  expiry column, no worker on its queue in the redrive one, its type paused in the deferral one,
  as the worker drains), and its job then takes it; the kill column kills (-9) the relay with the
  worker.

Limits are shortened through settings (redrive after 3 receives, a 1 KiB inline payload, 5 s
leases, a 60 s retention) so each column takes seconds, the retention's about a minute.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from sqsjobs import JobStatus, WhileActive
from sqsjobs.errors import JobNotFound
from sqsjobs.job import TERMINAL
from sqsjobs.ops.stranded import find_stranded
from sqsjobs.runtime.sweeper import sweep
from sqsjobs.store.codec import idempotent_job_id
from sqsjobs.transport import routes
from tests.apps import stranding
from tests.integration.helpers import (
    kill_group,
    queue_url,
    send_raw,
    sqs_call,
    wait_until,
    worker_env,
    worker_process,
)
from tests.integration.matrix_rows import (
    MATRIX_ROWS,
    ONCE_EACH,
    answer,
    asleep_now,
    debounce_first,
    fall_asleep,
    fire,
    hook_of,
    hooked,
    keep_gathering,
    newest,
    one_of_each,
    outboxed,
    regather,
    relayed,
    runs,
    step_calls,
    steps_called,
    wait_on_token,
    waiting_on_token,
)
from tests.outbox import conftest as outbox_fixtures

pytestmark = pytest.mark.slow

#: The outbox row's fixtures: a Postgres server per xdist worker, a fresh database per test.
postgres, dsn = outbox_fixtures.postgres, outbox_fixtures.dsn

APP = "tests.apps.stranding:app"
SETTINGS = {
    "priority_queues": {"work"},
    "serialized_queues": {"device"},
    "max_receive_count": 3,
    "inline_payload_bytes": 1024,
}
#: The drain column's debounce quiet period: its burst enqueues every quarter of it for 12 s (four
#: receives of the bare hint, one more than the redrive limit), each enqueue landing well inside the
#: window even when the suite's load makes one take a second or more.
DRAIN_QUIET_S = 3
ENV = {
    "SQSJOBS_PRIORITY_QUEUES": "work",
    "SQSJOBS_SERIALIZED_QUEUES": "device",
    "SQSJOBS_MAX_RECEIVE_COUNT": "3",
    "SQSJOBS_INLINE_PAYLOAD_BYTES": "1024",
}
QUEUES = "default,work,device"


@pytest.fixture
def app(ministack_url, make_app):
    app = make_app(ministack_url, **SETTINGS)
    app.registry.include(stranding.app.registry)
    app.limits.include(stranding.app.limits)  # an in-process sweep builds the kernel, which checks them
    app.provision()
    return app


def exists(app, job_id: str) -> bool:
    try:
        app.get(job_id, load_result=False)
    except JobNotFound:
        return False
    return True


def everything_finished(app, jobs: dict[str, str], batch_id: str, chain_id: str) -> bool:
    """Every row's job, the chain, the batch and the batch's completion callback succeeded.

    The callback is a job of its own, enqueued when the batch completes: until it has run, it is a
    queued record whose witness is its message, which the audit (no grace) cannot see.
    """
    batch = app.batches.get(batch_id)
    return (
        all(app.get(j, load_result=False).status is JobStatus.SUCCEEDED for j in jobs.values())
        and batch.status == "complete"
        and batch.callback_id is not None
        and app.get(batch.callback_id, load_result=False).status is JobStatus.SUCCEEDED
        and app.chains.get(chain_id).status == "succeeded"
    )


def source_urls(app) -> list[str]:
    """Every SQS queue a job's message travels in: the plain queue, each priority level, the FIFO queue."""
    names = [
        routes.queue_name(app.settings, key)
        for q in QUEUES.split(",")
        for key in routes.routes_of(app.settings, q)
    ]
    return [sqs_call(app, "get_queue_url", QueueName=n)["QueueUrl"] for n in names]


def depth(app, url: str, *, delayed: bool = False) -> int:
    """Messages in the queue (with ``delayed``, those whose delay is not over yet too)."""
    attrs = sqs_call(app, "get_queue_attributes", QueueUrl=url, AttributeNames=["All"])["Attributes"]
    shown = int(attrs["ApproximateNumberOfMessages"]) + int(attrs["ApproximateNumberOfMessagesNotVisible"])
    return shown + (int(attrs.get("ApproximateNumberOfMessagesDelayed", 0)) if delayed else 0)


def sweep_once(app) -> None:
    subprocess.run(
        [sys.executable, "-m", "sqsjobs", "sweep", "--once", "--app", APP],
        env=worker_env(app, **ENV),
        check=True,
        capture_output=True,
        timeout=60,
    )


def outbox_relay(app, dsn: str, **env: str) -> subprocess.Popen[bytes]:
    """A relay process moving the outbox row's database into ``app`` (idle, it waits on LISTEN/NOTIFY)."""
    return subprocess.Popen(
        [sys.executable, "-m", "sqsjobs", "outbox", "relay", "--app", APP, "--dsn", dsn],
        env=worker_env(app, POWERTOOLS_METRICS_DISABLED="true", **ENV, **env),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def test_every_feature_whose_message_sqs_redrove_is_brought_back_and_runs_once(app, tmp_path, dsn):
    # GIVEN a dependency whose breaker a failed run opened and whose probe now runs long, on a
    # worker that serves only that dependency's queue
    log = tmp_path / "runs"
    prober = worker_process(app, APP, concurrency=2, queues="deps", **ENV)
    relay = outbox_relay(app, dsn)
    worker = None
    try:
        tripped = app.enqueue("dep.trip", {})
        wait_until(lambda: app.get(tripped, load_result=False).status is JobStatus.DEAD, 60, "breaker opened")
        # (it runs until the sweep below is over: a 25 s sleep ended before it once under the suite's load)
        probe_done = tmp_path / "probe-done"
        probe = app.enqueue("dep.probe", {"runs": str(log), "sleep_first_s": 90, "until": str(probe_done)})
        wait_until(lambda: runs(log)[probe] == 1, 60, "the probe admitted")
        # ...one job of every feature, a paused type's and the dependency's among them, a foreign
        # message, and no worker on their queues
        jobs, batch_id, chain_id = one_of_each(app, log)
        app.limits.pause("paused.run")
        jobs["paused"] = app.enqueue("paused.run", {"runs": str(log)})
        jobs["breaker-deferred"] = app.enqueue("breaker.run", {"runs": str(log)})
        foreign = json.dumps(
            {"sqsjobs": 1, "type": "plain", "payload": {"runs": str(log)}, "idempotency_key": "r"}
        )
        send_raw(app, foreign)
        jobs |= newest(app, log, "r")
        # (the asleep row's job runs after the redrive, and sleeps as often as SQS receives a
        # message before it redrives it: each wake-up is a receive)
        jobs["asleep"] = fall_asleep(app, log, 1, naps=SETTINGS["max_receive_count"])
        jobs["debounced"] = debounce_first(app, log, "r", 2)
        regather(app, log, jobs, "r", 2)
        # (the token's job, too, is redriven before its first run: it waits on its token after; the
        # hook's job is enqueued by its ended job's finish on the deps worker; the schedule's fire
        # is redriven as the bare fire it is, before any worker turned it into a job)
        jobs["token wait"] = wait_on_token(app, log)
        ended = hooked(app, log, "hooked.deps")
        wait_until(lambda: hook_of(app, ended) is not None, 60, "the hook's job enqueued")
        jobs["hook's job"] = str(hook_of(app, ended))
        fired = fire(app, log, "r")
        jobs["outbox row"] = outboxed(app, dsn, log)
        wait_until(lambda: relayed(dsn), 60, "the relay moved the outbox row")
        # WHEN SQS redrives every message (received, never finished, past the redrive limit; the
        # debounced job's bare hint once its delay is over)
        urls = source_urls(app)
        deadline = time.monotonic() + 60
        while any(depth(app, u, delayed=True) for u in urls):
            assert time.monotonic() < deadline, "SQS did not redrive every message"
            for url in urls:
                sqs_call(app, "receive_message", QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=0)
        # THEN the records still say the jobs are on their way, with nothing left in a queue to bring them...
        assert {f: app.get(j, load_result=False).status for f, j in jobs.items()} == dict.fromkeys(
            jobs, JobStatus.QUEUED
        )
        # ...until one sweep reconciles the DLQs, and a worker runs every job once: the paused one
        # once resumed, the dependency's once its probe closed the breaker (deferred until then),
        # the schedule's occurrence once its fire, sent back by the sweep, reached the worker.
        # The foreign message never became a job: no record says it is on its way, and it stays in
        # the DLQ, the one place that shows it (``sqsjobs dlq``).
        assert not exists(app, fired)
        sweep_once(app)
        assert app.get(probe, load_result=False).status is JobStatus.RUNNING, "the probe ended too soon"
        probe_done.touch()
        worker = worker_process(app, APP, concurrency=8, queues=QUEUES, **ENV)
        wait_until(lambda: waiting_on_token(app, log, jobs["token wait"]), 60, "the job waiting on its token")
        answer(app, log, jobs["token wait"])
        others = {f: j for f, j in jobs.items() if f != "paused"}
        wait_until(lambda: everything_finished(app, others, batch_id, chain_id), 90, "every job finished")
        wait_until(lambda: exists(app, fired) and app.get(fired).status.terminal, 60, "the fire's job")
        app.limits.resume("paused.run")
        wait_until(lambda: everything_finished(app, jobs, batch_id, chain_id), 60, "the paused job finished")
    finally:
        kill_group(*(p for p in (prober, relay, worker) if p is not None))
    # (every row but the foreign message and the schedule's fire, which never became jobs)
    assert set(jobs) == set(MATRIX_ROWS) - {"foreign message", "schedule fire"}
    assert {f: runs(log)[j] for f, j in jobs.items()} == {
        **dict.fromkeys(jobs, 1),
        "asleep": SETTINGS["max_receive_count"] + 1,
        "token wait": 2,
    }
    assert step_calls(log, jobs) == ONCE_EACH
    redispatched = {f: record_of(app, j).get("dlq_redispatches", {}).get("N") for f, j in jobs.items()}
    assert redispatched == dict.fromkeys(jobs, "1")
    probed = app.get(probe, load_result=False)
    assert probed.status is JobStatus.SUCCEEDED
    assert app.get(jobs["breaker-deferred"], load_result=False).started_at >= probed.finished_at
    assert not exists(app, idempotent_job_id("plain", "r"))
    # ...while the schedule's occurrence ran once, from its fire sent back, and only the foreign
    # message is left in the DLQ
    assert app.get(fired).status is JobStatus.SUCCEEDED and runs(log)[fired] == 1
    dlq = sqs_call(app, "receive_message", QueueUrl=queue_url(app, dlq=True), MaxNumberOfMessages=10)
    assert [m["Body"] for m in dlq.get("Messages", [])] == [foreign]
    no_record_without_a_witness(app)


def record_of(app, job_id: str) -> dict:
    return app.clients.boto3.get("dynamodb").get_item(
        TableName=app.settings.table_name, Key={"id": {"S": job_id}}, ConsistentRead=True
    )["Item"]


def test_every_feature_whose_worker_is_killed_mid_job_runs_again_without_the_sweeper(app, tmp_path, dsn):
    # GIVEN one job of every feature, each running on one worker (its first attempt sleeps): the
    # breaker's as the probe admitted after a failed run opened it; a paused type's, deferred
    log = tmp_path / "runs"
    victim = worker_process(app, APP, concurrency=22, queues=QUEUES, **ENV)
    relay = outbox_relay(app, dsn)
    rescuer = None
    try:
        # (the asleep row's job sleeps through the kill: it wakes on the rescuer; the token's job
        # waits on its token through it, answered once the worker died)
        asleep = fall_asleep(app, log, 25)
        waiting = wait_on_token(app, log)
        tripped = app.enqueue("breaker.trip", {})
        wait_until(lambda: app.get(tripped, load_result=False).status is JobStatus.DEAD, 60, "breaker opened")
        app.limits.pause("paused.run")
        p = {"runs": str(log), "sleep_first_s": 30}
        jobs, batch_id, chain_id = one_of_each(app, log, sleep_first_s=30)
        jobs["breaker-deferred"] = app.enqueue("breaker.run", p)
        jobs["paused"] = app.enqueue("paused.run", p)
        send_raw(app, json.dumps({"sqsjobs": 1, "type": "plain", "payload": p, "idempotency_key": "kill"}))
        jobs["foreign message"] = idempotent_job_id("plain", "kill")
        jobs |= newest(app, log, "kill", sleep_first_s=30)
        jobs["asleep"] = asleep
        jobs["token wait"] = waiting
        jobs["schedule fire"] = fire(app, log, "kill", sleep_first_s=30)
        ended = hooked(app, log, sleep_first_s=30)
        jobs["outbox row"] = outboxed(app, dsn, log, sleep_first_s=30)
        wait_until(lambda: hook_of(app, ended) is not None, 60, "the hook's job enqueued")
        jobs["hook's job"] = str(hook_of(app, ended))
        running = [j for f, j in jobs.items() if f != "paused"]
        wait_until(lambda: all(runs(log)[j] == 1 for j in running), 60, "every job started")
        wait_until(lambda: steps_called(log, jobs["stepped"]) == (1, 0), 30, "the first step taken")
        assert asleep_now(app, log, asleep)
        assert waiting_on_token(app, log, waiting)
        # WHEN that worker is killed (-9) mid-job (the stepped job between its two steps, the
        # debounced one's window open), and the outbox's relay with it, and another worker runs,
        # with no sweeper; the pause ends
        jobs["debounced"] = debounce_first(app, log, "kill", 4)
        kill_group(victim, relay)
        regather(app, log, jobs, "kill", 4)
        assert set(jobs) == set(MATRIX_ROWS)
        rescuer = worker_process(app, APP, concurrency=22, queues=QUEUES, **ENV)
        app.limits.resume("paused.run")
        answer(app, log, waiting)
        # THEN every job runs again once its lease expires (the paused one, deferred by the dead
        # worker, runs once), and its workflow goes on
        wait_until(
            lambda: everything_finished(app, jobs, batch_id, chain_id), 90, "every feature's job finished"
        )
    finally:
        kill_group(*(p for p in (victim, relay, rescuer) if p is not None))
    # (the asleep job ran before its sleep and after it, on one attempt: a sleep gives it back, as a
    # wait on a token does; the debounced one had not started)
    expected = {**dict.fromkeys(MATRIX_ROWS, 2), "paused": 1, "debounced": 1}
    assert {f: runs(log)[j] for f, j in jobs.items()} == expected
    attempts = {**expected, "asleep": 1, "token wait": 1}
    assert {f: app.get(j, load_result=False).attempt for f, j in jobs.items()} == attempts
    # ...and the step taken before the kill (or the sleep) is not called again
    assert step_calls(log, jobs) == ONCE_EACH
    no_record_without_a_witness(app)


def logged_worker(app, log: Path, **env: str) -> subprocess.Popen[bytes]:
    """A worker whose JSON log lines go to ``log`` (its deferrals are counted there)."""
    argv = [
        sys.executable,
        "-m",
        "sqsjobs",
        "worker",
        "--app",
        APP,
        "--concurrency",
        "14",
        "--queues",
        QUEUES,
    ]
    with log.open("wb") as out:
        return subprocess.Popen(
            argv,
            env=worker_env(app, SQSJOBS_LOG_LEVEL="INFO", **ENV, **env),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def deferrals(log: Path) -> Counter[str]:
    found: Counter[str] = Counter()
    for line in log.read_text(errors="replace").splitlines():
        if '"job deferred"' in line:
            with contextlib.suppress(ValueError):
                found[json.loads(line).get("job_id", "")] += 1
    return found


#: How long the blockers of the deferral column may hold their limit, breaker probe and pause: they
#: end sooner, once every row was deferred ``MIN_DEFERRALS`` times.
BLOCK_S = 180
#: The deferral column's recheck (``defer_recheck_max_s``, its floor): about one deferral a second.
RECHECK_S = 1
#: Deferrals every row must reach: far past the redrive limit (3), as often as the issue asked.
MIN_DEFERRALS = 20


def test_every_feature_deferred_20_times_keeps_its_message_and_runs_once(app, tmp_path, dsn):
    # GIVEN a worker that looks at a deferred job again every second, a limit whose two slots two
    # long jobs hold, and a breaker that a failed run opened and whose probe runs long; every other
    # row's type paused
    log, worker_log = tmp_path / "runs", tmp_path / "worker.log"
    worker = logged_worker(app, worker_log, SQSJOBS_DEFER_RECHECK_MAX_S=str(RECHECK_S))
    relay = outbox_relay(app, dsn)
    try:
        # (the asleep row's job wakes while its type is paused; the token's job is answered while
        # its type is paused, once every worker sees the pause: below)
        asleep_at, asleep = time.time(), fall_asleep(app, log, 8)
        waiting_at, waiting = time.time(), wait_on_token(app, log)
        wait_until(lambda: asleep_now(app, log, asleep), 30, "the job fell asleep")
        wait_until(lambda: waiting_on_token(app, log, waiting), 30, "the job waiting on its token")
        app.limits.pause("stepped.run")
        app.limits.pause("token.run")
        tripped = app.enqueue("breaker.trip", {})
        wait_until(lambda: app.get(tripped, load_result=False).status is JobStatus.DEAD, 60, "breaker opened")
        # (the blockers hold until the test lets them end: until every row was deferred often enough)
        release = tmp_path / "release"
        block = {"runs": str(log), "sleep_first_s": BLOCK_S, "until": str(release)}
        blockers = [app.enqueue("breaker.run", block)] + [app.enqueue("limited.run", block) for _ in range(2)]
        wait_until(lambda: all(runs(log)[j] == 1 for j in blockers), 60, "the slots and the probe taken")
        paused = ("plain", "work.run", "device.run", "paused.run", "batched.run", "stepped.run", "hook.run")
        for job_type in paused:
            app.limits.pause(job_type)
        # WHEN one job of every feature waits behind them, with a redrive limit of 3 receives
        enqueued = time.time()
        p = {"runs": str(log)}
        jobs, batch_id, chain_id = one_of_each(app, log)
        jobs["paused"] = app.enqueue("paused.run", p)
        jobs["breaker-deferred"] = app.enqueue("breaker.run", p)
        send_raw(app, json.dumps({"sqsjobs": 1, "type": "plain", "payload": p, "idempotency_key": "wait"}))
        jobs["foreign message"] = idempotent_job_id("plain", "wait")
        jobs |= newest(app, log, "wait")
        jobs["asleep"] = asleep
        jobs["token wait"] = waiting
        # (a schedule's fire becomes its job, of a paused type; a hook's job, of a paused type, is
        # enqueued by its ended job's finish)
        jobs["schedule fire"] = fire(app, log, "wait")
        jobs["outbox row"] = outboxed(app, dsn, log)
        ended = hooked(app, log)
        wait_until(lambda: hook_of(app, ended) is not None, 60, "the hook's job enqueued")
        jobs["hook's job"] = str(hook_of(app, ended))
        jobs["debounced"] = debounce_first(app, log, "wait", 2)
        regather(app, log, jobs, "wait", 2)
        assert set(jobs) == set(MATRIX_ROWS)
        answer(app, log, waiting)  # its type paused for seconds: longer than a pause takes to be seen
        # ...until every one was deferred MIN_DEFERRALS times and the blockers end (the pause lifts then)
        wait_until(
            lambda: min(deferrals(worker_log)[j] for j in jobs.values()) >= MIN_DEFERRALS,
            BLOCK_S - 30,
            "every job deferred often enough",
        )
        release.touch()
        wait_until(
            lambda: all(app.get(j, load_result=False).status is JobStatus.SUCCEEDED for j in blockers),
            60,
            "the blockers finished",
        )
        for job_type in (*paused, "token.run"):
            app.limits.resume(job_type)
        # THEN every job runs once: none was moved to a DLQ while it only waited
        wait_until(lambda: everything_finished(app, jobs, batch_id, chain_id), 90, "every job finished")
    finally:
        kill_group(worker, relay)
    assert {f: runs(log)[j] for f, j in jobs.items()} == {
        **dict.fromkeys(MATRIX_ROWS, 1),
        "asleep": 2,
        "token wait": 2,
    }
    assert step_calls(log, jobs) == ONCE_EACH
    deferred = {f: deferrals(worker_log)[j] for f, j in jobs.items()}
    since = {**dict.fromkeys(jobs, enqueued), "asleep": asleep_at, "token wait": waiting_at}
    waited = {f: app.get(j, load_result=False).started_at.timestamp() - since[f] for f, j in jobs.items()}
    # each was deferred at least 20 times, far more often than the redrive limit (3) lets one
    # message be received...
    assert min(deferred.values()) >= MIN_DEFERRALS, deferred
    # ...and waited without spinning: each re-arm hides it for the recheck, and at most one re-sent
    # copy comes back at once in between (a FIFO copy takes no delay; before the gate re-armed such
    # a copy, one was received 153 times in 30 s)
    assert all(deferred[f] <= 2 * waited[f] / RECHECK_S + 2 for f in jobs), (deferred, waited)
    dlqs = [
        sqs_call(app, "get_queue_url", QueueName=name)["QueueUrl"]
        for name in (
            app.settings.dlq_name("default"),
            app.settings.dlq_name("work"),
            app.settings.dlq_name("device"),
            routes.fifo_dlq_name(app.settings, "device"),
        )
    ]
    assert [depth(app, url) for url in dlqs] == [1, 0, 0, 0]  # the failed run that opened the breaker
    no_record_without_a_witness(app)


def no_record_without_a_witness(app) -> None:
    """``sqsjobs doctor --stranded``'s audit, with no grace: every record is finished or witnessed."""
    found = find_stranded(app.run, app.settings, time.time(), segments=2, grace_s=0.0)
    assert found.stranded == [], [s.to_dict() for s in found.stranded]


def test_every_feature_expired_by_the_sweeper_ends_expired_and_its_workflow_hears_of_it(app, tmp_path, dsn):
    # GIVEN one job of every feature, each held (due in 1,000 s) and expiring 1 s after it is due,
    # a paused type's, and a foreign message that a worker turned into a held job
    p = {"runs": str(tmp_path / "runs")}
    later = {"delay": 1000, "expires_after": 1001}
    app.limits.pause("paused.run")
    jobs = {
        "plain": app.enqueue("plain", p, **later),
        "priority level": app.enqueue("work.run", p, priority="high", **later),
        "serialized": app.enqueue("device.run", p, serialize_key="k1", **later),
        "s3 payload": app.enqueue("plain", {**p, "blob": "x" * 4096}, **later),
        "limited": app.enqueue("limited.run", p, **later),
        "paused": app.enqueue("paused.run", p, **later),
        "breaker-deferred": app.enqueue("breaker.run", p, **later),
    }
    batch = app.batches.create("batch.done")
    jobs["batch item"] = batch.add("plain", p, **later)
    batch.seal()
    # a chain step cannot be held, and an unblocked step's witness is its hint (its pending entry is
    # cleared once the hint is sent): the sweeper never sees it. Its second step, on a queue no
    # worker serves yet, waits past its deadline; the worker that then receives it expires it.
    chain_id = app.chains.start([("plain", p), ("aside.run", p)])
    jobs["chain step"] = app.chains.get(chain_id).steps[1].job_id
    with app.transaction() as tx:
        jobs["transaction"] = tx.enqueue("plain", p, **later)
    send_raw(
        app,
        json.dumps(
            {"sqsjobs": 1, "type": "brief.run", "payload": p, "idempotency_key": "far", "delay_s": 1000}
        ),
    )
    jobs["foreign message"] = idempotent_job_id("brief.run", "far")
    jobs |= newest(app, tmp_path / "runs", "far", options=later)
    # a debounced job whose window (1,000 s, at most) is open when its deadline passes: its bare hint
    # is delayed 900 s (SQS's most), its attention entry due a minute after its maximum wait
    debounce_far = {"max_s": 1000, "expires_after": 1001}
    jobs["debounced"] = debounce_first(app, tmp_path / "runs", "far", 1000, **debounce_far)
    regather(app, tmp_path / "runs", jobs, "far", 1000, **debounce_far)
    jobs["outbox row"] = outboxed(app, dsn, tmp_path / "runs", options=later)
    worker = worker_process(app, APP, concurrency=2, queues=QUEUES, **ENV)
    relay = outbox_relay(app, dsn)
    try:
        wait_until(lambda: relayed(dsn), 60, "the relay moved the outbox row")
        wait_until(lambda: exists(app, jobs["foreign message"]), 60, "the foreign message became a job")
        wait_until(lambda: app.chains.get(chain_id).current == 1, 60, "the chain's first step succeeded")
        # a job that starts, then sleeps past its deadline (expiry bounds a first start only), and
        # one that waits on a token past it (a token that outlives the sweeper's clock)
        jobs["asleep"] = fall_asleep(app, tmp_path / "runs", 18, expires_after=15)
        jobs["token wait"] = app.enqueue(
            "token.run", {"runs": str(tmp_path / "runs"), "token_timeout_s": 3600}, expires_after=15
        )
        wait_until(lambda: asleep_now(app, tmp_path / "runs", jobs["asleep"]), 15, "the job fell asleep")
        wait_until(
            lambda: waiting_on_token(app, tmp_path / "runs", jobs["token wait"]),
            15,
            "the job waiting on its token",
        )
        # a hook's job and a schedule's fire's job, of types on the queue no worker serves yet, each
        # expiring a second after its enqueue: their witness is their hint (the pending entry is
        # cleared once it is sent), so the worker that then receives them expires them
        ended = hooked(app, tmp_path / "runs", "hooked.aside")
        wait_until(lambda: hook_of(app, ended) is not None, 60, "the hook's job enqueued")
        jobs["hook's job"] = str(hook_of(app, ended))
        jobs["schedule fire"] = fire(app, tmp_path / "runs", "far", "aside.run")
        wait_until(lambda: exists(app, jobs["schedule fire"]), 60, "the fire became a job")
        for row in ("hook's job", "schedule fire"):
            wait_until(lambda r=row: "attn" not in record_of(app, jobs[r]), 30, f"the {row}'s hint sent")
        assert set(jobs) == set(MATRIX_ROWS)
        # WHEN the sweeper first reaches them after their deadlines (its clock 1,070 s ahead: past
        # the debounced job's entry too)
        report = sweep(app, now=time.time() + 1070)
        aside = worker_process(app, APP, concurrency=1, queues="aside", **ENV)
        try:
            wait_until(lambda: app.chains.get(chain_id).status != "running", 60, "the chain step expired")
            for row in ("hook's job", "schedule fire"):
                wait_until(
                    lambda r=row: app.get(jobs[r], load_result=False).status in TERMINAL,
                    60,
                    f"the {row} ended",
                )
        finally:
            kill_group(aside)
        answer(app, tmp_path / "runs", jobs["token wait"])
        wait_until(lambda: app.get(jobs["asleep"], load_result=False).status in TERMINAL, 60, "the job woke")
        wait_until(
            lambda: app.get(jobs["token wait"], load_result=False).status in TERMINAL, 60, "it was answered"
        )
    finally:
        kill_group(worker, relay)
    # THEN each ended expired, saying why; its batch counts it failed, its chain stopped; the jobs
    # that had started before their deadline ran to their end
    started = ("asleep", "token wait")
    by_worker = ("chain step", "hook's job", "schedule fire")
    assert set(report.expired) == {j for f, j in jobs.items() if f not in (*started, *by_worker)}
    ended = {f: app.get(j, load_result=False) for f, j in jobs.items()}
    expected = {
        **dict.fromkeys(MATRIX_ROWS, JobStatus.EXPIRED),
        **dict.fromkeys(started, JobStatus.SUCCEEDED),
    }
    assert {f: j.status for f, j in ended.items()} == expected
    assert all(
        "not started by its deadline" in (j.reason or "") for f, j in ended.items() if f not in started
    ), {f: j.reason for f, j in ended.items()}
    assert app.batches.get(batch.id).counts["failed"] == 1
    assert app.chains.get(chain_id).status == "stopped"
    # ...and the dedup modes' keys no longer name them: the next enqueue of each key is a new job
    p = {"runs": str(tmp_path / "runs")}
    live = app.enqueue("plain", p, idempotency_key="wa-far", dedupe=WhileActive(), **later)
    debounced = debounce_first(app, tmp_path / "runs", "far", 1000, **debounce_far)
    assert (live.replaced, debounced.replaced) == (jobs["while_active"], jobs["debounced"])
    no_record_without_a_witness(app)


def spawn_sweeper(app, **env: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "sqsjobs", "sweep", "--app", APP],
        env=worker_env(app, **env),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


@pytest.mark.timeout(240)
def test_every_feature_retried_past_the_message_retention_is_held_and_runs_again(
    ministack_url, make_app, tmp_path, dsn
):
    # GIVEN queues that keep a message 60 s (SQS's least), two workers and a sweeper
    app = make_app(ministack_url, message_retention_s=60, **SETTINGS)
    app.registry.include(stranding.app.registry)
    app.limits.include(stranding.app.limits)
    app.provision()
    env = {
        **ENV,
        "SQSJOBS_MESSAGE_RETENTION_S": "60",
        # a pass every 5 s, not 2: each costs ~0.3 s of CPU (client and emulator: its features' sweeps and
        # the DLQs of every queue) and the scenario waits past a 60 s retention; stale after 5 s either way
        "SQSJOBS_SWEEP_INTERVAL_S": "5",
        "SQSJOBS_STALE_AFTER_S": "5",
    }
    log = tmp_path / "runs"
    workers = [worker_process(app, APP, concurrency=8, queues=QUEUES, **env) for _ in range(2)]
    sweeper = spawn_sweeper(app, **env)
    relay = outbox_relay(app, dsn, SQSJOBS_MESSAGE_RETENTION_S="60")
    try:
        # a dependency whose breaker one failed run opened, and a paused type
        tripped = app.enqueue("breaker.trip", {})
        wait_until(lambda: app.get(tripped, load_result=False).status is JobStatus.DEAD, 60, "breaker opened")
        app.limits.pause("paused.run")
        # WHEN one job of every feature asks, on its first attempt, to run again 60 s later:
        # later than its message lives
        p = {"runs": str(log), "retry_first_s": 60}
        jobs, batch_id, chain_id = one_of_each(app, log, retry_first_s=60)
        jobs["paused"] = app.enqueue("paused.run", p)
        jobs["breaker-deferred"] = app.enqueue("breaker.run", p)
        send_raw(app, json.dumps({"sqsjobs": 1, "type": "plain", "payload": p, "idempotency_key": "late"}))
        jobs["foreign message"] = idempotent_job_id("plain", "late")
        jobs |= newest(app, log, "late", retry_first_s=60)
        jobs["asleep"] = fall_asleep(app, log, 60)  # a sleep as long as the retention
        jobs["token wait"] = wait_on_token(app, log)  # a wait longer than it (answered below)
        jobs["schedule fire"] = fire(app, log, "late", retry_first_s=60)
        jobs["outbox row"] = outboxed(app, dsn, log, retry_first_s=60)
        ended = hooked(app, log, retry_first_s=60)
        jobs["debounced"] = debounce_first(app, log, "late", 2)
        regather(app, log, jobs, "late", 2, {"retry_first_s": 60})
        wait_until(lambda: hook_of(app, ended) is not None, 60, "the hook's job enqueued")
        jobs["hook's job"] = str(hook_of(app, ended))
        assert set(jobs) == set(MATRIX_ROWS)
        others = [j for f, j in jobs.items() if f != "paused"]
        wait_until(lambda: all(runs(log)[j] == 1 for j in others), 60, "every other row ran once")
        app.limits.resume("paused.run")  # it was deferred meanwhile
        # THEN each is held in its record (no message could wait so long): between its two runs its
        # record keeps its payload and an attention entry, the witness the sweeper brings it back by
        held = {}
        wait_until(
            lambda: witness_each(app, log, jobs, held), 90, "every row held in its record", every_s=0.5
        )
        assert held == dict.fromkeys(MATRIX_ROWS, True), held
        # ...the token is answered once the retention has passed for the retried rows (they ran again)...
        wait_until(lambda: runs(log)[jobs["plain"]] == 2, 90, "the plain row's retry ran")
        answer(app, log, jobs["token wait"])
        # ...and the sweeper brings each back
        wait_until(
            lambda: everything_finished(app, jobs, batch_id, chain_id), 150, "every feature's job succeeded"
        )
    finally:
        kill_group(*workers, sweeper, relay)
    assert {f: runs(log)[j] for f, j in jobs.items()} == dict.fromkeys(MATRIX_ROWS, 2)
    assert step_calls(log, jobs) == ONCE_EACH
    no_record_without_a_witness(app)


def witness_each(app, log: Path, jobs: dict[str, str], held: dict[str, bool]) -> bool:
    """Notes in ``held`` each row seen between its two runs with its record as its witness; True once all are.

    The witness, as test_lease_witness.py checks it for a run that outlives its message: an
    attention entry (``held``, or ``pending`` once the sweeper sent a hint for it) and the payload
    (or its S3 reference) in the record, which no message carries any more. A row that ran again
    before it was seen so is noted False.
    """
    for row, job_id in jobs.items():
        if row in held or runs(log)[job_id] == 0:
            continue
        if runs(log)[job_id] > 1:
            held[row] = False
            continue
        item = record_of(app, job_id)
        waiting = item["status"]["S"] in (JobStatus.RETRY_SCHEDULED, JobStatus.QUEUED)
        entry = item.get("attn", {}).get("S", "").split("#")[0]
        if waiting and entry in ("held", "pending") and ("payload" in item or "payload_ref" in item):
            held[row] = True
    return set(held) == set(jobs)


#: Long against the time a released message takes to start, short against this visibility timeout.
DRAIN_VISIBILITY_S = 40


def test_every_feature_enqueued_as_a_worker_drains_is_released_and_runs_on_the_next(
    ministack_url, make_app, tmp_path, dsn
):
    # GIVEN one idle worker in its long polls (a breaker it saw fail open, a paused type), and a
    # visibility timeout far longer than a start takes
    app = make_app(ministack_url, visibility_timeout_s=DRAIN_VISIBILITY_S, **SETTINGS)
    app.registry.include(stranding.app.registry)
    app.limits.include(stranding.app.limits)
    app.provision()
    log, first_log = tmp_path / "runs", tmp_path / "first.log"
    first = logged_worker(app, first_log)
    relay = outbox_relay(app, dsn)
    second = None
    try:
        tripped = app.enqueue("breaker.trip", {})
        wait_until(lambda: app.get(tripped, load_result=False).status is JobStatus.DEAD, 60, "breaker opened")
        app.limits.pause("paused.run")
        # (the asleep row's job falls asleep on it, and wakes on the next; the token's job waits on
        # it, answered once the next one runs)
        asleep = fall_asleep(app, log, 4)
        waiting = wait_on_token(app, log)
        wait_until(lambda: asleep_now(app, log, asleep), 30, "the job fell asleep")
        wait_until(lambda: waiting_on_token(app, log, waiting), 30, "the job waiting on its token")
        time.sleep(1.0)  # its next long polls are open
        # WHEN it is told to stop, and one job of every feature arrives while its polls are open
        first.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        enqueued = time.time()
        p = {"runs": str(log)}
        jobs, batch_id, chain_id = one_of_each(app, log)
        jobs["paused"] = app.enqueue("paused.run", p)
        jobs["breaker-deferred"] = app.enqueue("breaker.run", p)
        send_raw(app, json.dumps({"sqsjobs": 1, "type": "plain", "payload": p, "idempotency_key": "drain"}))
        jobs["foreign message"] = idempotent_job_id("plain", "drain")
        jobs |= newest(app, log, "drain")
        jobs["asleep"] = asleep
        jobs["token wait"] = waiting
        jobs["schedule fire"] = fire(app, log, "drain")
        jobs["outbox row"] = outboxed(app, dsn, log)
        ended = hooked(app, log)
        jobs["debounced"] = debounce_first(app, log, "drain", DRAIN_QUIET_S)
        regather(app, log, jobs, "drain", DRAIN_QUIET_S)
        second = worker_process(app, APP, concurrency=16, queues=QUEUES, **ENV)  # while the first drains
        answer(app, log, waiting)
        # ...and the debounced key keeps coming (its window open longer than SQS receives its bare
        # hint 3 times before redriving it: each receive finds it not yet due)
        keep_gathering(app, log, jobs, "drain", DRAIN_QUIET_S, times=16)
        # (the hook's job is enqueued once its ended job ran, on the next worker)
        wait_until(lambda: hook_of(app, ended) is not None, 60, "the hook's job enqueued")
        jobs["hook's job"] = str(hook_of(app, ended))
        assert set(jobs) == set(MATRIX_ROWS)
        # THEN the next worker runs each (the paused one once resumed), nothing hidden by a poll
        others = {f: j for f, j in jobs.items() if f != "paused"}
        wait_until(lambda: everything_finished(app, others, batch_id, chain_id), 60, "every job finished")
        app.limits.resume("paused.run")
        wait_until(lambda: everything_finished(app, jobs, batch_id, chain_id), 60, "the paused job finished")
        assert first.wait(40) == 0
    finally:
        kill_group(*(p for p in (first, relay, second) if p is not None))
    assert {f: runs(log)[j] for f, j in jobs.items()} == {
        **dict.fromkeys(MATRIX_ROWS, 1),
        "asleep": 2,
        "token wait": 2,
    }
    assert step_calls(log, jobs) == ONCE_EACH
    started = {f: app.get(j, load_result=False).started_at for f, j in others.items()}
    late = {f: round(s.timestamp() - enqueued, 1) for f, s in started.items() if s is not None}
    assert max(late.values()) < DRAIN_VISIBILITY_S - 10, f"a drained worker's poll hid a job: {late}"
    no_record_without_a_witness(app)
