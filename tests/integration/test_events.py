"""Job events from outside: every terminal transition is one event id on the bus, across SIGKILL and copies.

Real ``sqsjobs worker`` processes run the jobs on MiniStack; one is SIGKILLed the moment the first
finish lands, and every message is copied twice into the queue first. The relay (the sweeper's
pass, as ``sqsjobs dev`` runs it) reads the table's change stream and publishes on an EventBridge
bus whose rule forwards every sqsjobs event to an SQS queue the test reads.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections import defaultdict

import pytest

from sqsjobs import JobStatus, sweep_once
from sqsjobs._aws import Call, one
from sqsjobs.events.catalogue import SOURCE, choice_of
from sqsjobs.events.stream_relay import StreamRelay
from sqsjobs.runtime.sweeper import SweepReport
from tests.integration.helpers import kill_group, queue_url, show_again, sqs_call, wait_until, worker_process

pytestmark = pytest.mark.slow

APP = "tests.apps.results:app"
#: Short, so the sweeper passes of the test re-send what a killed worker left unsent within seconds.
STALE_AFTER_S = 2
WORKER_ENV = {"SQSJOBS_BATCH_WRITES": "0", "SQSJOBS_STALE_AFTER_S": str(STALE_AFTER_S)}
EXPECTED = {"succeeded": "JobSucceeded", "dead": "JobDead", "cancelled": "JobCancelled"}


@pytest.fixture
def app(ministack_url, make_app):
    from tests.apps import results

    name = f"t{uuid.uuid4().hex[:10]}"
    # batch_writes off, here and in the workers: MiniStack 1.5.33 records no PartiQL write in the
    # change stream (AWS records every write, whatever its API); docs/events.md, "Locally".
    # A hint that no claim took is sent again after STALE_AFTER_S (the sweeper's and the workers').
    made = make_app(
        ministack_url,
        name,
        event_bus=f"{name}-bus",
        events="all",
        event_relay=True,
        batch_writes=False,
        stale_after_s=STALE_AFTER_S,
    )
    made.registry = results.app.registry
    made.provision()
    return made


def sink(app) -> str:
    """An SQS queue that a rule on the App's bus fills with every sqsjobs event."""
    url = sqs_call(app, "create_queue", QueueName=f"{app.name}-events")["QueueUrl"]
    arn = sqs_call(app, "get_queue_attributes", QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    bus = app.settings.event_bus
    pattern = json.dumps({"source": [SOURCE]})
    app.run(one(Call("events", "put_rule", {"Name": "all", "EventBusName": bus, "EventPattern": pattern})))
    app.run(
        one(
            Call(
                "events",
                "put_targets",
                {"Rule": "all", "EventBusName": bus, "Targets": [{"Id": "q", "Arn": arn}]},
            )
        )
    )
    return str(url)


def drain(app, url: str) -> list[dict]:
    """Every event in the sink, each as EventBridge delivered it."""
    found: list[dict] = []
    while True:
        got = sqs_call(app, "receive_message", QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1)
        messages = got.get("Messages", [])
        if not messages:
            return found
        found += [json.loads(m["Body"]) for m in messages]
        sqs_call(
            app,
            "delete_message_batch",
            QueueUrl=url,
            Entries=[{"Id": str(n), "ReceiptHandle": m["ReceiptHandle"]} for n, m in enumerate(messages)],
        )


def copy_every_message(app) -> int:
    """Each job message twice more in the queue (the originals made visible again): duplicated hints.

    Every original is taken first (hidden 60 s), then copied, then let go: copying while receiving
    let a slow pass (over a second, under load) receive its own copies and copy them again, forever.
    """
    url, originals = queue_url(app), []
    while messages := sqs_call(
        app, "receive_message", QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=60
    ).get("Messages", []):
        originals += messages
    for m in originals:
        for _ in range(2):
            sqs_call(app, "send_message", QueueUrl=url, MessageBody=m["Body"], DelaySeconds=1)
    show_again(app, url, originals, after_s=1)
    return 2 * len(originals)


def test_each_terminal_transition_is_one_event_id_across_sigkill_and_copied_messages(app):
    url = sink(app)
    # GIVEN jobs that will succeed, die and be cancelled, a batch and a chain; every message copied twice
    ok, dead, cancelled, batch, items, chain_id = one_of_each_ending(app, succeeding=12, dying=4)
    assert copy_every_message(app) >= 2 * (len(ok) + len(dead))
    # WHEN a worker is SIGKILLed the moment the first finish lands, and another runs the rest
    first = worker_process(app, APP, concurrency=4, **WORKER_ENV)
    second = None
    try:
        deadline = time.monotonic() + 60
        while not any(app.get(j, load_result=False).status.terminal for j in ok + dead):
            assert time.monotonic() < deadline, "no job finished"
        kill_group(first)
        second = worker_process(app, APP, concurrency=4, **WORKER_ENV)
        finals = {j: app.wait(j, timeout=90) for j in [*ok, *dead, *items, cancelled]}
        # What the killed worker wrote but did not follow up is the sweeper's (the batch's completion
        # check after its last item's finish, a callback's or a chain step's message): a sweeper pass
        # at each poll, at the real time (a pass dated later would date the callback it creates
        # later too), until the batch's callback and the chain have ended. The relay publishes what
        # the stream holds so far at each pass.
        early: list[SweepReport] = []

        def swept_and_settled() -> bool:
            early.append(asyncio.run(_closing(app, sweep_once(app))))
            callback = app.batches.get(batch.id).callback_id
            chain = app.chains.get(chain_id)
            return (
                callback is not None
                and app.get(callback, load_result=False).status.terminal
                and chain.status != "running"
                and all(app.get(s.job_id, load_result=False).status.terminal for s in chain.steps)
            )

        wait_until(swept_and_settled, 60, "the batch's callback and the chain", every_s=0.5)
        callback = app.batches.get(batch.id).callback_id
        assert callback is not None
        finals[callback] = app.get(callback)
        finals.update({s.job_id: app.get(s.job_id) for s in app.chains.get(chain_id).steps})
    finally:
        kill_group(first, *([second] if second else []))
    # ... and the relay reads the change stream once the jobs have ended
    report = asyncio.run(_closing(app, sweep_once(app)))
    events = drain(app, url)

    # THEN each job that ended has exactly one event id, of its final status, and no payload; the
    # batch and the chain one completion each
    one_event_per_ending(events, finals, batch.id, chain_id)
    assert finals[dead[0]].status is JobStatus.DEAD
    assert sum(len(r.repaired["events"]) for r in [*early, report]) == len(events)

    # WHEN the relay restarts (positions lost) and reads the stream again
    relay = StreamRelay(app.settings, choice_of(app.settings, app.registry), app.arun)
    again = asyncio.run(_closing(app, relay.sweep(app.clock.now())))
    # THEN it publishes the same events again: the same ids, nothing new
    assert set(again) == {e["detail"]["event_id"] for e in events}
    assert {e["detail"]["event_id"] for e in drain(app, url)} == set(again)


def one_of_each_ending(app, *, succeeding: int, dying: int):
    """Jobs that will succeed and die, one cancelled, a sealed batch of three and a chain of two:
    ``(ok, dead, cancelled, batch, items, chain_id)``."""
    ok = [app.enqueue("add", {"a": n, "b": 1}) for n in range(succeeding)]
    dead = [app.enqueue("boom", {"what": f"order {n}"}) for n in range(dying)]
    cancelled = app.enqueue("add", {"a": 0, "b": 0}, delay=600)
    app.cancel(cancelled)
    batch = app.batches.create("done")
    items = [batch.add("add", {"a": n, "b": 2}) for n in range(3)]
    batch.seal()
    chain_id = app.chains.start([("add", {"a": 1, "b": 1}), ("add", {"a": 2, "b": 2})])
    return ok, dead, cancelled, batch, items, chain_id


def one_event_per_ending(events: list[dict], finals: dict, batch_id: str, chain_id: str) -> None:
    """Each job of ``finals`` has exactly one event id, named for its final status, with no payload
    or result; the batch and the chain one completion each; nothing else."""
    ids_by_job: dict[str, set[str]] = defaultdict(set)
    names: dict[str, str] = {}
    for event in events:
        assert event["source"] == SOURCE
        detail = event["detail"]
        assert "payload" not in detail and "result" not in detail
        if event["detail-type"].startswith("Job"):
            ids_by_job[detail["id"]].add(detail["event_id"])
            names[detail["id"]] = event["detail-type"]
    missing = {j: (finals[j].status.value, finals[j].type) for j in set(finals) - set(ids_by_job)}
    assert set(ids_by_job) == set(finals), (missing, len(events))
    assert all(len(ids) == 1 for ids in ids_by_job.values()), ids_by_job
    assert all(names[j] == EXPECTED[job.status.value] for j, job in finals.items())
    others = {(e["detail-type"], e["detail"]["id"]) for e in events if not e["detail-type"].startswith("Job")}
    assert others == {("BatchCompleted", batch_id), ("ChainCompleted", chain_id)}


async def _closing(app, awaitable):
    try:
        return await awaitable
    finally:
        await app.aclose()
