"""Dead jobs grouped by error signature, and the check a group retry makes before each job.

::

    groups_flow:  attention index, dead#00..31 ─▶ newest dead jobs, a page of 100 at a time
                  ─▶ one BatchGetItem of their ``error`` per page ─▶ group by ``signatures.signature``

The dead jobs come from the ``attention`` index's dead shards, newest first (``inspect.list_flow``,
what ``sqsjobs jobs list --status dead`` reads), at most ``max_jobs`` of them; their last errors from
one eventually consistent BatchGetItem per 100 (half a read unit each at up to 4 KB). A refresh of
``DEFAULT_MAX_JOBS`` = 500 dead jobs thus costs 5 pages of the 32 shards' Queries (16-20 read units
each) and 250 read units of errors: about 350 read units ($0.00004 on demand), whatever the table's
size. When more jobs are dead than that, ``truncated`` says the counts are of the newest ones.

A group retry is two steps, as the DLQ replay is: the dry run lists the group's job ids, and the
confirmation retries only those ids, each after ``refusal`` re-read it (strongly consistent, 1 read
unit): a job that is no longer dead, or now failed with another signature, is skipped and said so,
and a job that died in the group after the dry run is not swept in. The retry itself is
``App.retry`` (``ops.requeue``: conditional write dead → queued, attempts reset, audit entry).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqsjobs.job import JobStatus
from sqsjobs.ops import inspect as inspect_ops
from sqsjobs.ops._common import iso
from sqsjobs.ops.signatures import signature

if TYPE_CHECKING:
    from sqsjobs._aws import Flow
    from sqsjobs.config import Settings
    from sqsjobs.job import Job

#: Dead jobs one grouping reads at most, newest first (the cost bound above).
DEFAULT_MAX_JOBS = 500
#: Jobs one group retry takes at most (a request should finish well inside API Gateway's 30 s).
RETRY_LIMIT = 200


@dataclass
class DeadGroup:
    """Dead jobs that failed with one signature."""

    signature: str
    error_class: str
    #: One message of the group, as recorded (the newest).
    example: str
    count: int = 0
    first_seen: float | None = None
    last_seen: float | None = None
    types: list[str] = field(default_factory=list)
    #: Newest first.
    job_ids: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON form (ISO timestamps)."""
        return {
            "signature": self.signature,
            "error_class": self.error_class,
            "example": self.example,
            "count": self.count,
            "first_seen": iso(self.first_seen),
            "last_seen": iso(self.last_seen),
            "types": sorted(self.types),
            "job_ids": list(self.job_ids),
        }


@dataclass
class DeadGroups:
    """Every group of the dead jobs read, the largest first."""

    groups: list[DeadGroup]
    #: Dead jobs read (and grouped).
    jobs: int
    #: True when more dead jobs exist than were read (``max_jobs``).
    truncated: bool

    def find(self, sig: str) -> DeadGroup | None:
        """The group of signature ``sig``, if any."""
        return next((g for g in self.groups if g.signature == sig), None)


def groups_flow(settings: Settings, now: float, *, max_jobs: int = DEFAULT_MAX_JOBS) -> Flow[DeadGroups]:
    """Group the newest ``max_jobs`` dead jobs by error signature (see the module docstring for the cost)."""
    if max_jobs < 1:
        raise ValueError(f"max_jobs must be at least 1, got {max_jobs}")
    rows: list[inspect_ops.JobRow] = []
    cursor: str | None = None
    while len(rows) < max_jobs:
        query = inspect_ops.ListQuery(
            status=JobStatus.DEAD, limit=min(inspect_ops.MAX_LIMIT, max_jobs - len(rows)), cursor=cursor
        )
        page = yield from inspect_ops.list_flow(settings, query, now)
        rows += page.rows
        cursor = page.next_cursor
        if cursor is None:
            break
    items = yield from inspect_ops.batch_get_flow(settings.table_name, [r.id for r in rows], ("id", "error"))
    groups: dict[str, DeadGroup] = {}
    for row in rows:  # newest first
        err = (items.get(row.id) or {}).get("error", {}).get("M", {})
        cls, message = (
            err.get("class", {}).get("S", "(no error recorded)"),
            err.get("message", {}).get("S", ""),
        )
        group = groups.setdefault(signature(cls, message), DeadGroup(signature(cls, message), cls, message))
        group.count += 1
        group.job_ids.append(row.id)
        if row.type not in group.types:
            group.types.append(row.type)
        if row.at is not None:
            group.last_seen = max(group.last_seen or row.at, row.at)
            group.first_seen = min(group.first_seen or row.at, row.at)
    ordered = sorted(groups.values(), key=lambda g: (-g.count, -(g.last_seen or 0.0)))
    return DeadGroups(ordered, len(rows), cursor is not None)


def refusal(job: Job, sig: str) -> str | None:
    """Why ``job`` may not be retried as a member of group ``sig`` now (None: it may)."""
    if job.status is not JobStatus.DEAD:
        return f"no longer dead: {job.status.value}"
    error = job.last_error
    now_sig = signature(error.error_class, error.message) if error else "(no error recorded)"
    if now_sig != sig:
        return f"now in another group: {now_sig}"
    return None
