"""DLQ replay, keyed by job id: requeue the record first, then send a hint, then delete the DLQ copy.

Per message (MiniStack and moto lack ``StartMessageMoveTask``, and the message is only a hint
anyway, so the record decides)::

    receive (hidden for the scan) ─▶ filter ─▶ read record ─▶ re-validate with the current handler
        ─▶ conditional write dead|cancelled → queued (attempts reset, audit entry)
        ─▶ SendMessage hint to the job's queue ─▶ DeleteMessage from the DLQ

Why an interrupted replay loses nothing and replays nothing twice:

- the DLQ copy is deleted only after the record is ``queued``; a crash before that leaves the
  copy, and the next run finds the record no longer dead, re-sends the hint (harmless: the claim
  decides) and deletes the copy;
- the write is conditional on the status (and on ``updated_at`` as read), so only one run, or one
  of several copies of a message for the same job, can requeue a given death of a job;
- within one run, a job is requeued at most once, even if it dies again while the run goes on;
- messages that are skipped, unmatched or not reached are made visible again at the end (or come
  back by themselves when their hide time ends, if the process is killed).

A message the current code would refuse (unknown type, payload that no longer validates even
after its upcasts, newer payload version), or with no record or no envelope, is skipped with the
reason and left in place. A corrected ``payload`` replaces the payload of every job replayed (see
``requeue_flow``); a job whose handler refuses it is skipped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from sqsjobs._aws import Flow, sleep_call
from sqsjobs.errors import AwsError, JobStateError
from sqsjobs.job import JobStatus
from sqsjobs.ops.requeue import KEEP, hint_flow, requeue_flow
from sqsjobs.transport import dead_letters

if TYPE_CHECKING:
    from collections.abc import Callable

    from sqsjobs._clock import Clock
    from sqsjobs.config import Settings
    from sqsjobs.ops.dlq import DlqFilter
    from sqsjobs.registry import Registry
    from sqsjobs.transport.queues import QueueUrls

ItemOutcome = Literal["replayed", "would_replay", "stale", "skipped", "failed"]
_RUNNABLE = frozenset({JobStatus.QUEUED, JobStatus.RETRY_SCHEDULED})


@dataclass(frozen=True)
class ReplayItem:
    """What the replay did with one DLQ message."""

    message_id: str
    queue: str
    job_id: str | None
    job_type: str | None
    #: ``replayed`` (requeued, copy deleted), ``would_replay`` (dry run), ``stale`` (the job was no
    #: longer dead: copy deleted), ``skipped`` (left in the DLQ, see ``reason``), ``failed`` (AWS error).
    outcome: ItemOutcome
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "message_id": self.message_id,
            "queue": self.queue,
            "job_id": self.job_id,
            "job_type": self.job_type,
            "outcome": self.outcome,
            "reason": self.reason or None,
        }


@dataclass
class ReplaySummary:
    """Everything one replay run did."""

    dry_run: bool
    items: list[ReplayItem] = field(default_factory=list)
    #: Messages read that the filters did not select (left untouched).
    unmatched: int = 0
    #: Stopped early by the caller (``should_stop``); what was not reached is still in the DLQ.
    interrupted: bool = False

    def count(self, outcome: ItemOutcome) -> int:
        """Messages with ``outcome``."""
        return sum(1 for i in self.items if i.outcome == outcome)

    @property
    def requeued(self) -> int:
        """Jobs requeued (or that would be, in a dry run): what ``--limit`` counts."""
        return self.count("would_replay" if self.dry_run else "replayed")

    def to_dict(self) -> dict[str, Any]:
        """JSON form: the counts and every message's outcome."""
        return {
            "dry_run": self.dry_run,
            "interrupted": self.interrupted,
            "counts": {o: self.count(o) for o in ("replayed", "would_replay", "stale", "skipped", "failed")},
            "unmatched": self.unmatched,
            "items": [i.to_dict() for i in self.items],
        }


@dataclass
class _Run:
    settings: Settings
    registry: Registry
    queue_urls: QueueUrls
    flt: DlqFilter
    dry_run: bool
    clock: Clock
    rate: float | None
    summary: ReplaySummary
    payload: Any = KEEP
    by: str | None = None
    scan: dead_letters.Scan = field(default_factory=dead_letters.Scan)
    requeued_ids: set[str] = field(default_factory=set)
    next_at: float = 0.0

    def pace(self) -> Flow[None]:
        """At most ``rate`` requeues per second."""
        if not self.rate or self.dry_run:
            return
        now = self.clock.now()
        if self.next_at > now:
            yield sleep_call(self.next_at - now)
        self.next_at = max(self.next_at, now) + 1.0 / self.rate

    def one(self, m: dead_letters.DlqMessage) -> Flow[ReplayItem | None]:
        def item(outcome: ItemOutcome, reason: str = "") -> ReplayItem:
            return ReplayItem(m.message_id, m.queue, m.job_id, m.job_type, outcome, reason)

        if not self.flt.matches(m):
            self.summary.unmatched += 1
            return None
        if m.malformed or not m.job_id:
            return item("skipped", f"malformed message: {m.malformed or 'no job id'}")
        again = m.job_id in self.requeued_ids
        if again and self.dry_run:
            return item("stale", "another copy for this job is replayed above; this one would be deleted")
        yield from self.pace()
        try:
            result = yield from requeue_flow(
                m.job_id,
                settings=self.settings,
                registry=self.registry,
                queue_urls=self.queue_urls,
                action="replay",
                now=self.clock.now(),
                write=not (self.dry_run or again),
                note={"message_id": m.message_id, "dlq": m.queue},
                payload=self.payload,
                by=self.by,
            )
            if result.outcome == "missing":
                return item("skipped", result.reason)
            if result.outcome == "invalid":
                return item("skipped", result.reason)
            if result.outcome == "would_requeue":
                if again:
                    return item("skipped", "died again after this run replayed it; replay again later")
                self.requeued_ids.add(m.job_id)
                return item("would_replay", str(result.payload_change) if result.payload_change else "")
            if result.outcome == "not_replayable":
                if self.dry_run:
                    return item("stale", f"{result.reason}; the DLQ copy would be deleted")
                if result.job is not None and result.job.status in _RUNNABLE:
                    # Perhaps an earlier run requeued it and stopped before its hint: send one now.
                    yield from hint_flow(self.queue_urls, result.job)
                yield from dead_letters.delete_flow(m, self.scan)
                return item("stale", f"{result.reason}; DLQ copy deleted")
            self.requeued_ids.add(m.job_id)
            notes = [str(result.payload_change) if result.payload_change else ""]
            notes.append("" if result.hint_sent else "hint not sent; the sweeper will dispatch it")
            note = "; ".join(filter(None, notes))
            if not (yield from dead_letters.delete_flow(m, self.scan)):
                note = "; ".join(
                    filter(None, [note, "DLQ copy was redelivered elsewhere; a re-run deletes it"])
                )
            return item("replayed", note)
        except (AwsError, JobStateError) as exc:
            # A refusal too (the record vanished under the replay write: JobNotFound): this item failed,
            # the others go on.
            return item("failed", str(exc))


def replay_flow(
    *,
    settings: Settings,
    registry: Registry,
    queue_urls: QueueUrls,
    queues: list[str],
    flt: DlqFilter,
    clock: Clock,
    dry_run: bool = False,
    limit: int | None = None,
    rate: float | None = None,
    on_item: Callable[[ReplayItem], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    payload: Any = KEEP,
    by: str | None = None,
) -> Flow[ReplaySummary]:
    """Replay the matching messages of the queues' DLQs; see the module docstring.

    Args:
        settings: where the table is.
        registry: the current handlers, which re-validate every payload.
        queue_urls: the DLQs read and the queues hints go to.
        queues: logical queues whose DLQs are read.
        flt: which messages to replay.
        clock: time for audit entries and pacing.
        dry_run: report what would happen, change nothing (messages are only read).
        limit: requeue at most this many jobs.
        rate: requeue at most this many jobs per second.
        on_item: called after each message (progress); an exception from it stops the run
            after the held messages are released.
        should_stop: polled before each message; True ends the run cleanly (e.g. on Ctrl-C).
        payload: a corrected payload for every job replayed (validated by each job's handler);
            ``KEEP`` (default): each job's own.
        by: who replays, for each job's audit entry (default ``user@host``; the API: the token's name).
    """
    if limit is not None and limit < 1:
        raise ValueError(f"--limit must be at least 1, got {limit}")
    if rate is not None and rate <= 0:
        raise ValueError(f"--rate must be positive, got {rate}")
    run = _Run(settings, registry, queue_urls, flt, dry_run, clock, rate, ReplaySummary(dry_run), payload, by)
    depths = yield from dead_letters.depth_flow(queue_urls, queues)

    def left() -> int:
        return (limit - run.summary.requeued) if limit is not None else 10

    def stopping() -> bool:
        if should_stop is not None and should_stop():
            run.summary.interrupted = True
        return run.summary.interrupted or left() <= 0

    try:
        for depth in depths:
            per_message = max(dead_letters.HIDE_PER_MESSAGE_S, 1.0 / rate if rate else 0.0)
            hide = dead_letters.hide_for(depth.visible, per_message)
            while not stopping():
                batch = yield from dead_letters.scan_flow(depth, run.scan, hide_s=hide, want=left)
                if not batch:
                    break
                for m in batch:
                    if stopping():
                        break
                    result = yield from run.one(m)
                    if result is not None:
                        run.summary.items.append(result)
                        if on_item is not None:
                            on_item(result)
    except GeneratorExit:
        raise  # abandoned by its driver: held messages come back when their hide time ends
    except BaseException:
        yield from dead_letters.release_flow(run.scan)
        raise
    yield from dead_letters.release_flow(run.scan)
    return run.summary
