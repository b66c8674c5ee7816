"""What a job costs under a batch handler against a single handler: AWS requests and write units per job, counted.

Run: ``make .venv-ministack/bin/ministack && PYTHONPATH=. .venv/bin/python bench/batch_cost.py [jobs]``.

The same jobs (1 KB payloads) go through one in-process worker twice: once to a handler that takes
one job per call, once to a batch handler (``BatchOptions(max_size=50)``). Requests are counted by
the drivers, one per API call; write units are what DynamoDB (MiniStack) says each write consumed
(``ReturnConsumedCapacity=INDEXES``), less the worker's own registry item (a cost per worker, not
per job). Each job keeps its own claim and finish under a batch handler, so its write units are
the same; what changes is how many of those writes come ready at one instant and share a request.
"""

from __future__ import annotations

import os
import sys
import uuid
from dataclasses import dataclass
from typing import Any

from bench.report import DYNAMODB_READS, DYNAMODB_WRITES
from sqsjobs import App, BatchItem, BatchOptions, BatchSuccess, JobStatus
from sqsjobs.testing import all_finished, work_until


@dataclass(frozen=True)
class Cost:
    """Per job: AWS requests (DynamoDB writes and reads, SQS) and write units (table and indexes summed)."""

    dynamodb_writes: float
    dynamodb_reads: float
    sqs_requests: float
    write_units: float

    @property
    def requests(self) -> float:
        """Every AWS request per job."""
        return self.dynamodb_writes + self.dynamodb_reads + self.sqs_requests


def _single(payload: dict[str, Any], ctx: Any) -> None:
    return None


def _batch(items: list[BatchItem[dict[str, Any]]]) -> list[BatchSuccess]:
    return [BatchSuccess() for _ in items]


def measure(url: str, *, batch: bool, jobs: int = 100, concurrency: int = 10) -> Cost:
    """Run ``jobs`` jobs through one worker (a batch handler or a single one); what each cost."""
    name = f"bc{uuid.uuid4().hex[:8]}"
    settings: dict[str, Any] = {"endpoint_url": url, "measure_capacity": True, "receive_wait_s": 1}
    app = App(name, **settings)
    if batch:
        app.job("work", batch=BatchOptions(max_size=50, max_wait_s=0.5))(_batch)
    else:
        app.job("work")(_single)
    app.provision()
    try:
        app.requests.reset()
        ids = app.enqueue_many([{"type": "work", "payload": {"blob": "x" * 1024}} for _ in range(jobs)])
        ran = work_until(app, all_finished(app, ids), concurrency=concurrency, timeout_s=120)
        assert all(app.get(i).status is JobStatus.SUCCEEDED for i in ids)
        # The checks above read records: they are the test's, not the jobs', so they are left out.
        counts = {k: n for k, n in app.requests.counts.items() if k[1] not in {"GetItem"}}
        units = sum(u for (kind, _), u in app.requests.capacity.items() if kind == "write")
        units -= sum(ran.presence.capacity.values())
    finally:
        app.close()
    per = float(jobs)
    return Cost(
        dynamodb_writes=sum(n for (s, o), n in counts.items() if s == "dynamodb" and o in DYNAMODB_WRITES)
        / per,
        dynamodb_reads=sum(n for (s, o), n in counts.items() if s == "dynamodb" and o in DYNAMODB_READS)
        / per,
        sqs_requests=sum(n for (s, _), n in counts.items() if s == "sqs") / per,
        write_units=units / per,
    )


def main() -> None:
    """Print both costs side by side."""
    from tests.emulators import MiniStack

    jobs = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        os.environ.setdefault(key, "bench")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    with MiniStack() as server:
        print(f"{jobs} jobs, 1 KB payloads, one worker of 10 slots | per job:")
        print(
            "handler | DynamoDB write requests | DynamoDB reads | SQS requests | all requests | write units"
        )
        for label, batch in (("single", False), ("batch of ≤ 50", True)):
            c = measure(server.endpoint_url, batch=batch, jobs=jobs)
            print(
                f"{label} | {c.dynamodb_writes:.3f} | {c.dynamodb_reads:.3f} | {c.sqs_requests:.3f} "
                f"| {c.requests:.3f} | {c.write_units:.2f}"
            )


if __name__ == "__main__":
    main()
