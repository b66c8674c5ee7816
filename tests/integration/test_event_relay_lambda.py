"""The production event relay: the stream Lambda's handler, fed what DynamoDB's stream records for batched writes.

In AWS the job events come from a Lambda function reading the table's change stream
(``sqsjobs.events.stream_relay.handler``), and the workers write with batched PartiQL statements
(``batch_writes``, on by default). DynamoDB Streams records *every* write that changes an item,
whatever API made it, as one record per item with its old and new images. MiniStack 1.5.33 leaves
PartiQL writes out of its stream, so the emulator cannot produce those records. This test builds
them the way DynamoDB documents them: a proxy between every client (the App, the worker process) and
the emulator serialises the writes and, around each one, reads the table, and turns each item that
changed into a stream record (``eventName`` INSERT/MODIFY/REMOVE, ``Keys``, ``OldImage``,
``NewImage``, an increasing ``SequenceNumber``, ``StreamViewType`` NEW_AND_OLD_IMAGES). The records
are then handed to the handler in a process of its own, in batches as the event source mapping
delivers them, twice (the mapping retries a batch); the bus's events are read through a rule.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
import uuid
from typing import Any

import boto3
import pytest

from bench.proxy import WRITE_ACTIONS, AwsProxy, Pending, Step
from sqsjobs import JobStatus
from tests.integration.helpers import kill_group, wait_until, worker_env, worker_process
from tests.integration.test_events import drain, one_event_per_ending, one_of_each_ending, sink

pytestmark = pytest.mark.slow

APP = "tests.apps.results:app"
#: How many records the event source mapping hands the function at once (its default for streams).
MAPPING_BATCH = 100


class StreamRecorder(AwsProxy):
    """A proxy that records, for each write that reaches the table, the stream records DynamoDB would."""

    def __init__(self, upstream: str, table: str) -> None:
        super().__init__(upstream)
        self.table = table
        self.records: list[dict[str, Any]] = []
        #: What made each record: the API action of the write.
        self.made_by: list[str] = []
        self._db = boto3.client("dynamodb", endpoint_url=upstream, region_name="us-east-1")
        self._writes = asyncio.Lock()
        self._before: dict[int, dict[str, dict[str, Any]]] = {}
        self._sequence = 100_000_000_000_000_000_000
        self.guard = threading.Lock()

    def _items(self) -> dict[str, dict[str, Any]]:
        items: dict[str, dict[str, Any]] = {}
        for page in self._db.get_paginator("scan").paginate(TableName=self.table, ConsistentRead=True):
            items.update({item["id"]["S"]: item for item in page["Items"]})
        return items

    async def _before_forward(self, pending: Pending, writer: asyncio.StreamWriter) -> Step:
        if pending.service == "dynamodb" and pending.action in WRITE_ACTIONS:
            await self._writes.acquire()  # one write at a time: each record's images are its own
            self._before[id(pending)] = await asyncio.to_thread(self._items)
        return "forward"

    async def _before_answer(self, pending: Pending, writer: asyncio.StreamWriter) -> Step:
        before = self._before.pop(id(pending), None)
        if before is None:
            return "forward"
        try:
            after = await asyncio.to_thread(self._items)
            with self.guard:
                for key in sorted(set(before) | set(after)):
                    old, new = before.get(key), after.get(key)
                    if old != new:
                        self.records.append(self._record(key, old, new))
                        self.made_by.append(pending.action)
        finally:
            self._writes.release()
        return "forward"

    def _record(self, key: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> dict[str, Any]:
        self._sequence += 1
        change: dict[str, Any] = {
            "ApproximateCreationDateTime": time.time(),
            "Keys": {"id": {"S": key}},
            "SequenceNumber": str(self._sequence),
            "SizeBytes": len(json.dumps([old, new])),
            "StreamViewType": "NEW_AND_OLD_IMAGES",
        }
        if old is not None:
            change["OldImage"] = old
        if new is not None:
            change["NewImage"] = new
        return {
            "eventID": uuid.uuid4().hex,
            "eventName": "INSERT" if old is None else "REMOVE" if new is None else "MODIFY",
            "eventVersion": "1.1",
            "eventSource": "aws:dynamodb",
            "awsRegion": "us-east-1",
            "dynamodb": change,
            "eventSourceARN": f"arn:aws:dynamodb:us-east-1:000000000000:table/{self.table}/stream/2026-11-28T00:00:00.000",
        }


#: The stream Lambda, as the runtime calls it: one invocation per line of stdin, its answer per line of stdout.
LAMBDA = """
import json, sys
from sqsjobs.events.stream_relay import handler
for line in sys.stdin:
    print(json.dumps(handler(json.loads(line), None)), flush=True)
"""


def invoke_relay(app, batches: list[list[dict[str, Any]]]) -> list[int]:
    """Each batch handed to ``sqsjobs.events.stream_relay.handler`` in a process of its own."""
    env = worker_env(
        app,
        SQSJOBS_APP=APP,
        SQSJOBS_EVENT_BUS=app.settings.event_bus,
        SQSJOBS_EVENTS="all",
        SQSJOBS_TABLE=app.settings.table_name,
        SQSJOBS_QUEUE_PREFIX=app.settings.queue_prefix,
    )
    stdin = "".join(json.dumps({"Records": batch}) + "\n" for batch in batches)
    done = subprocess.run(
        [sys.executable, "-c", LAMBDA], input=stdin, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return [json.loads(line)["published"] for line in done.stdout.splitlines()]


@pytest.fixture
def recorded(ministack_url, make_app):
    """An App whose every write passes the recorder, with events on and the sweeper's relay off."""
    from tests.apps import results

    name = f"r{uuid.uuid4().hex[:10]}"
    probe = make_app(ministack_url, name, event_bus=f"{name}-bus", events="all")
    probe.registry = results.app.registry
    probe.provision()
    recorder = StreamRecorder(ministack_url, probe.settings.table_name)
    url = recorder.start()
    app = make_app(url, name, event_bus=f"{name}-bus", events="all", event_relay=False, batch_writes=True)
    app.registry = results.app.registry
    try:
        yield app, recorder
    finally:
        app.close()
        recorder.stop()


def test_the_stream_lambda_publishes_one_event_per_terminal_transition_of_batched_writes(recorded):
    app, recorder = recorded
    url = sink(app)
    # GIVEN jobs that will succeed, die and be cancelled, a batch and a chain, run by a worker process
    # that writes with batched PartiQL statements (the production default)
    ok, dead, cancelled, batch, items, chain_id = one_of_each_ending(app, succeeding=10, dying=3)
    worker = worker_process(app, APP, concurrency=4, SQSJOBS_BATCH_WRITES="1")
    try:
        finals = {j: app.wait(j, timeout=90) for j in [*ok, *dead, *items, cancelled]}

        def settled() -> bool:
            callback = app.batches.get(batch.id).callback_id
            chain = app.chains.get(chain_id)
            return (
                callback is not None
                and app.get(callback, load_result=False).status.terminal
                and chain.status != "running"
            )

        wait_until(settled, 60, "the batch's callback and the chain", every_s=0.5)
    finally:
        kill_group(worker)
    callback = app.batches.get(batch.id).callback_id
    assert callback is not None
    finals[callback] = app.get(callback)
    finals.update({s.job_id: app.get(s.job_id) for s in app.chains.get(chain_id).steps})
    with recorder.guard:
        records, made_by = list(recorder.records), list(recorder.made_by)
    # ... the terminal transitions were written by batched statements, which MiniStack's stream omits
    terminal_by = {
        made_by[i]
        for i, r in enumerate(records)
        if r["dynamodb"].get("NewImage", {}).get("status", {}).get("S") in ("succeeded", "dead")
    }
    assert "BatchExecuteStatement" in terminal_by, terminal_by

    # WHEN the stream's records reach the function in the mapping's batches, each batch twice
    batches = [records[i : i + MAPPING_BATCH] for i in range(0, len(records), MAPPING_BATCH)]
    published = invoke_relay(app, [b for batch in batches for b in (batch, batch)])
    events = drain(app, url)

    # THEN every job that ended has exactly one event id, of its final status, and no payload; the
    # batch and the chain one completion each
    one_event_per_ending(events, finals, batch.id, chain_id)
    assert finals[dead[0]].status is JobStatus.DEAD and finals[cancelled].status is JobStatus.CANCELLED
    # ... and each delivery of a batch published the same events again (same ids: consumers dedupe)
    unique = {e["detail"]["event_id"] for e in events}
    assert published[0::2] == published[1::2] and sum(published) == len(events) == 2 * len(unique)
