"""``make demo``: the whole lifecycle on the embedded emulator, in under a minute, then a summary.

Starts moto's server on 127.0.0.1, provisions the example app, enqueues four jobs, runs a worker, the
sweeper and the local firing loop of the app's schedule until every job (and the first scheduled one)
is final, and prints what happened to each, with the DLQ's contents.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from rich.console import Console
from rich.table import Table

from examples.shop import app
from sqsjobs._aws import Call, one
from sqsjobs.envelope import DLQ_JOB_ID, DLQ_REASON
from sqsjobs.local.dev import DevStack
from sqsjobs.ops.inspect import ListQuery, list_flow
from sqsjobs.transport.queues import dlq_key

console = Console(width=120)


def scheduled_job_ids() -> list[str]:
    """Jobs the schedule's fires created, from the by-type index."""
    page = app.run(list_flow(app.settings, ListQuery(type="inventory.audit"), time.time()))
    return [row.id for row in page.rows]


async def run_until_final(job_ids: list[str], stack: DevStack, timeout_s: float = 90) -> list[str]:
    """Run the dev stack (worker, sweeper, local schedule firing) until every job is final."""
    stop = asyncio.Event()
    running = asyncio.create_task(stack.run(stop, concurrency=4))
    deadline = time.monotonic() + timeout_s
    last: dict[str, str] = {}
    while time.monotonic() < deadline:
        ids = job_ids + await asyncio.to_thread(scheduled_job_ids)
        jobs = [await app.aget(i) for i in ids]
        for job in jobs:
            if last.get(job.id) != job.status:
                console.print(f"  {job.type:<16} → [bold]{job.status}[/bold] (attempt {job.attempt})")
                last[job.id] = job.status
        if len(ids) > len(job_ids) and all(j.status.terminal for j in jobs):
            break
        await asyncio.sleep(0.2)
    stop.set()
    await running
    return ids


def dead_letters(timeout_s: float = 10) -> list[dict[str, Any]]:
    """The default queue's DLQ messages, long-polled until one shows up. A sweeper stopped mid-pass
    hands back the DLQ messages its reconciler was reading, so they show at once."""
    dlq_url = app.run(app.queue_urls.flow(["default"]))[dlq_key("default")]
    params = {
        "QueueUrl": dlq_url,
        "MaxNumberOfMessages": 10,
        "MessageAttributeNames": ["All"],
        "WaitTimeSeconds": 2,
    }
    deadline = time.monotonic() + timeout_s
    while True:
        messages: list[dict[str, Any]] = app.run(one(Call("sqs", "receive_message", params))).get(
            "Messages", []
        )
        if messages or time.monotonic() > deadline:
            return messages


def main() -> None:
    os.environ.setdefault("SQSJOBS_LOG_LEVEL", "WARNING")  # the table below tells the story,
    os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")  # so no log lines or EMF metrics
    with DevStack(app, receive_wait_s=1) as stack:
        console.print(f"[bold]sqsjobs demo[/bold] — embedded emulator at {stack.endpoint_url}\n")
        started = time.monotonic()
        ids = [
            app.enqueue(
                "receipts.send",
                {"order_id": "o-1", "email": "ada@example.com"},
                idempotency_key="receipt-o-1",
            ),
            app.enqueue("inventory.sync", {"sku": "SKU-42"}),
            app.enqueue("payments.charge", {"order_id": "o-2", "cents": 1999}),
            app.enqueue("reminders.send", {"email": "ada@example.com"}, delay=3),
        ]
        again = app.enqueue(
            "receipts.send", {"order_id": "o-1", "email": "ada@example.com"}, idempotency_key="receipt-o-1"
        )
        console.print(
            f"enqueued 4 jobs (a repeated enqueue with the same idempotency key returned the same id: {again == ids[0]})"
        )
        ids = asyncio.run(run_until_final(ids, stack))

        table = Table(title="Final state of each job")
        for column in ("type", "status", "attempts", "result / reason", "history"):
            table.add_column(column)
        for job_id in ids:
            job = app.get(job_id)
            outcome = str(job.result) if job.result is not None else (job.reason or "")
            if job.last_error and job.status != "succeeded":
                outcome += f" — {job.last_error.error_class}: {job.last_error.message}"
            history = ", ".join(f"#{h.attempt} {h.outcome}" for h in job.history)
            table.add_row(job.type, str(job.status), f"{job.attempt}/{job.max_attempts}", outcome, history)
        console.print(table)

        for message in dead_letters():
            attrs = message["MessageAttributes"]
            console.print(
                f"DLQ holds job {attrs[DLQ_JOB_ID]['StringValue']}: {attrs[DLQ_REASON]['StringValue']}"
            )
        calls = ", ".join(f"{k} {v}" for k, v in app.requests.snapshot().items())
        console.print(f"\nAWS requests made by this process: {calls}")
        console.print(f"done in {time.monotonic() - started:.1f} s")


if __name__ == "__main__":
    main()
