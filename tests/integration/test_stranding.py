"""No stranded record where two features meet: every unfinished job keeps a witness that brings it back.

Each test runs real worker processes on MiniStack with the limits that make a meeting bite
(short redrive limits, long holds), no sweeper unless it says so, and then asks the records and
the queues: every job ended, or is still on its way with a witness.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from sqsjobs import JobStatus
from sqsjobs.transport import routes
from tests.apps import stranding
from tests.integration.helpers import kill_group, sqs_call, wait_until, worker_process

pytestmark = pytest.mark.slow

APP = "tests.apps.stranding:app"


def runs(path: Path) -> Counter[str]:
    lines = path.read_text().splitlines() if path.exists() else []
    return Counter(line.split()[0] for line in lines)


def depth(app, url: str) -> int:
    attrs = sqs_call(app, "get_queue_attributes", QueueUrl=url, AttributeNames=["All"])["Attributes"]
    return int(attrs["ApproximateNumberOfMessages"]) + int(attrs["ApproximateNumberOfMessagesNotVisible"])


def test_serialized_jobs_deferred_by_a_held_limit_past_the_redrive_limit_all_run(
    ministack_url, make_app, tmp_path
):
    # GIVEN a serialized queue under a concurrency-1 limit, and a FIFO redrive limit of 6 receives
    settings = {"serialized_queues": {"device"}, "max_receive_count": 6}
    env = {"SQSJOBS_SERIALIZED_QUEUES": "device", "SQSJOBS_MAX_RECEIVE_COUNT": "6"}
    app = make_app(ministack_url, **settings)
    app.registry.include(stranding.app.registry)
    app.provision()
    log = tmp_path / "runs"
    holder = app.enqueue("hold", {"runs": str(log), "sleep_s": 15})
    workers = [worker_process(app, APP, concurrency=2, queues="default,device", **env)]
    try:
        wait_until(lambda: runs(log)[holder] == 1, 30, "the holder's start")
        # WHEN nine serialized jobs over three keys wait on the held slot, far more deferrals than
        # the redrive limit allows, with two workers and no sweeper
        steps = [app.enqueue("device.step", {"runs": str(log)}, serialize_key=f"k{i % 3}") for i in range(9)]
        workers.append(worker_process(app, APP, concurrency=2, queues="default,device", **env))
        # THEN every one of them runs, once: none was left to SQS's redrive with a queued record
        wait_until(
            lambda: all(app.get(j, load_result=False).status is JobStatus.SUCCEEDED for j in steps),
            90,
            "every serialized job succeeded",
        )
        assert {j: runs(log)[j] for j in steps} == dict.fromkeys(steps, 1)
        backstop = sqs_call(app, "get_queue_url", QueueName=routes.fifo_dlq_name(app.settings, "device"))
        assert depth(app, backstop["QueueUrl"]) == 0
    finally:
        kill_group(*workers)
