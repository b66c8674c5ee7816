"""What a job with a priority or a serialize key costs, counted (DynamoDB's ConsumedCapacity, requests per call).

A plain job's cost is tests/integration/test_cost.py's (unchanged by routing). Here: 100 jobs with
1 KB payloads on each route, through one in-process worker of 10 slots.
"""

from __future__ import annotations

import uuid

import pytest

from bench.report import DYNAMODB_READS, DYNAMODB_WRITES
from sqsjobs import App, JobRequest, JobStatus
from sqsjobs.testing import all_finished, work_until

JOBS = 100
ROUTED = {"priority_queues": {"work"}, "serialized_queues": {"work"}}


def run(ministack_url: str, requests: list[JobRequest]) -> tuple[dict, dict]:
    name = f"rc{uuid.uuid4().hex[:8]}"
    settings = {"endpoint_url": ministack_url, "measure_capacity": True, "receive_wait_s": 20, **ROUTED}
    producer = App(name, **settings)
    producer.job("noop", queue="work")(lambda payload, ctx: None)
    producer.provision()
    worker = App(name, **settings)
    worker.registry.include(producer.registry)
    producer.requests.reset()
    ids = producer.enqueue_many(requests)
    # the producer's own share, before the test's reads of the records (all_finished, get) count
    enqueue_counts, enqueue_capacity = dict(producer.requests.counts), dict(producer.requests.capacity)
    ran = work_until(worker, all_finished(producer, ids), concurrency=10)
    assert all(producer.get(i).status is JobStatus.SUCCEEDED for i in ids)
    calls = dict(worker.requests.counts)
    for key, n in enqueue_counts.items():
        calls[key] = calls.get(key, 0) + n
    capacity = dict(worker.requests.capacity)
    for part, units in ran.presence.capacity.items():  # the worker's registry item: per process, not per job
        capacity[("write", part)] -= units
    for key, units in enqueue_capacity.items():
        capacity[key] = capacity.get(key, 0.0) + units
    return calls, capacity


CASES = {
    "high": lambda i: {"priority": "high"},
    "low": lambda i: {"priority": "low"},
    "10 keys": lambda i: {"serialize_key": f"k{i % 10}"},
    "tenant": lambda i: {"tenant": f"t{i % 10}"},
}


@pytest.mark.parametrize("case", CASES)
def test_a_routed_job_keeps_the_three_write_unit_budget_and_reads_nothing(ministack_url, case):
    requests = [JobRequest("noop", {"blob": "x" * 1024}, **CASES[case](i)) for i in range(JOBS)]
    calls, capacity = run(ministack_url, requests)
    units = sum(u for (kind, _), u in capacity.items() if kind == "write")
    reads = sum(n for (svc, op), n in calls.items() if svc == "dynamodb" and op in DYNAMODB_READS)
    writes = sum(n for (svc, op), n in calls.items() if svc == "dynamodb" and op in DYNAMODB_WRITES)
    sqs = sum(n for (svc, _), n in calls.items() if svc == "sqs")
    print(
        f"\n{case}: {units / JOBS:.2f} WU/job, {writes / JOBS:.2f} DynamoDB writes/job, {sqs / JOBS:.2f} SQS requests/job "
        f"{ {f'{s}.{o}': n for (s, o), n in sorted(calls.items()) if s == 'sqs'} }"
    )
    assert units / JOBS <= 3.0, capacity
    assert reads == 0, calls
