"""The DESIGN §4 budget, counted (not timed): AWS requests per job while 100 no-op jobs flow through one worker."""

from __future__ import annotations

from bench.report import DYNAMODB_READS, DYNAMODB_WRITES
from sqsjobs import JobStatus
from sqsjobs.testing import all_finished, work_until

JOBS = 100


def test_a_backlog_costs_at_most_three_dynamodb_writes_no_reads_and_under_point_six_sqs_requests_per_job(
    ministack_url, make_app
):
    producer = make_app(ministack_url, receive_wait_s=20)

    @producer.job("noop")
    def noop(payload, ctx):
        return None

    producer.provision()
    worker_app = make_app(ministack_url, name=producer.name, receive_wait_s=20)
    worker_app.registry.include(producer.registry)

    producer.requests.reset()
    ids = producer.enqueue_many([{"type": "noop", "payload": {"blob": "x" * 1024}} for _ in range(JOBS)])
    enqueue_calls = dict(producer.requests.counts)

    work_until(worker_app, all_finished(producer, ids), concurrency=10)
    assert all(producer.get(i).status is JobStatus.SUCCEEDED for i in ids)

    calls = dict(worker_app.requests.counts)
    for key, n in enqueue_calls.items():
        calls[key] = calls.get(key, 0) + n
    ddb_writes = sum(n for (svc, op), n in calls.items() if svc == "dynamodb" and op in DYNAMODB_WRITES)
    ddb_reads = sum(n for (svc, op), n in calls.items() if svc == "dynamodb" and op in DYNAMODB_READS)
    sqs_requests = sum(n for (svc, _), n in calls.items() if svc == "sqs")
    summary = {f"{s}.{o}": n for (s, o), n in sorted(calls.items())}

    assert ddb_writes / JOBS <= 3, summary
    assert ddb_reads == 0, summary
    assert sqs_requests / JOBS <= 0.6, summary
    print(f"\nrequests for {JOBS} jobs: {summary}")
