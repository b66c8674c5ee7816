"""``concurrency`` bounds the handlers running at once; claims ahead and finishes after hold no slot.

Attacked from outside: one real ``sqsjobs worker`` process (concurrency 2, two messages held ahead)
whose DynamoDB requests are slowed by a proxy, handlers that log their start and end
(tests/apps/slotted.py) and can be held on a gate file, the job records read directly from the
emulator, and the queue's in-flight count from SQS itself. A job claimed ahead and left waiting longer
than its lease is attacked with copies of its message that a second worker process receives.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from pathlib import Path

import pytest

from bench.proxy import AwsProxy, Pending, Step
from sqsjobs import JobRequest, JobStatus
from tests.apps import slotted
from tests.integration.helpers import depth, kill_group, queue_url, sqs_call, wait_until, worker_process

pytestmark = pytest.mark.slow

APP = "tests.apps.slotted:app"
CONCURRENCY = 2
HELD_AHEAD = 2
#: Added to every DynamoDB request: the claims and finishes are slow, the handlers are not.
DYNAMODB_DELAY_S = 0.2
#: Long, so a message left hidden by the drain could not come back within the test's wait for it.
VISIBILITY_S = 60


class SlowDynamo(AwsProxy):
    """Delays DynamoDB requests only; SQS passes at once."""

    async def _before_forward(self, pending: Pending, writer: asyncio.StreamWriter) -> Step:
        if pending.service == "dynamodb":
            await asyncio.sleep(DYNAMODB_DELAY_S)
        return "forward"


def events(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def peak_running(log: Path) -> int:
    """The most handlers that ran at once, from their own start and end stamps."""
    running = peak = 0
    for e in sorted(events(log), key=lambda e: (e["at"], e["event"] == "start")):
        running += 1 if e["event"] == "start" else -1
        peak = max(peak, running)
    return peak


def test_slots_bound_handlers_not_claims_and_a_drain_puts_back_what_was_claimed_ahead(
    ministack_url, make_app, tmp_path
):
    app = make_app(ministack_url, visibility_timeout_s=VISIBILITY_S)
    app.registry.include(slotted.app.registry)
    app.provision()
    with SlowDynamo(ministack_url) as proxy:
        worker = worker_process(
            app,
            APP,
            concurrency=CONCURRENCY,
            SQSJOBS_ENDPOINT_URL=proxy.url,
            SQSJOBS_HELD_AHEAD=str(HELD_AHEAD),
            SQSJOBS_DRAIN_TIMEOUT_S="30",
        )
        try:
            # GIVEN a backlog of short jobs: however slow DynamoDB is, two handlers at most run at once
            quick = tmp_path / "quick.jsonl"
            ids = app.enqueue_many(
                [JobRequest("slots.run", {"log": str(quick), "sleep": 0.05}) for _ in range(8)]
            )
            wait_until(lambda: all(app.get(i).status is JobStatus.SUCCEEDED for i in ids), 60, "the backlog")
            assert len([e for e in events(quick) if e["event"] == "start"]) == 8
            assert peak_running(quick) == CONCURRENCY

            # WHEN six jobs arrive whose handlers wait on a gate
            log, gate = tmp_path / "gated.jsonl", tmp_path / "gate"
            gated = app.enqueue_many(
                [JobRequest("slots.run", {"log": str(log), "gate": str(gate)}) for _ in range(6)]
            )
            wait_until(lambda: len(events(log)) == CONCURRENCY, 30, "two gated starts")
            started = {e["job"] for e in events(log)}

            # THEN with both slots taken, the next jobs are claimed ahead (their records are running,
            # their handlers are not) ...
            def claimed_ahead() -> set[str]:
                return {i for i in gated if i not in started and app.get(i).status is JobStatus.RUNNING}

            wait_until(lambda: len(claimed_ahead()) == HELD_AHEAD, 30, "the claims ahead of a free slot")
            ahead = claimed_ahead()
            # ... and never more than that: the worker holds 2 running + 2 ahead, the rest stay queued
            samples = []
            for _ in range(10):
                samples.append(depth(app)["in_flight"])
                time.sleep(0.1)
            assert max(samples) == CONCURRENCY + HELD_AHEAD, samples
            assert [app.get(i).status for i in gated if i not in started | ahead] == [JobStatus.QUEUED] * 2
            assert len(events(log)) == CONCURRENCY  # the handlers still wait at their gate

            # WHEN the worker is told to stop while its two handlers run
            worker.send_signal(signal.SIGTERM)
            # THEN the messages it held ahead are visible again at once, never run by it
            url = queue_url(app)
            seen: set[str] = set()
            deadline = time.monotonic() + VISIBILITY_S / 4
            while not ahead <= seen and time.monotonic() < deadline:
                got = sqs_call(
                    app, "receive_message", QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1
                )
                seen |= {json.loads(m["Body"])["id"] for m in got.get("Messages", [])}
            assert ahead <= seen, (ahead, seen)
            for i in ahead:
                assert app.get(i).status is JobStatus.QUEUED  # released: its attempt not used up
            # ... and the running handlers finish before it exits
            gate.touch()
            assert worker.wait(60) == 0
            assert {e["job"] for e in events(log)} == started
            assert all(app.get(i).status is JobStatus.SUCCEEDED for i in started)
            assert peak_running(log) == CONCURRENCY
        finally:
            kill_group(worker)


def test_a_job_claimed_ahead_keeps_its_lease_while_it_waits_longer_than_it(ministack_url, make_app, tmp_path):
    # GIVEN a worker of one slot that claims one job ahead, with 3 s leases and a 2 s visibility, and
    # two jobs of 6 s each: one runs, the other waits ahead of the slot for more than twice a lease
    app = make_app(ministack_url, lease_s=3.0, visibility_timeout_s=2)
    app.registry.include(slotted.app.registry)
    app.provision()
    log = tmp_path / "long.jsonl"
    ids = app.enqueue_many([JobRequest("slots.run", {"log": str(log), "sleep": 6}) for _ in range(2)])
    url = queue_url(app)
    bodies: dict[str, str] = {}  # each job's message, as a copy to send back
    while len(bodies) < len(ids):
        for m in sqs_call(app, "receive_message", QueueUrl=url, MaxNumberOfMessages=10).get("Messages", []):
            bodies[json.loads(m["Body"])["id"]] = m["Body"]
            sqs_call(
                app,
                "change_message_visibility",
                QueueUrl=url,
                ReceiptHandle=m["ReceiptHandle"],
                VisibilityTimeout=0,
            )
    workers = [worker_process(app, APP, concurrency=1, SQSJOBS_HELD_AHEAD="1")]
    try:
        wait_until(lambda: len(events(log)) == 1, 30, "the first start")
        (first,) = {e["job"] for e in events(log)}
        (ahead,) = set(ids) - {first}
        wait_until(lambda: app.get(ahead).status is JobStatus.RUNNING, 10, "the claim ahead", every_s=0.1)
        claimed = app.get(ahead)
        # WHEN a second worker runs meanwhile, and copies of both messages reach it after a lease
        # would have lapsed unrenewed
        workers.append(worker_process(app, APP, concurrency=1, SQSJOBS_HELD_AHEAD="0"))
        delay = int(app.settings.lease_s) + 1
        entries = [{"Id": str(n), "MessageBody": bodies[i], "DelaySeconds": delay} for n, i in enumerate(ids)]
        sqs_call(app, "send_message_batch", QueueUrl=url, Entries=entries)
        # THEN while it still waits, its lease was renewed past the one its claim took, by its claim
        wait_until(lambda: depth(app)["delayed"] == 0 and depth(app)["visible"] == 0, 20, "copies taken")
        waiting = app.get(ahead)
        if not any(e["job"] == ahead for e in events(log)):  # still ahead of the slot when the copies came
            assert waiting.status is JobStatus.RUNNING and waiting.claim_token == claimed.claim_token
            assert waiting.lease_expires > claimed.lease_expires
        wait_until(lambda: all(app.get(i).status is JobStatus.SUCCEEDED for i in ids), 40, "both ran")
        wait_until(lambda: sum(depth(app).values()) == 0, 20, "the queue empty")
    finally:
        kill_group(*workers)
    # AND each job ran once, at its first attempt, one after the other in the one slot: no copy
    # rescued the waiting job from under its owner, and its own message never came back to run it
    starts = [e["job"] for e in events(log) if e["event"] == "start"]
    assert sorted(starts) == sorted(ids) and starts[0] == first, starts
    assert [(app.get(i).attempt, app.get(i).lease_epoch) for i in ids] == [(1, 1), (1, 1)]
    assert peak_running(log) == 1


def test_a_job_whose_lease_lapsed_while_it_waited_for_its_slot_does_not_start(
    ministack_url, make_app, tmp_path
):
    # GIVEN a worker of one slot that claims one job ahead (3 s leases, 2 s visibility): job X runs
    # until its gate opens, job Y waits ahead of the slot
    app = make_app(ministack_url, lease_s=3.0, visibility_timeout_s=2)
    app.registry.include(slotted.app.registry)
    app.provision()
    log, gate = tmp_path / "stalled.jsonl", tmp_path / "gate"
    stalled = worker_process(app, APP, concurrency=1, SQSJOBS_HELD_AHEAD="1")
    workers = [stalled]
    try:
        x = app.enqueue("slots.run", {"log": str(log), "gate": str(gate)})
        wait_until(lambda: len(events(log)) == 1, 30, "X started")
        y = app.enqueue("slots.run", {"log": str(log), "sleep": 0.5})
        wait_until(lambda: app.get(y).status is JobStatus.RUNNING, 10, "Y claimed ahead", every_s=0.1)
        claimed = app.get(y)
        # WHEN the worker stalls (SIGSTOP) past Y's lease, so no beat renews it, and another worker
        # receives Y's message when it comes back and claims the job; X's gate opens meanwhile, so
        # the stalled worker's slot frees the moment it resumes
        os.killpg(stalled.pid, signal.SIGSTOP)
        # (two slots: X's message comes back to it too, and its run waits for the gate)
        workers.append(worker_process(app, APP, concurrency=2, SQSJOBS_HELD_AHEAD="0"))
        wait_until(lambda: app.get(y).claim_token != claimed.claim_token, 30, "Y claimed by the other worker")
        gate.touch()
        os.killpg(stalled.pid, signal.SIGCONT)
        wait_until(lambda: app.get(y).status is JobStatus.SUCCEEDED, 30, "Y ran")
        wait_until(lambda: any(e["job"] == x and e["event"] == "end" for e in events(log)), 10, "X ended")
        time.sleep(1.0)  # what the resumed worker would start, it starts at once
    finally:
        kill_group(*workers)
    # THEN Y ran once: the resumed worker renewed its lapsed lease before starting it, was refused,
    # and left it to its new owner
    assert [e["job"] for e in events(log) if e["event"] == "start"].count(y) == 1
