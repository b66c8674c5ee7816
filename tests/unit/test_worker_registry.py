"""The worker registry's pure parts: statuses, the item's size and index footprint, the heartbeat line."""

from __future__ import annotations

import json
import uuid

import pytest

from sqsjobs.envelope import Envelope
from sqsjobs.errors import EnvelopeError
from sqsjobs.observability.metrics import HEARTBEAT, JobMetrics
from sqsjobs.ops.worker_views import WorkerStatus, count_workers, status_of, worker_from_item
from sqsjobs.store import presence_items
from sqsjobs.store.schema import LISTED

NOW = 1_800_000_000.0
ENTRY = presence_items.WorkerEntry(
    worker_id="ip-10-0-12-34.ec2.internal-4242-a1b2c3",
    host="ip-10-0-12-34.ec2.internal",
    pid=4242,
    version="0.9.0",
    queues=("default", "reports", "emails"),
    job_types=("orders.ship", "reports.daily", "mail.send", "mail.digest", "orders.refund"),
    concurrency=10,
    started_at=NOW - 3600,
    interval_s=30.0,
)


def _size(av: dict) -> int:
    """DynamoDB's item-size rule, closely enough: string bytes, numbers ~1 byte per 2 digits + 1, lists +3 +1 each."""
    ((kind, value),) = av.items()
    if kind == "S":
        return len(value.encode())
    if kind == "N":
        return len(value.replace(".", "")) // 2 + 2
    return 3 + sum(_size(v) + 1 for v in value)


@pytest.mark.parametrize(
    ("age", "state", "expected"),
    [
        (0.0, presence_items.RUNNING, WorkerStatus.LIVE),
        (60.0, presence_items.RUNNING, WorkerStatus.LIVE),  # exactly two intervals: not yet silent
        (60.1, presence_items.RUNNING, WorkerStatus.SILENT),
        (10.0, presence_items.DRAINING, WorkerStatus.DRAINING),
        (61.0, presence_items.DRAINING, WorkerStatus.SILENT),  # killed by the platform mid-drain
    ],
)
def test_status_is_judged_by_the_workers_own_interval(age, state, expected):
    assert status_of(state=state, last_seen=NOW - age, interval_s=30.0, now=NOW) is expected


def test_a_full_worker_item_stays_under_one_kilobyte_so_each_refresh_is_one_write_unit():
    # GIVEN a worker running as many jobs as its concurrency, ids as the producer makes them
    running = [uuid.uuid4().hex for _ in range(ENTRY.concurrency)]
    item = presence_items.register("t", ENTRY, now=NOW, running=running).item
    # THEN the item is under 1 KB (an update is billed on the larger of the before and after sizes)
    size = sum(len(name) + _size(av) for name, av in item.items())
    assert size < 1024, size
    # AND more running jobs than that are counted, not listed
    many = presence_items.register("t", ENTRY, now=NOW, running=[*running, *running]).item
    assert len(many["running"]["L"]) == presence_items.MAX_RUNNING_LISTED
    assert many["running_count"] == {"N": str(2 * len(running))}


def test_a_refresh_writes_no_index_key_and_no_projected_attribute():
    params = presence_items.refresh("t", ENTRY, now=NOW, state=presence_items.DRAINING, running=["j1"])
    written = {path for path, _ in params.sets} | {path for path, _ in params.adds}
    assert written.isdisjoint({"attn", "due", *LISTED}), written
    # AND the item it refreshes carries no job attribute a job listing or stats filters on
    item = presence_items.register("t", ENTRY, now=NOW).item
    assert set(item).isdisjoint({"status", "type", "queue", "updated_at"})


def test_an_item_reads_back_as_the_worker_it_registered():
    item = presence_items.register("t", ENTRY, now=NOW, running=["j1", "j2"]).item
    info = worker_from_item(item, NOW + 1)
    assert (info.id, info.host, info.pid, info.queues, info.job_types) == (
        ENTRY.worker_id,
        ENTRY.host,
        ENTRY.pid,
        ENTRY.queues,
        ENTRY.job_types,
    )
    assert (info.running, info.running_count, info.status) == (("j1", "j2"), 2, WorkerStatus.LIVE)
    assert (
        info.expires_at
        == presence_items.expires_at(ENTRY, NOW)
        >= NOW + presence_items.TTL_INTERVALS * ENTRY.interval_s
    )
    assert count_workers([info]) == {"live": 1, "draining": 0, "silent": 0}
    assert json.loads(json.dumps(info.to_dict()))["status"] == "live"


def test_a_message_naming_a_registry_item_is_not_a_job():
    body = json.dumps({"v": 1, "id": "worker#ip-10-0-1-1-7-abc", "type": "orders.ship"})
    with pytest.raises(EnvelopeError, match="never contain '#'"):
        Envelope.from_body(body)


def test_the_heartbeat_is_one_emf_line_per_service_written_at_once():
    lines: list[str] = []
    metrics = JobMetrics("shop", write=lines.append)
    metrics.worker_heartbeat()
    (doc,) = [json.loads(line) for line in lines]
    (directive,) = doc["_aws"]["CloudWatchMetrics"]
    assert directive["Dimensions"] == [["service"]]
    assert directive["Metrics"] == [{"Name": HEARTBEAT, "Unit": "Count"}]
    assert (doc["service"], doc[HEARTBEAT]) == ("shop", [1.0])
