"""Cancel every waiting job of a type (and tenant) at once: found by a Scan, resumable, audited.

::

    sqsjobs jobs cancel --type T [--status queued] [--tenant X] [--dry-run] [--limit N] [--rate R]
    sqsjobs jobs cancel --resume OP

How the jobs are found: there is no status index, on purpose (every job would pay index writes
on one hot partition per status: docs/scale.md), so a Scan with a
filter (type, status, tenant) walks the table, ``page_size`` items per request, eventually
consistent. It reads (and is billed for) every item, matched or not: 0.5 read unit per 4 KB, so a
table of 1 M records of 1 KB costs 1 GB / 4 KB x 0.5 = 125,000 read units ($0.016 on demand), and
no write beyond the cancels. Each matching job gets the ``cancel`` transition of the state table,
one conditional write (1 write unit), re-checking type, status and tenant against the record
itself (the Scan's view may be stale), with an audit entry naming the operation and who ran it.

A job that started meanwhile is **skipped**, not sent a cancel request: this operation stops work
that has not begun; a running job is one ``jobs cancel ID`` away. Skipped jobs are counted by why
(``running``, ``finished``, ``changed``: another status or tenant now, ``gone``: deleted).

Resumable: the Scan's position after the last job handled and the counts are checkpointed in a
control item ``op#<id>`` after every page (``store/bulk.py``), one write unit per page. A run killed
mid-page resumes from the last checkpoint (``--resume OP``): the jobs it had cancelled since are
found again by their ``cancel_op`` and counted from their records, never cancelled twice, none
missed. A dry run writes nothing at all, not even the control item.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqsjobs._aws import Call, Flow, sleep_call
from sqsjobs.errors import InvalidTransition, JobNotFound, RecordChanged
from sqsjobs.job import JobStatus
from sqsjobs.notify.plugin import told_cancel
from sqsjobs.ops._common import actor
from sqsjobs.store import bulk
from sqsjobs.store.apply import Landed, Refused, apply, apply_all
from sqsjobs.store.codec import job_from_item, str_attr
from sqsjobs.store.conditions import Missing
from sqsjobs.transport.queues import QueueUrls

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from sqsjobs._clock import Clock
    from sqsjobs.config import Settings
    from sqsjobs.registry import Registry

#: What a bulk cancel may select: the statuses the ``cancel`` transition leaves from.
CANCELLABLE = (JobStatus.QUEUED, JobStatus.RETRY_SCHEDULED)
#: Items each Scan request reads (and the most cancels between two checkpoints).
DEFAULT_PAGE_SIZE = 100
#: Ids a dry run lists at most (it counts them all).
LISTED_IDS = 1000


@dataclass(frozen=True)
class BulkCancel:
    """What to cancel, and how fast."""

    job_type: str
    status: JobStatus = JobStatus.QUEUED
    tenant: str | None = None
    dry_run: bool = False
    #: Cancel at most this many jobs in this run (resume to go on).
    limit: int | None = None
    #: Cancels per second at most.
    rate: float | None = None
    page_size: int = DEFAULT_PAGE_SIZE

    def filters(self) -> dict[str, str]:
        """The filters the control item keeps (a resume runs with these)."""
        return {
            "type": self.job_type,
            "status": self.status.value,
            **({"tenant": self.tenant} if self.tenant else {}),
        }


@dataclass
class BulkCancelReport:
    """What one operation did, over all its runs so far."""

    op_id: str
    dry_run: bool
    #: Jobs the Scan matched (each once, however many runs it took).
    matched: int = 0
    #: Cancelled by this operation (``would cancel``, on a dry run).
    cancelled: int = 0
    #: Matched but not cancelled, by why: running, finished, changed, gone.
    skipped: dict[str, int] = field(default_factory=dict)
    #: True when the Scan reached the end of the table (nothing left to resume).
    done: bool = False
    #: Items the Scans of this run read (what DynamoDB billed, 0.5 RRU per 4 KB).
    read: int = 0
    #: A dry run: the ids it would cancel, the first ``LISTED_IDS`` of them (a confirmation names these).
    job_ids: list[str] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        """The checkpointed counts."""
        return {
            "matched": self.matched,
            "cancelled": self.cancelled,
            **{f"skipped_{k}": v for k, v in self.skipped.items()},
        }

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "op_id": self.op_id,
            "dry_run": self.dry_run,
            "matched": self.matched,
            "cancelled": self.cancelled,
            "skipped": dict(self.skipped),
            "done": self.done,
            "read": self.read,
            **({"job_ids": list(self.job_ids)} if self.dry_run else {}),
        }


def _skip_reason(old: Mapping[str, Any] | None) -> str:
    if old is None:
        return "gone"
    status = str_attr(old, "status")
    if status == JobStatus.RUNNING:
        return "running"
    if status is not None and JobStatus(status).terminal:
        return "finished"
    return "changed"


def _load_op(settings: Settings, op_id: str) -> Flow[tuple[BulkCancel, dict[str, Any]]]:
    found = yield Call("dynamodb", "get_item", bulk.get_op(settings.table_name, op_id))
    item = found.get("Item")
    if not item:
        raise JobNotFound(f"no bulk operation {op_id!r} in table {settings.table_name}")
    filters = {k: v["S"] for k, v in item["op_filters"]["M"].items()}
    return BulkCancel(filters["type"], JobStatus(filters["status"]), filters.get("tenant")), item


def bulk_cancel_flow(
    settings: Settings,
    registry: Registry,
    spec: BulkCancel | None,
    clock: Clock,
    *,
    resume: str | None = None,
    by: str | None = None,
    on_start: Any = None,
    on_page: Callable[[BulkCancelReport], None] | None = None,
) -> Flow[BulkCancelReport]:
    """Run (or resume) one bulk cancel; see the module docstring.

    Args:
        settings: where the table is.
        registry: the job types (a cancelled job with a ``notify`` target is told by its delivery job).
        spec: the filters and pace of a new operation; with ``resume``, only its pace is used
            (the filters are the operation's own).
        clock: time for audit entries and pacing.
        resume: the id of an operation to continue.
        by: who runs it, for the audit entries (default ``user@host``).
        on_start: called with the operation id before anything is cancelled (the CLI prints it,
            so a run cut short can be resumed).
        on_page: called with the report so far after each page of the Scan (the CLI's progress bar).
    """
    table = settings.table_name
    pace = spec or BulkCancel("")
    if resume is not None and pace.dry_run:
        raise ValueError("--dry-run starts no operation and resumes none: run it with the filters alone")
    if resume is not None:
        stored, item = yield from _load_op(settings, resume)
        spec = BulkCancel(
            stored.job_type, stored.status, stored.tenant, pace.dry_run, pace.limit, pace.rate, pace.page_size
        )
        op_id, seq = resume, int(item["op_seq"]["N"])
        counts = {k: int(v["N"]) for k, v in item.get("op_counts", {}).get("M", {}).items()}
        position: dict[str, Any] | None = item.get("op_position", {}).get("M")
        report = BulkCancelReport(
            op_id,
            spec.dry_run,
            matched=counts.pop("matched", 0),
            cancelled=counts.pop("cancelled", 0),
            skipped={k.removeprefix("skipped_"): v for k, v in counts.items()},
        )
        if item["op_state"]["S"] == "done":
            report.done = True
            return report
    else:
        if spec is None:
            raise ValueError("a bulk cancel needs its filters (--type) or an operation to resume")
        op_id, seq, position = uuid.uuid4().hex[:12], 0, None
        report = BulkCancelReport(op_id, spec.dry_run)
    if spec.status not in CANCELLABLE:
        raise InvalidTransition(
            f"--status {spec.status.value}: only {' or '.join(s.value for s in CANCELLABLE)} jobs can be "
            "cancelled in bulk (a running one: jobs cancel ID)"
        )
    if spec.limit is not None and spec.limit < 1:
        raise ValueError(f"--limit must be at least 1, got {spec.limit}")
    if spec.rate is not None and spec.rate <= 0:
        raise ValueError(f"--rate must be positive, got {spec.rate}")
    by = by or actor()
    if resume is None and not spec.dry_run:
        started = yield from apply(bulk.put_op(table, op_id, filters=spec.filters(), by=by, now=clock.now()))
        if isinstance(started, Refused):
            raise RecordChanged(f"bulk operation {op_id} exists already: resume it instead")
    if on_start is not None:
        on_start(op_id)

    cancelled_now = 0
    next_at = clock.now()
    stopped = False
    while not stopped:
        page = yield Call(
            "dynamodb",
            "scan",
            bulk.scan_page(
                table,
                job_type=spec.job_type,
                status=spec.status.value,
                tenant=spec.tenant,
                op_id=op_id,
                limit=spec.page_size,
                start=position,
            ),
        )
        report.read += int(page.get("ScannedCount", 0))
        for item in page.get("Items", []):
            if str_attr(item, "cancel_op") == op_id:  # cancelled by this operation before a resume
                report.matched += 1
                report.cancelled += 1
            elif str_attr(item, "status") == spec.status.value:
                report.matched += 1
                if spec.dry_run:
                    report.cancelled += 1
                    if len(report.job_ids) < LISTED_IDS:
                        report.job_ids.append(item["id"]["S"])
                else:
                    if spec.rate:
                        now = clock.now()
                        if next_at > now:
                            yield sleep_call(next_at - now)
                        next_at = max(next_at, now) + 1.0 / spec.rate
                    outcome = yield from _cancel_one(
                        settings, registry, spec, op_id, item["id"]["S"], by, clock.now()
                    )
                    if outcome == "cancelled":
                        report.cancelled += 1
                        cancelled_now += 1
                    else:
                        report.skipped[outcome] = report.skipped.get(outcome, 0) + 1
            position = {"id": item["id"]}
            if spec.limit is not None and cancelled_now >= spec.limit:
                stopped = True
                break
        if not stopped:
            last = page.get("LastEvaluatedKey")
            position = dict(last) if last else position
            report.done = not last
            stopped = report.done
        if not spec.dry_run:
            checkpoint = bulk.checkpoint(
                table,
                op_id,
                seq=seq,
                position=position,
                counts=report.counts(),
                state="done" if report.done else "running",
                now=clock.now(),
            )
            if isinstance(kept := (yield from apply(checkpoint)), Refused):
                raise RecordChanged(
                    f"bulk operation {op_id} was checkpointed by another process: run it from one place"
                ) from kept.error
            seq += 1
        if on_page is not None:
            on_page(report)
    return report


def _cancel_one(
    settings: Settings, registry: Registry, spec: BulkCancel, op_id: str, job_id: str, by: str, now: float
) -> Flow[str]:
    """``cancelled``, or why the job was skipped.

    One conditional write; a job with a ``notify`` target is refused by it and cancelled again in one
    transaction with its delivery (``notify.plugin.told_cancel``).
    """
    audit = {"action": "bulk_cancel", "op": op_id, "at": now, "by": by, "from": spec.status.value}
    write = bulk.cancel_matching(
        settings.table_name,
        job_id,
        job_type=spec.job_type,
        status=spec.status.value,
        tenant=spec.tenant,
        op_id=op_id,
        audit=audit,
        now=now,
        retention_s=settings.retention_for(spec.job_type, JobStatus.CANCELLED),
    )
    # A refusal showing this operation's id is its own write, retried after a lost answer.
    own = lambda old: str_attr(old, "cancel_op") == op_id  # noqa: E731
    cancelled = yield from apply(write.guard("untold", Missing("notify")), own=own)
    if isinstance(cancelled, Landed):
        return "cancelled"
    old = cancelled.item
    if old is None or "notify" not in old or str_attr(old, "status") != spec.status.value:
        return _skip_reason(old)
    told = told_cancel(registry, settings, job_from_item(old), now)
    landed = yield from apply_all([{"Update": write.transact_item()}, *told.entries()])
    if isinstance(landed, Refused):
        return _skip_reason(landed.item_at(0))
    yield from told.send_flow(QueueUrls(settings))
    return "cancelled"


def cancel_ids_flow(
    settings: Settings,
    registry: Registry,
    spec: BulkCancel,
    job_ids: list[str],
    clock: Clock,
    *,
    by: str | None = None,
) -> Flow[tuple[list[str], dict[str, str]]]:
    """Cancel exactly ``job_ids`` (what a dry run of ``spec`` listed), each only while it still matches.

    The confirmation of a two-step bulk cancel (``POST /jobs/bulk-cancel``): no Scan, one
    conditional write per id (``_cancel_one``, the same transition and audit entry as a bulk run,
    under a new operation id), so a job that started, finished or changed since the dry run is
    skipped, and a job that began to match after it is not swept in. Returns the ids cancelled and
    the others with why (``running``, ``finished``, ``changed``, ``gone``).
    """
    if spec.status not in CANCELLABLE:
        raise InvalidTransition(
            f"status {spec.status.value}: only {' or '.join(s.value for s in CANCELLABLE)} jobs can be cancelled in bulk"
        )
    op_id, by = uuid.uuid4().hex[:12], by or actor()
    cancelled: list[str] = []
    skipped: dict[str, str] = {}
    for job_id in dict.fromkeys(job_ids):
        outcome = yield from _cancel_one(settings, registry, spec, op_id, job_id, by, clock.now())
        if outcome == "cancelled":
            cancelled.append(job_id)
        else:
            skipped[job_id] = outcome
    return cancelled, skipped
