"""The 2xx bodies of the routes whose answer is an operator flow's JSON form: one model each, for OpenAPI.

Why models here and not in each route module: the answers are the CLI's ``--json`` forms
(``sqsjobs.ops``' ``to_dict``), shared by several routes and pages; a client generated from the
OpenAPI document needs their members named and typed, the records nested in them too (a page's
rows, a job's history, a queue's depths), or it hands its caller untyped dicts. Each model names the
members a client relies on, typed as the flow writes them (optional where it may leave one out or
write null), and allows the rest (``extra="allow"``), so the document describes every answer without
the model becoming a second copy of the flow that could drift from it.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class _Open(BaseModel):
    """Named members typed; any other member passes through unchanged."""

    model_config = ConfigDict(extra="allow")


# ── jobs ─────────────────────────────────────────────────────────────────────────────────────
class JobError(_Open):
    """Why a job's last attempt failed: its exception's class, message and traceback (``FailureRecord``)."""

    class_: str = Field(alias="class", description="Exception class name, e.g. ValueError")
    message: str
    traceback: str


class JobAttempt(_Open):
    """One finished attempt of a job's (capped) history."""

    attempt: int
    outcome: str = Field(description="succeeded, retry, dead, released, ... as the worker recorded it")
    started_at: str | None
    finished_at: str
    worker: str
    error: str | None = Field(description="Error class and message, when it failed")


class AuditEntry(_Open):
    """One operator action on a job (retry, replay, priority, bulk_cancel); further members by action."""

    action: str | None = None
    at: str | None = None
    by: str | None = None
    from_: str | None = Field(None, alias="from", description="The status (or level) it left")
    reason: str | None = None


class JobChain(_Open):
    """The chain a job is a step of: its id, the step's 0-based index and the chain's length."""

    id: str
    step: int | None
    steps: int | None


class JobStep(_Open):
    """One recorded step of a job (``sqsjobs.steps``), in the order they ran."""

    name: str
    attempt: int
    started_at: str
    duration_s: float
    result: Any = None
    result_ref: str | None = Field(description="Its S3 object, for a result too large to keep inline")


class JobProgress(_Open):
    """What the running job last reported (``ctx.progress``), as its last lease renewal wrote it."""

    fraction: float | None = Field(None, ge=0, le=1, description="Done over total, 0 to 1")
    message: str | None = None
    data: Any = None
    report: int = Field(0, description="The report's number in its run (1, 2, ...); a gap: one overtaken")
    at: str | None = Field(None, description="When its renewal wrote it")


class JobRunningLong(_Open):
    """The run was flagged: it ran past its type's factor x p95 running time (docs/observability.md)."""

    at: str | None = Field(None, description="When the worker flagged it")
    elapsed_s: float = Field(description="How long the run had been running then")
    p95_s: float = Field(description="Its type's p95 running time, from the sweeper's baseline")
    factor: float = Field(description="The factor of p95 past which a run of its type is flagged")
    times_p95: float = Field(description="elapsed_s / p95_s")


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
    progress: JobProgress | None = None
    running_long: JobRunningLong | None = None
    tags: dict[str, str] = Field(default_factory=dict, description="What the job is about (enqueue's tags)")
    payload: Any = None
    result: Any = None
    chain: JobChain | None = None
    steps: list[JobStep] = Field(default_factory=list)
    last_error: JobError | None = None
    history: list[JobAttempt] = Field(default_factory=list)
    audit: list[AuditEntry] = Field(default_factory=list)


class JobRow(_Open):
    """One job of a listing page."""

    id: str
    status: str
    type: str
    queue: str
    tenant: str | None
    attempt: int | None
    max_attempts: int | None
    created_at: str | None
    at: str | None = Field(
        description="What the listing orders by: finished_at for dead jobs, else updated_at"
    )
    reason: str | None


class JobPage(_Open):
    """``GET /jobs``: one page, newest first."""

    jobs: list[JobRow]
    next_cursor: str | None = Field(description="Pass as cursor, with the same filters, for the next page")
    index: str | None = Field(
        description="What served the page: the attention index, the tags index, or a Scan"
    )
    read: int = Field(description="Items read for this page (what DynamoDB billed)")
    since: str | None = None


# ── queues, DLQs, workers ────────────────────────────────────────────────────────────────────
class QueueDepth(_Open):
    """One logical queue's depths (all its levels) and its DLQ's, as SQS counts them."""

    queue: str
    visible: int | None
    in_flight: int | None
    delayed: int | None
    dlq: int | None
    levels: dict[str, int] = Field(description="Visible messages per level, for a queue with levels")
    error: str | None = Field(description="Why the queue or its DLQ could not be read")
    oldest_due_s: float | None = Field(
        description="Age of the oldest job due and not yet running of its types (None: none, or counts=false)"
    )


class TypeCounts(_Open):
    """One job type's counts by status, from the capped Scan."""

    type: str
    counts: dict[str, int]
    held: int
    expired_leases: int
    oldest_due_s: float | None


class QueueSnapshot(_Open):
    """``GET /queues``: depths per queue, and counts per type when asked."""

    at: str
    window_s: float | None
    truncated: bool
    queues: list[QueueDepth]
    types: list[TypeCounts] | None


class DlqMessage(_Open):
    """One dead-lettered message: what sqsjobs attached to it, and its job record's status now."""

    queue: str
    dlq: str = Field(description="standard, or fifo backstop")
    message_id: str
    job_id: str | None
    job_type: str | None
    reason: str
    error_class: str | None
    error_message: str | None
    source_queue: str | None
    sent_at: str
    receive_count: int
    malformed: str | None = Field(description="Why the body is not a job envelope")
    body: str
    record_status: str | None = Field(None, description="The job's status now (None: no record)")


class DlqMessages(_Open):
    """``GET /dlq``: the dead-lettered messages read, each with its record's status."""

    messages: list[DlqMessage]


class ReplayItem(_Open):
    """What a replay did (or would do) with one DLQ message."""

    message_id: str
    queue: str
    job_id: str | None
    job_type: str | None
    outcome: str = Field(description="replayed, would_replay, stale, skipped or failed")
    reason: str | None


class ReplaySummaryBody(_Open):
    """``POST /dlq/replay``: what a replay did (or would do)."""

    dry_run: bool
    interrupted: bool
    counts: dict[str, int]
    unmatched: int
    items: list[ReplayItem]


class WorkerInfo(_Open):
    """One registered worker process, as of its last refresh."""

    id: str
    status: str = Field(description="live, draining or silent")
    host: str
    pid: int
    version: str
    queues: list[str]
    job_types: list[str]
    concurrency: int
    started_at: str
    last_seen: str
    running: list[str] = Field(description="Ids of the jobs it ran at its last refresh (capped)")
    running_count: int
    interval_s: float
    expires_at: str
    refreshes: int


class WorkerList(_Open):
    """``GET /workers``."""

    at: str
    counts: dict[str, int]
    workers: list[WorkerInfo]


class DrainAccepted(_Open):
    """``POST /workers/{worker_id}/drain``."""

    worker: str
    drain: str
    within_s: float = Field(description="The worker reads the request within this many seconds")


# ── flow control ─────────────────────────────────────────────────────────────────────────────
class PausedType(_Open):
    """A paused job type: why, and since when (epoch seconds)."""

    reason: str | None
    paused_at: float | None


class LimitState(_Open):
    """One limit as ``sqsjobs limits`` shows it: slots held, recent starts, breaker."""

    name: str
    job_types: list[str]
    concurrency: int | None
    key: str | None
    running: int | None = Field(description="Slots held now (an unpartitioned limit)")
    running_by_key: dict[str, int] = Field(description="Slots held per key value asked for")
    rate: str | None
    recent_starts: int | None
    breaker: str | None
    breaker_until: float | None = Field(description="Epoch seconds an open breaker stays open")
    breaker_failures: int | None
    waiting: int | None


class FlowStateBody(_Open):
    """``GET /limits``: paused types and every limit."""

    paused: dict[str, PausedType]
    limits: list[LimitState]


class BreakerClosed(_Open):
    """``POST /limits/{name}/breaker/close``."""

    limit: str
    breaker: str
    was: Any = Field(description="The breaker's state before")


# ── dead jobs, charts ────────────────────────────────────────────────────────────────────────
class DeadGroup(_Open):
    """Dead jobs that failed with one error signature."""

    signature: str
    error_class: str
    example: str = Field(description="One message of the group, as recorded (the newest)")
    count: int
    first_seen: str | None
    last_seen: str | None
    types: list[str]
    job_ids: list[str] = Field(description="Newest first")


class DeadGroups(_Open):
    """``GET /dead/groups``."""

    jobs: int = Field(description="Dead jobs read")
    truncated: bool
    groups: list[DeadGroup]


class GroupRetry(_Open):
    """``POST /dead/groups/retry``: the dry run's ids, or what the confirmation retried."""

    signature: str
    dry_run: bool
    job_ids: list[str] | None = None
    truncated: bool | None = None
    retried: list[str] | None = None
    skipped: dict[str, str] | None = None


class SeriesCounts(_Open):
    """Per bucket: attempts started, succeeded, failed (and retried), and jobs dead."""

    started: list[int]
    succeeded: list[int]
    failed: list[int]
    dead: list[int]


class Latency(_Open):
    """Nearest-rank p50 and p95 in seconds (None without samples), over the samples counted."""

    p50: float | None
    p95: float | None
    n: int


class TypeLatency(_Open):
    """One job type's latencies over the window: wait (creation to first start) and run."""

    wait: Latency
    run: Latency


class Series(_Open):
    """``GET /series``: the charts' numbers."""

    start: float
    bucket_s: float
    buckets: int
    counts: SeriesCounts
    waiting: list[int]
    oldest_waiting_s: list[float]
    latency: dict[str, TypeLatency]
    read: int
    truncated: bool


class BulkCancelBody(_Open):
    """``POST /jobs/bulk-cancel``: the dry run's count and ids, or what the confirmation cancelled."""

    dry_run: bool
    job_ids: list[str] | None = None
    matched: int | None = None
    cancelled: Any = Field(None, description="A count (dry run: would cancel), or the ids cancelled")
    skipped: Any = None


# ── workflows ────────────────────────────────────────────────────────────────────────────────
class BatchCounts(_Open):
    """A batch's items by state (summed over its shards; frozen at completion)."""

    pending: int
    succeeded: int
    failed: int


class BatchBody(_Open):
    """A batch (with ``tree``: its children, each the same shape) as ``sqsjobs batches get --json``."""

    id: str
    status: str
    counts: BatchCounts
    children: list[str] = Field(default_factory=list)
    tree: list[BatchBody] | None = None


class BatchItemsAdded(_Open):
    """``POST /batches/{batch_id}/items``."""

    batch_id: str
    job_ids: list[str]


class ChainStep(_Open):
    """One step of a chain: its job, and that job's status (with ``results``: its result or error)."""

    index: int = Field(description="0-based")
    type: str
    job_id: str
    status: str | None = Field(description="None when the step's record is gone (expired)")
    result: Any = None
    error: JobError | None = None


class ChainBody(_Open):
    """A chain as ``sqsjobs chains get --json``."""

    id: str
    status: str
    current: int | None = None
    steps: list[ChainStep]


class CancelOutcome(_Open):
    """``POST /chains/{chain_id}/cancel``."""

    id: str
    result: str


def _stream_event(title: str, events: list[str], what: str) -> dict[str, Any]:
    return {
        "title": title,
        "description": f"One Server-Sent Event of {what}; its data is JSON text.",
        "type": "object",
        "required": ["event", "data"],
        "properties": {
            "event": {"type": "string", "enum": events},
            "data": {"type": "string", "contentMediaType": "application/json"},
            "id": {"type": "string"},
            "retry": {"type": "integer"},
        },
    }


#: The schema of one parsed event of each stream (OpenAPI 3.1: a ``text/event-stream`` schema is
#: the schema of one event, as 3.2's ``itemSchema``), named so that generated clients name them too.
STREAM_EVENTS: dict[str, dict[str, Any]] = {
    "JobStreamEvent": _stream_event(
        "JobStreamEvent", ["status", "progress", "end", "gone"], "a job's stream"
    ),
    "WorkflowStreamEvent": _stream_event(
        "WorkflowStreamEvent", ["status", "end", "gone"], "a batch's or a chain's stream"
    ),
}
