"""Browsing the dead-letter queues: which messages match an operator's filter, read without loss.

Every DLQ of the logical queues asked for is read: the standard DLQ (where the priority levels'
queues redrive too) and a serialized queue's FIFO backstop DLQ. Reading hides each message only
for the scan and makes it visible again at the end (``sqsjobs.transport.dead_letters``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqsjobs.transport import dead_letters, sqs

if TYPE_CHECKING:
    from sqsjobs._aws import Flow
    from sqsjobs.transport.dead_letters import DlqMessage
    from sqsjobs.transport.queues import QueueUrls


@dataclass(frozen=True)
class DlqFilter:
    """Which messages an operation applies to; empty matches all."""

    types: frozenset[str] = frozenset()
    error_classes: frozenset[str] = frozenset()
    job_ids: frozenset[str] = frozenset()
    #: Only messages dead-lettered at or after this instant (epoch seconds).
    since: float | None = None

    def matches(self, m: DlqMessage) -> bool:
        """True when ``m`` passes every filter given."""
        return (
            (not self.types or m.job_type in self.types)
            and (not self.error_classes or m.error_class in self.error_classes)
            and (not self.job_ids or m.job_id in self.job_ids or m.message_id in self.job_ids)
            and (self.since is None or m.sent_at >= self.since)
        )


def browse_flow(
    queue_urls: QueueUrls,
    queues: list[str],
    flt: DlqFilter,
    *,
    limit: int | None = None,
    stop_at_first: bool = False,
) -> Flow[list[DlqMessage]]:
    """Every matching message of the queues' DLQs (up to ``limit``), then release them all."""
    depths = yield from dead_letters.depth_flow(queue_urls, queues)
    scan = dead_letters.Scan()
    found: list[DlqMessage] = []

    def want() -> int:
        return sqs.MAX_BATCH if limit is None else limit - len(found)

    try:
        for depth in depths:
            hide = dead_letters.hide_for(depth.visible)
            while want() > 0 and not (stop_at_first and found):
                batch = yield from dead_letters.scan_flow(depth, scan, hide_s=hide)
                if not batch:
                    break
                found.extend(m for m in batch if flt.matches(m))
    except GeneratorExit:
        raise  # abandoned by its driver: the messages come back when their hide time ends
    except BaseException:
        yield from dead_letters.release_flow(scan)
        raise
    yield from dead_letters.release_flow(scan)
    return found if limit is None else found[:limit]
