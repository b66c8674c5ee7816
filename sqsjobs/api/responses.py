"""The 2xx bodies of the routes whose answer is an operator flow's JSON form: one model each, for OpenAPI.

Why models here and not in each route module: the answers are the CLI's ``--json`` forms
(``sqsjobs.ops``' ``to_dict``), shared by several routes and pages; a client generated from the
OpenAPI document needs their top-level members named and typed. Each model names the members a
client relies on and allows the rest (``extra="allow"``: nested records such as a job's history or
a limit's state pass through as the flow wrote them), so the document describes every answer
without the model becoming a second copy of the flow that could drift from it.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

Obj = dict[str, Any]


class _Open(BaseModel):
    """Named members typed; any other member passes through unchanged."""

    model_config = ConfigDict(extra="allow")


class JobRecord(_Open):
    """``GET /jobs/{job_id}``: the record, as ``sqsjobs jobs get --json``."""

    id: str
    type: str
    queue: str
    status: str
    attempt: int
    max_attempts: int | None = None
    run_at: str | None = None
    created_at: str | None = None
    updated_at: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    lease_owner: str | None = None
    lease_expires: str | None = None
    reason: str | None = None
    payload: Any = None
    result: Any = None
    last_error: Obj | None = None
    history: list[Obj] = Field(default_factory=list)
    audit: list[Obj] = Field(default_factory=list)


class JobPage(_Open):
    """``GET /jobs``: one page, newest first."""

    jobs: list[Obj]
    next_cursor: str | None = Field(description="Pass as cursor, with the same filters, for the next page")
    index: str | None = Field(description="What served the page: the attention index, or a Scan")
    read: int = Field(description="Items read for this page (what DynamoDB billed)")
    since: str | None = None


class QueueSnapshot(_Open):
    """``GET /queues``: depths per queue, and counts per type when asked."""

    at: str
    window_s: float | None
    truncated: bool
    queues: list[Obj]
    types: list[Obj] | None


class DlqMessages(_Open):
    """``GET /dlq``: the dead-lettered messages read, each with its record's status."""

    messages: list[Obj]


class ReplaySummaryBody(_Open):
    """``POST /dlq/replay``: what a replay did (or would do)."""

    dry_run: bool
    interrupted: bool
    counts: dict[str, int]
    unmatched: int
    items: list[Obj]


class WorkerList(_Open):
    """``GET /workers``."""

    at: str
    counts: dict[str, int]
    workers: list[Obj]


class DrainAccepted(_Open):
    """``POST /workers/{worker_id}/drain``."""

    worker: str
    drain: str
    within_s: float = Field(description="The worker reads the request within this many seconds")


class FlowStateBody(_Open):
    """``GET /limits``: paused types and every limit."""

    paused: dict[str, Obj]
    limits: list[Obj]


class BreakerClosed(_Open):
    """``POST /limits/{name}/breaker/close``."""

    limit: str
    breaker: str
    was: Any = Field(description="The breaker's state before")


class DeadGroups(_Open):
    """``GET /dead/groups``."""

    jobs: int = Field(description="Dead jobs read")
    truncated: bool
    groups: list[Obj]


class GroupRetry(_Open):
    """``POST /dead/groups/retry``: the dry run's ids, or what the confirmation retried."""

    signature: str
    dry_run: bool
    job_ids: list[str] | None = None
    truncated: bool | None = None
    retried: list[str] | None = None
    skipped: dict[str, str] | None = None


class Series(_Open):
    """``GET /series``: the charts' numbers."""

    start: float
    bucket_s: float
    buckets: int
    counts: Obj
    waiting: list[Any]
    oldest_waiting_s: list[Any]
    latency: Obj
    read: int
    truncated: bool


class BulkCancelBody(_Open):
    """``POST /jobs/bulk-cancel``: the dry run's count and ids, or what the confirmation cancelled."""

    dry_run: bool
    job_ids: list[str] | None = None
    matched: int | None = None
    cancelled: Any = Field(None, description="A count (dry run: would cancel), or the ids cancelled")
    skipped: Any = None


class BatchBody(_Open):
    """A batch (with ``tree``: its children, each the same shape) as ``sqsjobs batches get --json``."""

    id: str
    status: str
    counts: Obj
    children: list[str] = Field(default_factory=list)
    tree: list[Obj] | None = None


class BatchItemsAdded(_Open):
    """``POST /batches/{batch_id}/items``."""

    batch_id: str
    job_ids: list[str]


class ChainBody(_Open):
    """A chain as ``sqsjobs chains get --json``."""

    id: str
    status: str
    current: int | None = None
    steps: list[Obj]


class CancelOutcome(_Open):
    """``POST /chains/{chain_id}/cancel``."""

    id: str
    result: str
