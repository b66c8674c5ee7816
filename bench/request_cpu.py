"""CPU per AWS request through ``App.arun``, and per job for the work around the requests.

The worker's CPU per job is mostly the SDK's cost per request (docs/bench.md, profile section);
this measures that cost directly, without a worker, a handler or a profiler, against a MiniStack
it starts (the emulator's CPU is its own process's, never counted). Operations, shaped like the
worker's:

- ``update``: UpdateItem, conditional, ``ReturnValues=ALL_NEW`` on a 15-attribute record (a claim);
- ``batch``: BatchExecuteStatement of 10 conditional PartiQL ``UPDATE``s (a batched claim or finish);
- ``receive``: ReceiveMessage of 10 messages of 1 KB with their system and message attributes;
- ``delete``: DeleteMessageBatch of 10 receipts;

and the per-job work outside requests (no I/O): ``envelope`` (parse of a 1 KB body), ``log`` (the
"job claimed" JSON line, to /dev/null), ``metrics`` (a claimed and a succeeded transition, and their
share of a flush), ``trace`` (the trace id of a log line and an idle span).

Two ways to measure:

- by default, ``time.process_time()`` of this process over ``--n`` operations of each kind,
  ``--concurrency`` at a time on one event loop; the best of ``--rounds`` is printed (the least
  disturbed by other load), in ms of CPU per request or per job;
- ``--instructions``: CPU instructions per operation, counted by valgrind's callgrind in a child
  process that runs ``--n`` and then ``3 * --n`` operations (the difference, so start-up cancels
  out). Deterministic to about 1 % whatever else runs on the machine, so it shows changes of a
  few percent that timing cannot; about 1.5 minutes per operation. Needs ``valgrind``.

Usage: ``python bench/request_cpu.py [--n 400] [--concurrency 32] [--rounds 3] [--only update,log]``
or ``python bench/request_cpu.py --instructions [--n 100] [--only update]``. Run it with
``PYTHONPATH=<another checkout>`` to measure that checkout's sqsjobs with the same script (A/B),
from a directory that is not a checkout (Python puts the script's directory and, for ``-c``, the
current one before ``PYTHONPATH``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import re
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "test",
    "AWS_SECRET_ACCESS_KEY": "test",
    "AWS_DEFAULT_REGION": "us-east-1",
}
BATCH = 10
REQUESTS = ("update", "batch", "receive", "delete")
PER_JOB = ("envelope", "log", "metrics", "trace")
LABELS = {
    "update": "dynamodb UpdateItem (claim-shaped), per request",
    "batch": "dynamodb BatchExecuteStatement x10, per request",
    "receive": "sqs ReceiveMessage x10, per request",
    "delete": "sqs DeleteMessageBatch x10, per request",
    "envelope": "envelope parse (1 KB body), per job",
    "log": "one JSON log line at INFO, per line",
    "metrics": "metrics of claimed + succeeded, with flush, per job",
    "trace": "trace id of 2 log lines + an idle span, per job",
}
RECEIPTS_FILE = "/tmp/sqsjobs-request-cpu-{app}.json"
TRACE = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"


def _trace(i: int) -> str:
    """Job ``i``'s producer trace: each job has its own."""
    return f"Root=1-5759e988-{i:024x};Parent=53995c3f42cd8ad8;Sampled=1"


def _record(i: int) -> dict[str, Any]:
    """A job record's attributes, as the store writes them (about 500 bytes)."""
    return {
        "id": {"S": f"job-{i:08d}"},
        "type": {"S": "bench.noop"},
        "queue": {"S": "default"},
        "status": {"S": "queued"},
        "attempt": {"N": "0"},
        "max_attempts": {"N": "5"},
        "payload_hash": {"S": "a" * 64},
        "payload_size": {"N": "1024"},
        "payload_version": {"N": "1"},
        "created_at": {"N": "1767225600.123"},
        "run_at": {"N": "1767225600.123"},
        "updated_at": {"N": "1767225600.123"},
        "trace": {"S": TRACE},
        "root_id": {"S": f"job-{i:08d}"},
        "lease_epoch": {"N": "0"},
    }


def _claim(table: str, i: int, token: str) -> dict[str, Any]:
    """A conditional UpdateItem shaped like a claim: SET six fields, the whole record back."""
    return {
        "TableName": table,
        "Key": {"id": {"S": f"job-{i:08d}"}},
        "UpdateExpression": "SET #s = :running, attempt = attempt + :one, lease_owner = :owner, "
        "claim_token = :token, lease_expires = :exp, started_at = :now",
        "ConditionExpression": "attribute_exists(id) AND #s IN (:queued, :running)",
        "ExpressionAttributeNames": {"#s": "status"},
        "ExpressionAttributeValues": {
            ":running": {"S": "running"},
            ":queued": {"S": "queued"},
            ":one": {"N": "1"},
            ":owner": {"S": "host-1234-abcdef"},
            ":token": {"S": token},
            ":exp": {"N": "1767225660.5"},
            ":now": {"N": "1767225600.5"},
        },
        "ReturnValues": "ALL_NEW",
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }


def _statements(table: str, first: int, token: str) -> dict[str, Any]:
    """BatchExecuteStatement of ten conditional updates (a batched claim or finish)."""
    return {
        "Statements": [
            {
                "Statement": f'UPDATE "{table}" SET "status" = ? SET claim_token = ? '
                "WHERE id = ? AND attribute_exists(id)",
                "Parameters": [{"S": "running"}, {"S": token}, {"S": f"job-{first + k:08d}"}],
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            }
            for k in range(BATCH)
        ]
    }


def _body(i: int) -> str:
    """A v2 envelope with a 1 KB payload, as the producer sends it."""
    return json.dumps(
        {
            "v": 2,
            "id": f"job-{i:08d}",
            "type": "bench.noop",
            "queue": "default",
            "payload": {"seq": i, "pad": "x" * 1000},
            "hash": "a" * 64,
            "pv": 1,
            "created": 1767225600.123,
            "run_at": 1767225600.123,
            "trace": TRACE,
        },
        separators=(",", ":"),
    )


async def _spread(n: int, concurrency: int, one: Callable[[int], Awaitable[Any]]) -> None:
    """``one(0..n-1)``, ``concurrency`` at a time."""
    queue = iter(range(n))

    async def lane() -> None:
        for i in queue:
            await one(i)

    await asyncio.gather(*(lane() for _ in range(concurrency)))


class Requests:
    """The request operations against one provisioned App (records and messages made beforehand)."""

    def __init__(self, app: Any) -> None:
        from sqsjobs._aws import Call, one

        self.app = app
        self.table = app.settings.table_name
        self._call, self._one = Call, one
        self.url = ""
        self.receipts: list[list[str]] = []

    async def run(self, service: str, operation: str, params: dict[str, Any]) -> Any:
        """One request through the App's driver, as the worker makes it."""
        return await self.app.arun(self._one(self._call(service, operation, params)))

    async def prepare(self, n: int) -> None:
        """Records for ``n`` requests of each kind, and messages for ``n`` receives (uncounted)."""
        self.url = (await self.app.arun(self.app.queue_urls.flow(["default"])))["default"]
        for i in range(0, n * BATCH, 25):
            items = [{"PutRequest": {"Item": _record(k)}} for k in range(i, min(i + 25, n * BATCH))]
            await self.run("dynamodb", "batch_write_item", {"RequestItems": {self.table: items}})
        await asyncio.gather(
            *(
                self.run(
                    "sqs",
                    "send_message_batch",
                    {
                        "QueueUrl": self.url,
                        "Entries": [
                            {"Id": str(k), "MessageBody": _body(i * BATCH + k)} for k in range(BATCH)
                        ],
                    },
                )
                for i in range(n)
            )
        )

    async def update(self, i: int) -> None:
        """One claim-shaped UpdateItem of record ``i``."""
        await self.run("dynamodb", "update_item", _claim(self.table, i, f"t{i}"))

    async def batch(self, i: int) -> None:
        """One BatchExecuteStatement of records ``10i..10i+9``."""
        await self.run("dynamodb", "batch_execute_statement", _statements(self.table, i * BATCH, f"b{i}"))

    async def receive(self, i: int) -> None:
        """One ReceiveMessage of up to ten; keeps the receipts for ``delete``."""
        answer = await self.run(
            "sqs",
            "receive_message",
            {
                "QueueUrl": self.url,
                "MaxNumberOfMessages": BATCH,
                "WaitTimeSeconds": 0,
                "VisibilityTimeout": 600,
                "MessageSystemAttributeNames": ["ApproximateReceiveCount", "SentTimestamp", "AWSTraceHeader"],
                "MessageAttributeNames": ["All"],
            },
        )
        self.receipts.append([m["ReceiptHandle"] for m in answer.get("Messages", [])])

    async def delete(self, i: int) -> None:
        """One DeleteMessageBatch of the ``i``-th receive's receipts."""
        batch = self.receipts[i]
        entries = [{"Id": str(k), "ReceiptHandle": h} for k, h in enumerate(batch)]
        await self.run("sqs", "delete_message_batch", {"QueueUrl": self.url, "Entries": entries})


class PerJob:
    """The per-job work outside requests, on ``n`` prepared jobs."""

    def __init__(self, app: Any, n: int) -> None:
        from sqsjobs import envelope as env
        from sqsjobs.job import Job, JobStatus

        self.app = app
        self.bodies = [_body(i) for i in range(n)]
        when = datetime.now(UTC)
        self.jobs = [
            Job(
                id=f"job-{i:08d}",
                type="bench.noop",
                queue="default",
                status=JobStatus.RUNNING,
                payload=None,
                payload_version=1,
                attempt=1,
                max_attempts=5,
                run_at=when,
                created_at=when,
                updated_at=when,
                started_at=when,
                trace=_trace(i),
            )
            for i in range(n)
        ]
        self._parse = env.parse
        self._devnull = open(os.devnull, "w")  # noqa: SIM115 - closed in close()
        logger = app.telemetry.logger
        for handler in getattr(logger, "handlers", None) or logger._logger.handlers:
            if isinstance(handler, logging.StreamHandler):
                handler.setStream(self._devnull)
        app.telemetry.metrics._write = lambda line: None

    def close(self) -> None:
        """Close /dev/null."""
        self._devnull.close()

    def envelope(self, n: int) -> None:
        """Parse ``n`` bodies."""
        for body in self.bodies[:n]:
            self._parse(body)

    def log(self, n: int) -> None:
        """``n`` "job claimed" lines."""
        from sqsjobs.job import AttemptOutcome
        from sqsjobs.observability.tracing import trace_id

        logger = self.app.telemetry.logger
        for job in self.jobs[:n]:
            logger.info(
                "job claimed",
                extra={
                    "job_id": job.id,
                    "job_type": job.type,
                    "queue": job.queue,
                    "attempt": job.attempt,
                    "status": str(job.status),
                    "tenant": job.tenant,
                    "trace_id": trace_id(job.trace),
                    "worker": "host-1234-abcdef",
                    "receive_count": 1,
                    "wait_s": 0.123,
                    "outcome": AttemptOutcome.STARTED,
                },
            )

    def metrics(self, n: int) -> None:
        """A claimed and a succeeded transition of ``n`` jobs, then a flush."""
        from sqsjobs.job import AttemptOutcome
        from sqsjobs.observability.metrics import on_transition

        metrics = self.app.telemetry.metrics
        for job in self.jobs[:n]:
            on_transition(metrics, job, {"outcome": AttemptOutcome.STARTED, "wait_s": 0.1})
            on_transition(metrics, job, {"outcome": AttemptOutcome.SUCCEEDED, "duration_s": 0.01})
        metrics.flush()

    def trace(self, n: int) -> None:
        """The trace id of two log lines and an idle span, for ``n`` jobs."""
        from sqsjobs.observability.tracing import trace_id

        tracer = self.app.telemetry.tracer
        for job in self.jobs[:n]:
            trace_id(job.trace)
            trace_id(job.trace)
            with tracer.span(job):
                pass


def _timed(app: Any, ops: list[str], n: int, concurrency: int) -> dict[str, float]:
    """CPU seconds per operation of each of ``ops``."""
    out: dict[str, float] = {}
    requests = Requests(app)

    async def measure() -> None:
        try:
            await requests.prepare(n)
            await requests.update(0)  # the clients' start-up, outside the measurement
            for op in (o for o in REQUESTS if o in ops or (o == "receive" and "delete" in ops)):
                count = len([r for r in requests.receipts if r]) if op == "delete" else n
                started = time.process_time()
                await _spread(count, concurrency, getattr(requests, op))
                if op in ops:
                    out[op] = (time.process_time() - started) / max(1, count)
                if op == "receive":
                    requests.receipts = [r for r in requests.receipts if r]
        finally:
            await app.aclose()

    if any(op in REQUESTS for op in ops):
        asyncio.run(measure())
    jobs = PerJob(app, n * BATCH)
    try:
        for op in (o for o in PER_JOB if o in ops):
            getattr(jobs, op)(10)  # first use: imports, the logger and tracer made
            started = time.process_time()
            getattr(jobs, op)(n * BATCH)
            out[op] = (time.process_time() - started) / (n * BATCH)
    finally:
        jobs.close()
    return out


def _child(app_name: str, endpoint: str, op: str, n: int, concurrency: int, items: int) -> None:
    """Under callgrind: ``n`` operations ``op`` after one of warm-up (the records are there already).

    Per-job operations run on ``items`` prepared jobs whatever ``n`` is, so that preparing them
    costs the same in both counts and cancels out.
    """
    from sqsjobs import App

    app = App(app_name, endpoint_url=endpoint)
    app.telemetry.logger  # noqa: B018 - Powertools imported and set up, as in a worker
    if op in PER_JOB:
        jobs = PerJob(app, items)
        getattr(jobs, op)(10)
        getattr(jobs, op)(n)
        jobs.close()
        return
    requests = Requests(app)

    async def main() -> None:
        requests.url = (await app.arun(app.queue_urls.flow(["default"])))["default"]
        if op == "delete":  # receipts to delete, received by the parent
            requests.receipts = json.loads(Path(RECEIPTS_FILE.format(app=app_name)).read_text())
        await getattr(requests, op)(0)
        await _spread(n, concurrency, lambda i: getattr(requests, op)(i + 1))
        await app.aclose()

    asyncio.run(main())


def _instructions(endpoint: str, ops: list[str], n: int, concurrency: int) -> dict[str, float]:
    """Instructions per operation: callgrind's count for ``3n`` operations minus that for ``n``, over ``2n``."""
    from sqsjobs import App

    out: dict[str, float] = {}
    script = Path(__file__).resolve()
    for op in ops:
        counts = []
        per = BATCH if op in PER_JOB else 1  # per-job work is cheap: ten times as many to count
        for count in (n * per, 3 * n * per):
            name = f"ins{os.getpid()}{op}{count}"
            app = App(name, endpoint_url=endpoint)
            app.provision()
            if op in REQUESTS:
                requests = Requests(app)

                async def prepare(requests: Requests = requests, count: int = count, op: str = op) -> None:
                    await requests.prepare(count + 2)
                    if op == "delete":  # what the child deletes, received here (uncounted)
                        await _spread(count + 2, concurrency, requests.receive)
                        receipts = [r for r in requests.receipts if r]
                        Path(RECEIPTS_FILE.format(app=requests.app.name)).write_text(json.dumps(receipts))
                    await requests.app.aclose()

                asyncio.run(prepare())
            app.close()
            argv = [
                "valgrind",
                "--tool=callgrind",
                "--callgrind-out-file=/dev/null",
                sys.executable,
                str(script),
                "--child",
                op,
                "--app-name",
                name,
                "--endpoint",
                endpoint,
                "--n",
                str(count),
                "--concurrency",
                str(concurrency),
                "--items",
                str(3 * n * per),
            ]
            try:
                done = subprocess.run(argv, capture_output=True, text=True, check=True)
            finally:
                Path(RECEIPTS_FILE.format(app=name)).unlink(missing_ok=True)
            match = re.search(r"Collected : (\d+)", done.stderr)
            if match is None:
                raise RuntimeError(f"no instruction count from callgrind:\n{done.stderr[-2000:]}")
            counts.append(int(match.group(1)))
        out[op] = (counts[1] - counts[0]) / (2 * n * per)
    return out


def main(argv: list[str] | None = None) -> int:
    """Measure and print CPU per request / per job."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=None, help="operations of each kind (default 400, or 100)")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", help=f"comma-separated, of {', '.join(REQUESTS + PER_JOB)}")
    parser.add_argument("--instructions", action="store_true", help="count instructions with callgrind")
    parser.add_argument("--endpoint", help="an emulator already running (default: start a MiniStack)")
    parser.add_argument("--json", help="also write the figures here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--app-name", help=argparse.SUPPRESS)
    parser.add_argument("--items", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    os.environ.update(CREDENTIALS)
    # tests.emulators, when run as a file; last, so that PYTHONPATH picks the sqsjobs measured.
    sys.path.append(str(Path(__file__).resolve().parent.parent))
    if args.child:
        _child(args.app_name, args.endpoint, args.child, args.n, args.concurrency, args.items)
        return 0
    ops = args.only.split(",") if args.only else list(REQUESTS + PER_JOB)
    n = args.n or (100 if args.instructions else 400)
    server: Any = None
    endpoint = args.endpoint
    if endpoint is None:
        from tests.emulators import MiniStack

        server = MiniStack()
        endpoint = server.start()
    best: dict[str, float] = {}
    try:
        if args.instructions:
            best = _instructions(endpoint, ops, n, args.concurrency)
        else:
            from sqsjobs import App

            for r in range(args.rounds):
                app = App(f"cpu{os.getpid()}r{r}", endpoint_url=endpoint)
                app.provision()
                for k, v in _timed(app, ops, n, args.concurrency).items():
                    best[k] = min(best.get(k, v), v)
                app.close()
    finally:
        if server is not None:
            server.stop()
    import sqsjobs

    where = Path(sqsjobs.__file__).parent.parent
    if args.instructions:
        print(
            f"sqsjobs from {where}; thousands of instructions (callgrind), {n} vs {3 * n} requests "
            f"or {10 * n} vs {30 * n} jobs:"
        )
        figures = {LABELS[k]: round(v / 1000, 1) for k, v in best.items()}
    else:
        print(f"sqsjobs from {where}; ms of CPU, best of {args.rounds} rounds of {n}:")
        figures = {LABELS[k]: round(1000 * v, 4) for k, v in best.items()}
    for label, value in figures.items():
        print(f"  {value:9.4g}  {label}")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
