"""The finish seam (``runtime/record_stage.py``): what a hook adds commits with the finish, or neither lands.

Batches count their items and chains enqueue their next step through it, so its promise is the one
they rest on: the hook's writes and the job's transition are one ``TransactWriteItems`` over HTTP on
MiniStack — applied together, refused together, and the refusal read as the finish's own.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest

from sqsjobs import JobStatus
from sqsjobs.delivery import LEAVE
from sqsjobs.job import AttemptOutcome
from sqsjobs.runtime.execution import Execution
from sqsjobs.store.codec import av_n, av_s
from sqsjobs.store.conditions import Exists, Fragment
from sqsjobs.store.write import Write
from sqsjobs.transport import sqs
from tests.integration.helpers import queue_url, sqs_call

COUNTER = "hooktest#counter"


class CountingHook:
    """Adds one to a counter item with each succeeded finish; optionally on a condition that fails."""

    def __init__(self, table: str, *, refuse: bool = False) -> None:
        self.table = table
        self.refuse = refuse
        self.landed_ids: list[str] = []

    async def entries(self, finish):
        # A hook hands the kernel typed writes (``FinishHook.entries``), never a request of its own.
        if finish.outcome is not AttemptOutcome.SUCCEEDED:
            return []
        guards = (Fragment("never", Exists("never_there")),) if self.refuse else ()
        return [
            Write(
                self.table,
                {"id": av_s(COUNTER)},
                adds=(("finished", ":one"),),
                guards=guards,
                values={":one": av_n(1)},
            )
        ]

    async def landed(self, finish):
        self.landed_ids.append(finish.job.id)


@pytest.fixture
def app(ministack_url, make_app):
    app = make_app(ministack_url)

    @app.job("hooks.work")
    def work(payload: dict, ctx) -> int:
        return int(payload["n"])

    app.provision()
    return app


def counter(app) -> int:
    item = (
        app.clients.boto3.get("dynamodb")
        .get_item(TableName=app.settings.table_name, Key={"id": av_s(COUNTER)}, ConsistentRead=True)
        .get("Item")
    )
    return int(item["finished"]["N"]) if item else 0


def deliveries(app, n: int) -> list[sqs.Delivery]:
    url = queue_url(app)
    got: list[sqs.Delivery] = []
    while len(got) < n:
        response = sqs_call(app, "receive_message", **sqs.receive(url, max_messages=10, wait_s=20))
        got += sqs.deliveries("default", url, response)
    return got


def handle_all(app, hook, batch) -> list:
    async def run():
        execution = Execution(app, f"w-{uuid.uuid4().hex[:6]}", hooks=[hook])
        try:
            return await asyncio.gather(*(execution.handle(d) for d in batch))
        finally:
            await app.aclose()

    return asyncio.run(run())


def test_a_hooks_write_commits_with_each_finish_exactly_once(app):
    ids = [app.enqueue("hooks.work", {"n": n}) for n in range(5)]
    hook = CountingHook(app.settings.table_name)
    batch = deliveries(app, 5)
    acks = handle_all(app, hook, batch) + handle_all(app, hook, batch[:2])  # copies delivered again
    assert [a.kind for a in acks] == ["delete"] * 7
    assert all(app.get(i).status is JobStatus.SUCCEEDED for i in ids)
    assert counter(app) == 5
    assert sorted(hook.landed_ids) == sorted(ids)


def test_a_refused_hook_write_refuses_the_finish_too(app):
    job_id = app.enqueue("hooks.work", {"n": 1})
    hook = CountingHook(app.settings.table_name, refuse=True)
    (ack,) = handle_all(app, hook, deliveries(app, 1))
    assert ack == LEAVE  # the message comes back; nothing was recorded
    job = app.get(job_id)
    assert job.status is JobStatus.RUNNING and job.result is None
    assert counter(app) == 0 and hook.landed_ids == []


def test_a_stale_runs_finish_writes_nothing_of_the_hooks(app):
    """Another claim took the job while this run worked: its finish and the hook's write are both refused."""
    job_id = app.enqueue("hooks.work", {"n": 1})
    hook = CountingHook(app.settings.table_name)
    table = app.settings.table_name

    class StealingHook(CountingHook):
        async def entries(self, finish):
            app.clients.boto3.get(
                "dynamodb"
            ).update_item(  # a rescue by another worker, just before the finish
                TableName=table,
                Key={"id": av_s(job_id)},
                UpdateExpression="SET claim_token = :other",
                ExpressionAttributeValues={":other": av_s("x")},
            )
            return await hook.entries(finish)

    (ack,) = handle_all(app, StealingHook(table), deliveries(app, 1))
    assert ack == LEAVE
    assert app.get(job_id).status is JobStatus.RUNNING
    assert counter(app) == 0


def test_write_units_of_a_hooked_finish_and_of_one_no_hook_claims(ministack_url, make_app):
    """A hooked finish is transactional (twice the units, one request); a finish without entries is unchanged."""
    app = make_app(ministack_url, measure_capacity=True)

    @app.job("hooks.work")
    def work(payload: dict, ctx) -> int:
        if payload["n"] < 0:
            raise ValueError("retry me")
        return int(payload["n"])

    app.provision()
    app.enqueue("hooks.work", {"n": -1})  # its finish is a retry: the hook adds nothing
    app.enqueue("hooks.work", {"n": 1})
    spent = {}
    for delivery in sorted(deliveries(app, 2), key=lambda d: '"n":1' in d.body):
        units, calls = (
            app.requests.units("write", "table"),
            app.requests.counts["dynamodb", "TransactWriteItems"],
        )
        handle_all(app, CountingHook(app.settings.table_name), [delivery])
        transactions = app.requests.counts["dynamodb", "TransactWriteItems"] - calls
        spent["retry" if "-1" in delivery.body else "succeeded"] = (
            app.requests.units("write", "table") - units,
            transactions,
        )
    # the claim (1) and the retry's UpdateItem (2: the record now holds the error and history)
    assert spent["retry"] == (3.0, 0)
    # the claim (1), then the finish and the counter, each ≤ 1 KB, transactional: 2 + 2
    assert spent["succeeded"] == (5.0, 1)
