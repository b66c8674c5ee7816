"""The worker registry, attacked from outside: real worker processes, SIGTERM, kill -9 (MiniStack).

Evidence comes from outside the worker: the listing (``list_workers_flow``, what ``GET /workers``
and ``sqsjobs workers`` call), and the table's own change stream, which records every write to the
worker's item (INSERT, MODIFY, REMOVE) with its new image — a write counter no code path of the
worker can bypass. Timing is never asserted beyond lower bounds the code guarantees (a refresh
sleeps a whole interval after the last one) and generous upper bounds for a loaded machine.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import socket
import subprocess
import sys
from importlib import metadata

import boto3
import pytest

from sqsjobs import JobStatus
from sqsjobs._aws import Call, one
from sqsjobs.envelope import DLQ_REASON
from sqsjobs.ops.worker_views import WorkerStatus, list_workers_flow
from sqsjobs.store import presence_items
from tests.apps import guarantees
from tests.integration.helpers import attr, receive_dlq, send_raw, worker_env
from tests.integration.test_guarantees import kill, wait_until

pytestmark = pytest.mark.slow

APP = "tests.apps.guarantees:app"


@pytest.fixture
def app(ministack_url, make_app):
    app = make_app(ministack_url, lease_s=5.0, visibility_timeout_s=5)
    app.registry.include(guarantees.app.registry)
    app.provision()
    return app


def start_worker(app, *, interval_s: float, concurrency: int = 4) -> subprocess.Popen[bytes]:
    env = worker_env(app, SQSJOBS_REGISTRY_INTERVAL_S=str(interval_s), POWERTOOLS_METRICS_DISABLED="true")
    return subprocess.Popen(
        [sys.executable, "-m", "sqsjobs", "worker", "--app", APP, "--concurrency", str(concurrency)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def listed(app, now: float | None = None):
    return app.run(list_workers_flow(app.settings, app.clock.now() if now is None else now))


def only_worker(app, proc):
    """The registry entry of ``proc``, once it is listed."""
    wait_until(lambda: any(w.pid == proc.pid for w in listed(app)), 60, "worker registered")
    (worker,) = [w for w in listed(app) if w.pid == proc.pid]
    return worker


class Stream:
    """The table's change stream (enabled by the test): every write to an item, in order."""

    def __init__(self, app):
        self.app = app
        kwargs = {"endpoint_url": app.settings.endpoint_url, "region_name": app.settings.region}
        described = boto3.client("dynamodb", **kwargs).update_table(
            TableName=app.settings.table_name,
            StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_IMAGE"},
        )
        self.arn = described["TableDescription"]["LatestStreamArn"]
        self.client = boto3.client("dynamodbstreams", **kwargs)

    def writes(self, item_id: str) -> list[tuple[str, dict]]:
        """``(event, new image)`` of every write to ``item_id`` so far."""
        out = []
        for shard in self.client.describe_stream(StreamArn=self.arn)["StreamDescription"]["Shards"]:
            it = self.client.get_shard_iterator(
                StreamArn=self.arn, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
            )["ShardIterator"]
            while it:
                page = self.client.get_records(ShardIterator=it)
                records = page["Records"]
                out += [
                    (r["eventName"], r["dynamodb"].get("NewImage", {}))
                    for r in records
                    if r["dynamodb"]["Keys"]["id"]["S"] == item_id
                ]
                it = page.get("NextShardIterator") if records else None
        return out


def n(image: dict, name: str) -> float:
    return float(image[name]["N"])


def test_a_worker_registers_refreshes_shows_its_job_drains_and_removes_itself(app, tmp_path):
    stream = Stream(app)
    # GIVEN a worker process with a 1 s registry interval
    proc = start_worker(app, interval_s=1.0)
    try:
        # THEN it is listed, live, with what it is
        worker = only_worker(app, proc)
        assert worker.status is WorkerStatus.LIVE
        assert (worker.host, worker.version) == (socket.gethostname(), metadata.version("sqsjobs"))
        assert (worker.queues, worker.concurrency, worker.interval_s) == (("default",), 4, 1.0)
        assert worker.job_types == tuple(sorted(s.name for s in guarantees.app.registry))
        assert worker.started_at <= worker.last_seen < worker.expires_at

        # WHEN it runs a long job, its next refresh names it
        job_id = app.enqueue("sleepy", {"runs_dir": str(tmp_path), "sleep_s": 6})
        wait_until(lambda: job_id in listed(app)[0].running, 60, "running job listed")
        assert listed(app)[0].running_count == 1

        # AND on SIGTERM it says it is draining, finishes the job, and removes its entry on exit
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(60) == 0
        assert listed(app) == []
        assert app.get(job_id).status is JobStatus.SUCCEEDED
    finally:
        kill(proc)

    # THEN the stream shows exactly that: registered on start (not after an interval), refreshed
    # once per interval with a running count, one draining write, removed last
    writes = stream.writes(presence_items.item_id(worker.id))
    events = [event for event, _ in writes]
    assert events[0] == "INSERT" and n(writes[0][1], "refreshes") == 0
    assert events[-1] == "REMOVE" and "MODIFY" not in events[events.index("REMOVE") :]
    images = [image for event, image in writes if event == "MODIFY"]
    assert [n(i, "refreshes") for i in images] == list(range(1, len(images) + 1))
    states = [i["state"]["S"] for i in images]
    assert presence_items.DRAINING in states and set(states[states.index(presence_items.DRAINING) :]) == {
        presence_items.DRAINING
    }
    running = [i for i in images if i["state"]["S"] == presence_items.RUNNING]
    seen = [n(writes[0][1], "last_seen")] + [n(i, "last_seen") for i in running]
    assert all(b - a >= 0.95 for a, b in itertools.pairwise(seen)), seen  # >= one interval apart


def test_fifty_jobs_add_no_registry_writes(app, tmp_path):
    stream = Stream(app)
    interval = 2.0
    proc = start_worker(app, interval_s=interval, concurrency=16)
    try:
        worker = only_worker(app, proc)
        # WHEN 50 jobs run through it
        ids = app.enqueue_many([{"type": "count", "payload": {"runs_dir": str(tmp_path)}} for _ in range(50)])
        wait_until(lambda: all(app.get(i).status is JobStatus.SUCCEEDED for i in ids), 90, "50 jobs done")
        jobs = [app.get(i) for i in ids]
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        kill(proc)
    # THEN the registry item was written only on its interval: every write while the jobs ran is a
    # scheduled refresh (>= one interval after the previous one), none per job
    first = min(j.started_at.timestamp() for j in jobs)  # type: ignore[union-attr]
    last = max(j.finished_at.timestamp() for j in jobs)  # type: ignore[union-attr]
    writes = stream.writes(presence_items.item_id(worker.id))
    times = [n(image, "last_seen") for event, image in writes if event != "REMOVE"]
    during = [t for t in times if first <= t <= last]
    assert len(during) <= (last - first) / interval + 1, (during, first, last)
    assert len(writes) == 1 + int(n(writes[-2][1], "refreshes")) + 1  # register, the refreshes, delete
    assert len(writes) < 50
    print(
        f"\nregistry writes: {len(writes)} ({[e for e, _ in writes]}); 50 jobs ran over {last - first:.2f} s"
    )


def test_a_killed_worker_goes_silent_after_two_intervals_and_carries_its_ttl(app):
    proc = start_worker(app, interval_s=1.0)
    try:
        worker = only_worker(app, proc)
        wait_until(lambda: listed(app)[0].refreshes >= 1, 60, "first refresh")
    finally:
        # WHEN it is killed outright: no draining write, no delete
        kill(proc)
    entry = listed(app)[0]
    last = entry.last_seen
    # THEN it stays listed: live up to two of its intervals after its last refresh, silent after
    assert listed(app, now=last + 2.0)[0].status is WorkerStatus.LIVE
    assert listed(app, now=last + 2.01)[0].status is WorkerStatus.SILENT
    wait_until(lambda: listed(app)[0].status is WorkerStatus.SILENT, 30, "silent on the real clock")
    # AND its item carries the TTL DynamoDB deletes it by (TTL is on for the table), and a reader
    # treats it as gone once past it, whether or not the emulator has deleted it yet
    assert entry.expires_at == presence_items.expires_at(
        presence_items.WorkerEntry(worker.id, "", 0, "", (), (), 1, 0.0, interval_s=1.0), last
    )
    assert listed(app, now=entry.expires_at - 0.5)[0].id == worker.id
    assert listed(app, now=entry.expires_at + 0.5) == []
    ttl = app.run(one(Call("dynamodb", "describe_time_to_live", {"TableName": app.settings.table_name})))
    assert ttl["TimeToLiveDescription"] == {"TimeToLiveStatus": "ENABLED", "AttributeName": "expires_at"}


def test_a_message_forged_with_a_workers_item_id_goes_to_the_dlq_and_leaves_the_item_alone(app):
    proc = start_worker(app, interval_s=1.0)
    try:
        worker = only_worker(app, proc)
        # WHEN a message names the worker's registry item as its job
        send_raw(app, json.dumps({"v": 1, "id": presence_items.item_id(worker.id), "type": "count"}))
        # THEN the worker dead-letters it with the reason, and the item is still its own
        dead: list[dict] = []
        wait_until(lambda: dead.extend(receive_dlq(app)) or dead, 60, "forged message dead-lettered")
        assert "job ids never contain '#'" in attr(dead[0], DLQ_REASON)
        assert [(w.id, w.status) for w in listed(app)] == [(worker.id, WorkerStatus.LIVE)]
        assert proc.poll() is None
    finally:
        kill(proc)


def test_the_listing_reads_the_registry_items_and_no_job_record(ministack_url, make_app):
    # GIVEN a table with 120 job records, 20 of them dead (in the attention index), and 3 workers
    app = make_app(ministack_url, measure_capacity=True)
    app.job("noop")(lambda payload, ctx: None)
    app.provision()
    ids = app.enqueue_many([{"type": "noop", "payload": {"n": i}} for i in range(120)])
    for i in ids[:20]:
        app.run(
            one(
                Call(
                    "dynamodb",
                    "update_item",
                    {
                        "TableName": app.settings.table_name,
                        "Key": {"id": {"S": i}},
                        "UpdateExpression": "SET attn = :a, due = :d, #s = :dead",
                        "ExpressionAttributeNames": {"#s": "status"},
                        "ExpressionAttributeValues": {
                            ":a": {"S": f"dead#{i[:2]}"},
                            ":d": {"N": "1"},
                            ":dead": {"S": "dead"},
                        },
                    },
                )
            )
        )
    now = app.clock.now()
    for k in range(3):
        entry = presence_items.WorkerEntry(f"w{k}", "h", k, "v", ("default",), ("noop",), 10, now, 30.0)
        app.run(
            one(
                Call(
                    "dynamodb",
                    "put_item",
                    presence_items.register(app.settings.table_name, entry, now=now).put_item(),
                )
            )
        )
    app.requests.reset()
    # WHEN the workers are listed
    found = listed(app, now)
    # THEN one Query of the registry's partition and one BatchGetItem of its 3 items, no Scan: the
    # Query read 3 keys (0.5 read unit: one 4 KB block), whatever the table holds
    assert sorted(w.id for w in found) == ["w0", "w1", "w2"]
    assert app.requests.snapshot() == {"dynamodb.BatchGetItem": 1, "dynamodb.Query": 1}
    assert app.requests.units("read", "index:attention") == 0.5
