"""The sweeper: finds records that no message will bring to a worker, and sends one.

Three cases, each read from the ``by_status`` index, never a scan:

- ``held`` records coming due within the SQS delay cap (far-future jobs, retries beyond 12 h);
- runnable records (queued, retry_scheduled) past due by ``stale_after_s`` — e.g. the producer
  crashed between the record write and the SQS send, or the message was dead-lettered by the
  redrive backstop;
- running records whose lease expired ``stale_after_s`` ago (their worker died and the message is
  gone); the hint lets a worker rescue the job by claim.

Before each send the sweeper moves the entry's ``due`` forward with a conditional write, so
concurrent sweepers do not both send, and a record is re-sent at most once per ``stale_after_s``.
A hint that turns out to be a duplicate is harmless: the claim decides.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sqsjobs._aws import Call, Flow
from sqsjobs.envelope import Envelope
from sqsjobs.errors import StoreError
from sqsjobs.job import JobStatus
from sqsjobs.store import requests as rq
from sqsjobs.transport import sqs

if TYPE_CHECKING:
    from sqsjobs.app import App
    from sqsjobs.config import Settings
    from sqsjobs.transport.queues import QueueUrls


@dataclass
class SweepReport:
    """What one sweep did."""

    dispatched_held: list[str] = field(default_factory=list)
    redispatched: list[str] = field(default_factory=list)
    rescued: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        """Hints sent."""
        return len(self.dispatched_held) + len(self.redispatched) + len(self.rescued)


def sweep_flow(
    settings: Settings, queue_urls: QueueUrls, now: float, *, page_size: int = 100
) -> Flow[SweepReport]:
    """One pass over the three cases."""
    report = SweepReport()
    passes = [
        (rq.HELD, now + sqs.MAX_DELAY_S, report.dispatched_held),
        (JobStatus.QUEUED.value, now - settings.stale_after_s, report.redispatched),
        (JobStatus.RETRY_SCHEDULED.value, now - settings.stale_after_s, report.redispatched),
        (JobStatus.RUNNING.value, now - settings.stale_after_s, report.rescued),
    ]
    for st, due_before, sent in passes:
        start_key = None
        while True:
            page = yield Call(
                "dynamodb",
                "query",
                rq.query_due(
                    settings.table_name, st, due_before=due_before, limit=page_size, start_key=start_key
                ),
            )
            records = rq.due_records(page)
            urls = yield from queue_urls.flow({r.queue for r in records})
            for record in records:
                mark = rq.mark_dispatched(
                    settings.table_name,
                    record,
                    now=now,
                    next_check=max(now, record.run_at if st == rq.HELD else now),
                )
                try:
                    yield Call("dynamodb", "update_item", mark)
                except StoreError as exc:
                    # Refused: it changed since the query and someone else acts on it — unless the
                    # change is this very write, retried by botocore after its answer was lost.
                    if not rq.dispatch_landed(mark, exc):
                        if rq.is_conflict(exc):
                            continue
                        raise
                delay = sqs.clamp_delay(record.run_at - now) if st == rq.HELD else 0
                yield Call(
                    "sqs",
                    "send_message",
                    sqs.send_one(
                        urls[record.queue], Envelope(record.id, record.type).to_body(), delay_s=delay
                    ),
                )
                sent.append(record.id)
            start_key = page.get("LastEvaluatedKey")
            if not start_key:
                break
    return report


async def sweep_once(app: App) -> SweepReport:
    """One sweep with the async clients; logs what it sent."""
    report: SweepReport = await app.arun(sweep_flow(app.settings, app.queue_urls, app.clock.now()))
    if report.total:
        app.logger.info(
            "sweep dispatched hints",
            extra={
                "held": report.dispatched_held,
                "redispatched": report.redispatched,
                "rescued": report.rescued,
            },
        )
    return report


async def run_sweeper(app: App, stop: asyncio.Event) -> None:
    """Sweep every ``sweep_interval_s`` until ``stop``."""
    while not stop.is_set():
        try:
            await sweep_once(app)
        except Exception:
            app.logger.exception("sweep failed; retrying next interval")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), app.settings.sweep_interval_s)
