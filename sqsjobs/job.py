"""The job record and its state machine; pure, no I/O.

::

    enqueue ──▶ queued ──claim──▶ running ──complete──▶ succeeded
                  │  ▲               │ ▲ │
                  │  │ release       │ │ └─fail──▶ dead ──replay──▶ queued
                  │  └───────────────┤ │
                  │                  │ └─rescue (lease expired: new owner, epoch+1)
                  │        schedule_retry
                  │                  ▼
                  │           retry_scheduled ──claim (once due)──▶ running
                  ├──cancel──▶ cancelled ◀──cancel── retry_scheduled
                  └──expire (never started, deadline passed)──▶ expired
    chain step (sqsjobs.chains): waiting ──unblock──▶ queued;  waiting ──drop──▶ cancelled

Every arrow is one conditional write, registered with its builder as a row of the one state table
(``sqsjobs.store.state_table``: its sources, its target, its refusals and the witness it keeps), which
``docs/lifecycle.md`` follows. ``WITNESSES`` says what brings a job in each unfinished state back to a
worker.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from datetime import datetime


class JobStatus(enum.StrEnum):
    """Where a job is in its life."""

    QUEUED = "queued"
    #: A chain step whose predecessor has not succeeded yet: no claim takes it.
    WAITING = "waiting"
    RUNNING = "running"
    RETRY_SCHEDULED = "retry_scheduled"
    SUCCEEDED = "succeeded"
    DEAD = "dead"
    CANCELLED = "cancelled"
    #: Not started by its deadline (``start_by``); it never ran and never will.
    EXPIRED = "expired"

    @property
    def terminal(self) -> bool:
        """True when nothing will run the job again without an operator."""
        return self in TERMINAL


TERMINAL = frozenset({JobStatus.SUCCEEDED, JobStatus.DEAD, JobStatus.CANCELLED, JobStatus.EXPIRED})


class Witness(enum.StrEnum):
    """What will bring a job that is not finished back to a worker, with nobody watching.

    The rule: every record that is not terminal has at least one witness at every moment, so no job
    is ever left saying it is on its way with nothing that will move it (``WITNESSES``; the writes
    that keep one: each state-table row's ``kept``; docs/lifecycle.md, "Witnesses"; ``sqsjobs doctor --stranded`` finds
    records that have none).
    """

    #: An SQS message of the job that will be received before it expires: visible, delayed, or
    #: re-armed (its visibility set to when the job is due, or a lease ends). SQS deletes it
    #: ``Settings.message_retention_s`` after its first send, however often it was re-armed.
    MESSAGE = "message"
    #: An entry in the ``attention`` index that the sweeper reads (``held``: due beyond what a
    #: message can wait; ``pending``: a hint was sent, and is sent again if no claim takes the job,
    #: or a run outlives its message and is sent a hint once its lease lapses).
    ATTENTION = "attention"
    #: A live lease: its owner runs the job and renews the lease while it does; once it lapses, the
    #: owner's message (kept invisible only while the owner renews it) comes back and rescues the job.
    #: A lease alone brings nothing back: a run about to outlive its message gets an attention entry.
    LEASE = "lease"
    #: A chain step's predecessor, itself witnessed: its finish unblocks the step (a hint and a
    #: ``pending`` entry, in the same transaction as its success) or drops it (the chain stopped).
    PREDECESSOR = "predecessor"


#: Every state's witnesses: a non-terminal record has at least one of these at every moment, a
#: terminal one needs none (tests/unit/test_witnesses.py checks both).
WITNESSES: dict[JobStatus, frozenset[Witness]] = {
    JobStatus.QUEUED: frozenset({Witness.MESSAGE, Witness.ATTENTION}),
    JobStatus.WAITING: frozenset({Witness.PREDECESSOR}),
    JobStatus.RUNNING: frozenset({Witness.LEASE, Witness.MESSAGE, Witness.ATTENTION}),
    JobStatus.RETRY_SCHEDULED: frozenset({Witness.MESSAGE, Witness.ATTENTION}),
    **{status: frozenset() for status in TERMINAL},
}


class AttemptOutcome(enum.StrEnum):
    """What became of an attempt: the ``outcome`` of its log lines and metrics, and of its history entry."""

    #: Logged when the claim lands (never in the history).
    STARTED = "started"
    SUCCEEDED = "succeeded"
    #: Failed; another attempt is scheduled.
    RETRY = "retry"
    DEAD = "dead"
    CANCELLED = "cancelled"
    #: Given back on shutdown, or parked for a newer payload version (history only).
    RELEASED = "released"
    #: Not started by its deadline: it ends without a run (batches count it failed, chains stop).
    EXPIRED = "expired"


@dataclass(frozen=True)
class FailureRecord:
    """Why an attempt failed, as recorded in the job (``Job.last_error``): not an exception, its trace."""

    #: Exception class name, e.g. ``ValueError``.
    error_class: str
    #: ``str(exception)``, truncated.
    message: str
    #: The last frames of the traceback, truncated.
    traceback: str = ""


@dataclass(frozen=True)
class AttemptRecord:
    """One finished attempt, kept in the record's capped history."""

    #: 1-based attempt number.
    attempt: int
    #: An ``AttemptOutcome`` value; kept as read, so an outcome a newer sqsjobs wrote still loads.
    outcome: str
    #: When the attempt started and ended (timezone-aware).
    started_at: datetime | None
    finished_at: datetime
    #: Worker that ran it.
    worker: str
    #: Error class and message, if it failed.
    error: str = ""


@dataclass(frozen=True)
class BatchPlace:
    """A job's place in a batch (``sqsjobs.batches``): its key in the batch's item index."""

    #: ``<batch id>#<shard>``: the shard of the batch's counters this item counts on.
    key: str

    @property
    def id(self) -> str:
        """The batch's id."""
        return self.key.rpartition("#")[0]


@dataclass(frozen=True)
class ChainPlace:
    """A job's place in a chain (``sqsjobs.chains.namespace``): the chain, its step and the chain's length."""

    id: str
    #: 0-based.
    step: int
    steps: int


#: The longest webhook URL, queue URL or bus name a notify target may name.
MAX_TARGET_CHARS = 2048


@dataclass(frozen=True)
class Notify:
    """Where a job's end is told (``enqueue(notify=...)``): a signed webhook, an SQS queue or an EventBridge bus.

    Exactly one of ``url`` (an HTTPS webhook, signed per Standard Webhooks with the secret
    configured under the name ``secret``: the record holds the name, never the secret), ``queue``
    (an SQS queue URL) or ``bus`` (an EventBridge bus name or ARN). ``Notify.of`` reads the JSON
    form ``POST /jobs`` takes; ``ValueError`` says what is wrong.
    """

    url: str | None = None
    secret: str | None = None
    queue: str | None = None
    bus: str | None = None

    def __post_init__(self) -> None:
        targets = [n for n in ("url", "queue", "bus") if getattr(self, n) is not None]
        if len(targets) != 1:
            raise ValueError(f"notify names exactly one of url, queue or bus, not {targets or 'none'}")
        for name in (*targets, "secret"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not 0 < len(value) <= MAX_TARGET_CHARS):
                raise ValueError(f"notify {name} must be a string of 1 to {MAX_TARGET_CHARS} characters")
        if self.url is not None and not self.url.startswith(("https://", "http://")):
            raise ValueError("notify url must be an https:// URL")
        if self.secret is not None and self.url is None:
            raise ValueError("notify secret signs a webhook: give it with a url")

    @classmethod
    def of(cls, data: object) -> Notify:
        """The target a JSON object names (``{"url": ..., "secret": ...}``, ``{"queue": ...}``, ``{"bus": ...}``)."""
        if isinstance(data, Notify):
            return data
        if not isinstance(data, dict) or set(data) - {"url", "secret", "queue", "bus"}:
            raise ValueError('notify is an object with "url" (and "secret"), "queue" or "bus"')
        return cls(**data)

    def to_json(self) -> dict[str, str]:
        """The JSON form kept in the record and the message."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


#: The longest progress message, and the largest progress ``data`` as JSON: a report rides on the
#: lease renewal, whose write units grow with the record (one unit per KB).
MAX_PROGRESS_MESSAGE_CHARS = 500
MAX_PROGRESS_DATA_BYTES = 2048


@dataclass(frozen=True)
class Progress:
    """What a running job last reported (``ctx.progress``): written with its next lease renewal.

    ``fraction`` is done/total in 0..1; ``message`` a line for people; ``data`` any small JSON
    (counts, the current item). ``report`` numbers the job's reports (1, 2, ..., on from the record's
    across attempts and HTTP heartbeats): a gap says one was overtaken before a renewal carried it. ``at``: when it was
    written (epoch seconds).
    """

    fraction: float | None = None
    message: str | None = None
    data: Any = None
    report: int = 0
    at: float | None = None

    def __post_init__(self) -> None:
        if self.fraction is not None and (
            isinstance(self.fraction, bool)
            or not isinstance(self.fraction, int | float)
            or not 0.0 <= self.fraction <= 1.0
        ):
            raise ValueError(f"progress fraction must be a number from 0 to 1, not {self.fraction!r}")
        if self.message is not None and (
            not isinstance(self.message, str) or len(self.message) > MAX_PROGRESS_MESSAGE_CHARS
        ):
            raise ValueError(
                f"progress message must be a string of at most {MAX_PROGRESS_MESSAGE_CHARS} characters"
            )
        if self.data is not None:
            try:
                size = len(json.dumps(self.data, separators=(",", ":"), allow_nan=False))
            except (TypeError, ValueError, RecursionError) as exc:
                raise ValueError(f"progress data must be JSON data: {exc}") from None
            if size > MAX_PROGRESS_DATA_BYTES:
                raise ValueError(f"progress data is {size} bytes as JSON, over {MAX_PROGRESS_DATA_BYTES}")

    def to_json(self) -> dict[str, Any]:
        """The JSON form kept in the record, shown by the API and the CLI."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}

    def summary(self) -> str:
        """``42%  copying page 7  {"pages": 7}``: the report on one line (``jobs get``, the console)."""
        parts = [f"{self.fraction:.0%}"] if self.fraction is not None else []
        if self.message:
            parts.append(self.message)
        if self.data is not None:
            parts.append(json.dumps(self.data)[:200])
        return "  ".join(parts)

    @classmethod
    def of(cls, data: dict[str, Any]) -> Progress:
        """The progress a record's JSON form names (unknown keys are ignored: a newer writer's)."""
        return cls(**{k: data[k] for k in ("fraction", "message", "data", "report", "at") if k in data})


@dataclass(frozen=True)
class RunningLong:
    """A run flagged as running far longer than its type usually does (``sqsjobs.slow_runs``)."""

    #: When the worker flagged it, and how long the run had been running then.
    at: float
    elapsed_s: float
    #: Its type's p95 running time (the sweeper's baseline), and the factor of it the run passed.
    p95_s: float
    factor: float

    def to_json(self) -> dict[str, float]:
        """The flag as the record keeps it (a JSON string)."""
        return {"at": self.at, "elapsed_s": self.elapsed_s, "p95_s": self.p95_s, "factor": self.factor}

    @property
    def times(self) -> float:
        """How many times its type's p95 the run had taken when it was flagged."""
        return self.elapsed_s / self.p95_s if self.p95_s > 0 else float("inf")


@dataclass(frozen=True)
class Job:
    """A job as stored in DynamoDB; change it only through store transitions."""

    #: Unique id; derived from the idempotency key when one is given.
    id: str
    #: Registered handler name, e.g. ``receipts.send``.
    type: str
    #: Logical queue name.
    queue: str
    #: Current state.
    status: JobStatus
    #: JSON-compatible payload; None in the record of a job whose message carries it (the happy
    #: path keeps the record small: docs/lifecycle.md, "Where a job's data lives"): records keep it
    #: only while held, and once dead or cancelled (so they can be replayed).
    payload: Any
    #: Version of the payload's schema (``HandlerSpec.version`` at enqueue).
    payload_version: int
    #: Attempts started so far (claims); ``max_attempts`` bounds it.
    attempt: int
    #: None until a worker that has the handler claims it: a producer without the handler code
    #: leaves the bound to the type's policy, which the claim resolves.
    max_attempts: int | None
    #: Not runnable before this instant.
    run_at: datetime
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    #: Lease: who runs it, the fencing epoch (bumped by every claim), and until when.
    lease_owner: str | None = None
    lease_epoch: int = 0
    lease_expires: datetime | None = None
    #: Random per claim: every later write of that run is conditional on it, and a lost answer is
    #: recognised by it. Never shown to handlers (they get ``fencing_token``).
    claim_token: str | None = None
    #: SQS message id of the delivery that claimed the job: a refused claim from that same message
    #: (the owner's, back after a crash) waits for the lease; a copy of another message is dropped.
    claim_message_id: str | None = None
    result: Any = None
    last_error: FailureRecord | None = None
    history: tuple[AttemptRecord, ...] = ()
    idempotency_key: str | None = None
    tenant: str | None = None
    #: ``"high"`` or ``"low"`` on a queue with levels; None is normal (``sqsjobs.transport.routes``).
    priority: str | None = None
    #: Jobs with one key run one at a time, in enqueue order (a FIFO message group).
    serialize_key: str | None = None
    parent_id: str | None = None
    root_id: str | None = None
    #: The batch this job is an item of; None outside any batch.
    batch: BatchPlace | None = None
    #: Trace context from the producer (e.g. an X-Ray trace header).
    trace: str | None = None
    #: An operator asked a running job to stop; it sees this at its next heartbeat.
    cancel_requested: bool = False
    #: Free-form reason when dead, cancelled or expired.
    reason: str | None = None
    #: The job expires (``expired``, never runs) if no worker has started it by then: enqueue time
    #: plus ``expires_after``. None: no deadline of its own (a worker may still apply its type's).
    start_by: datetime | None = None
    #: Identity of the payload (``sqsjobs.store.codec.payload_hash``) and its JSON size in bytes.
    payload_hash: str | None = None
    payload_size: int | None = None
    #: ``s3://bucket/key`` of a payload too large for the message (``payload`` is then None): the
    #: worker reads it. ``result_ref`` likewise for a result too large for the record.
    payload_ref: str | None = None
    result_ref: str | None = None
    #: The chain this job is a step of; None outside any chain.
    chain: ChainPlace | None = None
    #: Where its end is told (``sqsjobs.notify``); None: nowhere.
    notify: Notify | None = None
    #: What the running job last reported (``ctx.progress``); kept after it ends.
    progress: Progress | None = None
    #: The slow-run watch's flag: a run went past its type's factor x p95 (None: never flagged).
    running_long: RunningLong | None = None
    #: What the job is about (``enqueue(tags=)``): names to values, each findable (``jobs list --tag``).
    tags: dict[str, str] = field(default_factory=dict)
    #: Its payload and result were encrypted with a KMS key (docs/encryption.md): the views show that,
    #: never them, even after ``App.get`` decrypted the result for its caller.
    encrypted: bool = False
    #: Extra fields that a newer sqsjobs wrote; kept so nothing is lost.
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def payload_in_message_only(self) -> bool:
        """True when only the job's message carries its payload (a job cancelled before a worker met it).

        A record keeps its payload once it needs it (held, dead, kept from the message); a payload
        in S3 has its reference in the record; a ``null`` payload needs no keeping.
        """
        return self.payload is None and self.payload_ref is None and (self.payload_size or 0) > len("null")

    @property
    def fencing_token(self) -> str:
        """``<id>:<epoch>``: pass it to downstream writes so a stale owner's write can be refused."""
        return f"{self.id}:{self.lease_epoch}"

    def evolve(self, **changes: Any) -> Job:
        """Return a copy with ``changes`` applied."""
        return dataclasses.replace(self, **changes)


#: Old name -> new name; the old one still resolves, with a DeprecationWarning.
RENAMED = {"JobError": "FailureRecord"}


def __getattr__(name: str) -> type[FailureRecord]:
    if name in RENAMED:
        warnings.warn(f"sqsjobs.job.{name} is renamed {RENAMED[name]}", DeprecationWarning, stacklevel=2)
        return FailureRecord
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
