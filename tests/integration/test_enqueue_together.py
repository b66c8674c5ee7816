"""Enqueue in one round trip: with ``Settings.enqueue_together`` the message and the record leave together.

(docs/lifecycle.md, "Where a job's data lives".) Every test here turns it on, in its own process
and in the producer processes it starts (``SQSJOBS_ENQUEUE_TOGETHER``).

Attacked from outside, through a loopback proxy in front of MiniStack: one that holds each of the
two requests until the other is in flight too (were they made one after the other, the first would
wait alone), one that refuses every send, and producer processes racing one idempotency key.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time

import pytest

from bench.proxy import AwsProxy, Pending, Step
from sqsjobs import JobNotFound, JobStatus
from sqsjobs._aws import Call, one
from sqsjobs.ops.stranded import find_stranded
from sqsjobs.store import codec, requests
from sqsjobs.testing import all_finished, work_until
from tests.apps import large
from tests.integration.helpers import depth, worker_env
from tests.soak.faults import FaultPlan, FaultProxy

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def enqueue_together(monkeypatch):
    """Apps made here, and the producer processes they start, send and put at once."""
    monkeypatch.setenv("SQSJOBS_ENQUEUE_TOGETHER", "1")


#: The two requests of one enqueue.
ENQUEUE_CALLS = frozenset({"PutItem", "SendMessageBatch"})
#: How long the proxy holds a request alone before letting it go (a sequential enqueue's first).
ALONE_S = 5.0


class Meeting(AwsProxy):
    """Forwards a request of ``actions`` only once all of them are in flight (or ``ALONE_S`` passed).

    ``most`` is the largest number of them in flight at once: ``len(actions)`` only if the last left
    before the first was answered.
    """

    def __init__(self, upstream: str, actions: frozenset[str] = ENQUEUE_CALLS) -> None:
        super().__init__(upstream)
        self.actions = actions
        self.in_flight = 0
        self.most = 0
        self._met: asyncio.Event | None = None

    async def _before_forward(self, pending: Pending, writer: asyncio.StreamWriter) -> Step:
        if pending.action in self.actions:
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
            if self._met is None:
                self._met = asyncio.Event()
            if self.in_flight >= len(self.actions):
                self._met.set()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._met.wait(), ALONE_S)
        return "forward"

    async def _before_answer(self, pending: Pending, writer: asyncio.StreamWriter) -> Step:
        if pending.action in self.actions:
            self.in_flight -= 1
            if self.in_flight == 0:
                self._met = None
        return "forward"


def stored_item(app, job_id):
    """The record as DynamoDB holds it (attribute names), not as sqsjobs decodes it."""
    return app.run(one(Call("dynamodb", "get_item", requests.get(app.settings.table_name, job_id))))["Item"]


@pytest.mark.parametrize("api", ["sync", "async"])
def test_the_message_and_the_record_are_in_flight_at_once_and_the_record_is_there_on_return(
    ministack_url, make_app, api
):
    with Meeting(ministack_url) as proxy:
        app = make_app(proxy.url)

        @app.job("notes.keep")
        def keep(payload: dict, ctx) -> None:
            return None

        app.provision()
        app.enqueue("notes.keep", {"n": 0})  # the queue's URL is resolved once per process
        proxy.reset_counts()
        proxy.most = 0

        # WHEN one job is enqueued, sync or async
        if api == "sync":
            job_id = app.enqueue("notes.keep", {"n": 1}, idempotency_key="k1")
        else:

            async def enqueue() -> str:
                try:
                    return await app.aenqueue("notes.keep", {"n": 1}, idempotency_key="k1")
                finally:
                    await app.clients.aiobotocore.aclose()

            job_id = asyncio.run(enqueue())

        # THEN its two requests were in flight together, and nothing else was asked
        assert proxy.most == 2
        assert proxy.counts == {("sqs", "SendMessageBatch"): 1, ("dynamodb", "PutItem"): 1}
        # AND the record is readable as soon as enqueue returned, without its payload (the message has it)
        assert app.get(job_id).status is JobStatus.QUEUED
        assert "payload" not in stored_item(app, job_id)


def test_a_send_sqs_refuses_leaves_the_record_with_its_payload_for_the_sweeper(ministack_url, make_app):
    # GIVEN SQS refuses every try of the enqueue's send (an HTTP 500 each time)
    plan = FaultPlan(http_5xx=1.0, only_actions=frozenset({"SendMessageBatch"}))
    with FaultProxy(ministack_url, faults=plan) as proxy:
        app = make_app(proxy.url)

        @app.job("notes.keep")
        def keep(payload: dict, ctx) -> dict:
            return payload

        app.provision()
        proxy.reset_counts()
        # WHEN a job is enqueued
        job_id = app.enqueue("notes.keep", {"n": 7})

        # THEN the enqueue returned its id; the record keeps the payload with a pending entry,
        # written by a second write only because the send failed
        assert proxy.faults_injected["http_5xx"] == proxy.counts[("sqs", "SendMessageBatch")] > 0
        item = stored_item(app, job_id)
        assert item["attn"]["S"].startswith("pending#")
        assert json.loads(item["payload"]["S"]) == {"n": 7}
        assert proxy.counts[("dynamodb", "PutItem")] == 1
        assert proxy.counts[("dynamodb", "UpdateItem")] == 1
        assert depth(app) == {"visible": 0, "in_flight": 0, "delayed": 0}

        # AND once SQS takes sends again, the sweeper sends it, and it runs
        proxy.faults = FaultPlan()
        work_until(app, all_finished(app, [job_id]), sweep=True, timeout_s=60)
        job = app.get(job_id)
        assert (job.status, job.result) == (JobStatus.SUCCEEDED, {"n": 7})


def test_a_send_that_goes_through_makes_no_second_write(ministack_url, make_app):
    with AwsProxy(ministack_url) as proxy:
        app = make_app(proxy.url)
        app.provision()
        app.enqueue("notes.any", {"n": 0}, queue="default")
        proxy.reset_counts()
        for n in range(5):
            app.enqueue("notes.any", {"n": n}, queue="default")
        assert proxy.counts == {("sqs", "SendMessageBatch"): 5, ("dynamodb", "PutItem"): 5}


RACE = """
import os, sys
from sqsjobs import App, IdempotencyConflict
app = App(os.environ["TEST_APP_NAME"])
sys.stdin.readline()  # every process starts, then all enqueue at once
try:
    print(app.enqueue("notes.any", {"n": int(sys.argv[1]) % 2}, queue="default", idempotency_key="race"))
except IdempotencyConflict:
    print("conflict")
"""


def test_twenty_processes_enqueueing_one_key_make_one_job_and_conflicts_for_another_payload(
    ministack_url, make_app
):
    app = make_app(ministack_url)

    @app.job("notes.any")
    def echo(payload: dict, ctx) -> dict:
        return payload

    app.provision()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RACE, str(i)],
            env=worker_env(app),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(20)
    ]
    for proc in procs:
        proc.stdin.write("go\n")
        proc.stdin.flush()
    outputs = [proc.communicate(timeout=120)[0].strip() for proc in procs]
    assert all(proc.returncode == 0 for proc in procs)
    ids = {out for out in outputs if out != "conflict"}
    # THEN one job: every process of the winning payload got its id, every other one a conflict
    assert len(ids) == 1
    job_id = ids.pop()
    accepted = [i for i, out in enumerate(outputs) if out == job_id]
    refused = [i for i, out in enumerate(outputs) if out == "conflict"]
    assert len({i % 2 for i in accepted}) == 1
    assert {i % 2 for i in refused} <= {1 - accepted[0] % 2}
    assert len(accepted) + len(refused) == 20
    # AND exactly one job runs, once, with the winner's payload, though up to 20 messages went out
    work_until(app, all_finished(app, [job_id]), timeout_s=60)
    job = app.get(job_id)
    assert (job.status, job.attempt, job.result) == (JobStatus.SUCCEEDED, 1, {"n": accepted[0] % 2})


def produce(app, *, key, **points):
    """A thin producer process enqueuing one ``large.echo`` (``tests/apps/producer_script.py``)."""
    argv = [sys.executable, "-m", "tests.apps.producer_script", "100", "--key", key]
    for point, call in points.items():
        argv += [f"--{point.replace('_', '-')}", call]
    done = subprocess.run(argv, env=worker_env(app), capture_output=True, timeout=60, check=False)
    return done.returncode, codec.idempotent_job_id("large.echo", key)


def test_a_producer_killed_after_its_record_before_its_message_leaves_a_record_the_audit_finds(
    ministack_url, make_app
):
    app = make_app(ministack_url)
    app.registry.include(large.app.registry)
    app.provision()
    # WHEN a producer dies once its put landed, its message held back (it never left)
    code, job_id = produce(app, key="no-message", die_after="PutItem", hold="SendMessageBatch")
    assert code == -9
    # THEN its enqueue never returned, and its record waits with no message: the stranded-record
    # audit reports it (docs/lifecycle.md: the one window a parallel enqueue opens)
    assert app.get(job_id).status is JobStatus.QUEUED
    assert depth(app) == {"visible": 0, "in_flight": 0, "delayed": 0}
    found = find_stranded(app.run, app.settings, time.time(), segments=1, grace_s=0.0)
    assert [s.id for s in found.stranded] == [job_id]
    # AND the caller's retry with the same key (it never got an answer) sends the message: it runs
    code, again = produce(app, key="no-message")
    assert code == 0
    assert again == job_id
    work_until(app, all_finished(app, [job_id]), timeout_s=60)
    assert app.get(job_id).status is JobStatus.SUCCEEDED


def test_a_producer_killed_after_its_message_before_its_record_gets_its_job_run(ministack_url, make_app):
    app = make_app(ministack_url)
    app.registry.include(large.app.registry)
    app.provision()
    # WHEN a producer dies once SQS took its message, its put held back (it never left)
    code, job_id = produce(app, key="no-record", die_after="SendMessageBatch", hold="PutItem")
    assert code == -9
    with pytest.raises(JobNotFound):
        app.get(job_id)
    # THEN the claim creates the record from the message and runs the job

    def recorded_and_finished() -> bool:
        with contextlib.suppress(JobNotFound):
            return app.get(job_id, load_result=False).status.terminal
        return False

    work_until(app, recorded_and_finished, timeout_s=60)
    job = app.get(job_id)
    assert (job.status, job.result["blob_bytes"]) == (JobStatus.SUCCEEDED, 100)


def test_a_forked_producer_enqueues_with_threads_of_its_own(ministack_url, make_app):
    # GIVEN a producer that enqueued (its pool has a thread), then forked (a pre-forking web server)
    app = make_app(ministack_url)
    app.provision()
    app.enqueue("notes.any", {"n": 0}, queue="default")
    pid = os.fork()
    if pid == 0:  # the child: its enqueue must not wait for a thread that only the parent has
        try:
            app.enqueue("notes.any", {"n": 1}, queue="default", idempotency_key="from-the-child")
        except BaseException:
            os._exit(1)
        os._exit(0)
    # THEN the child's enqueue returns, and its job is recorded
    deadline = time.monotonic() + 60
    while (done := os.waitpid(pid, os.WNOHANG))[0] == 0:
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("the forked producer's enqueue never returned")
        time.sleep(0.1)
    assert os.waitstatus_to_exitcode(done[1]) == 0
    assert app.get(codec.idempotent_job_id("notes.any", "from-the-child")).status is JobStatus.QUEUED
