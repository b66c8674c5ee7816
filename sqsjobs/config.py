"""Settings: explicit argument > ``SQSJOBS_*`` (or ``AWS_*``) environment variable > default.

Built once (``Settings.from_env``) and frozen; nothing reads the environment at import time.
Defaults live here and only here, each with its unit in the name.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from sqsjobs.errors import ConfigurationError
from sqsjobs.retry import MAX_VISIBILITY_S

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

#: SQS long polls wait at most 20 s.
#: https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-short-and-long-polling.html
MAX_WAIT_TIME_S = 20
#: The largest SQS message, body and attributes together: 1 MiB since 2025 (it was 256 KiB), and
#: what ``provision`` and infra/ set every queue's ``MaximumMessageSize`` to, so a queue made before
#: the change is raised too. A queue still at 256 KiB needs ``inline_payload_bytes`` lowered to match.
#: https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SetQueueAttributes.html
MAX_MESSAGE_BYTES = 1024 * 1024
#: The largest payload a message carries by default: the message's limit less room for the envelope's
#: other fields and the trace attribute (under 2 KiB together). A payload up to this size costs no S3
#: PUT at enqueue and no GET at the claim.
MAX_INLINE_PAYLOAD_BYTES = MAX_MESSAGE_BYTES - 8 * 1024
#: The longest an SQS queue keeps a message (``MessageRetentionPeriod``), and the shortest: 14 days
#: and one minute. SQS deletes a message this long after it was first sent, however often it was
#: received or re-armed since; a standard queue's DLQ keeps that first time (a FIFO DLQ starts anew).
#: https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SetQueueAttributes.html
MAX_MESSAGE_RETENTION_S = 1_209_600
MIN_MESSAGE_RETENTION_S = 60
#: The worker registry's refresh may not be rarer: the heartbeat alarm (infra/) expects at least one
#: refresh per worker in each one-minute period.
MAX_REGISTRY_INTERVAL_S = 60.0
#: A deferred job's recheck may not be shorter: SQS sets visibility in whole seconds.
#: https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_ChangeMessageVisibility.html
MIN_DEFER_RECHECK_S = 1.0


def to_seconds(value: timedelta | float | int) -> float:
    """Accept a ``timedelta`` or a number of seconds."""
    if isinstance(value, timedelta):
        return value.total_seconds()
    return float(value)


@dataclass(frozen=True)
class Settings:
    """Everything an App needs to reach AWS and pace its workers."""

    #: Names the table and queues (``<app_name>-jobs``, ``<app_name>-<queue>``).
    app_name: str
    #: AWS endpoint (an emulator's URL); None means AWS itself.
    #: ``SQSJOBS_ENDPOINT_URL``/``AWS_ENDPOINT_URL``.
    endpoint_url: str | None = None
    #: ``SQSJOBS_REGION``/``AWS_REGION``/``AWS_DEFAULT_REGION``. None: the region botocore resolves
    #: (the profile's, ``AWS_PROFILE``/``AWS_CONFIG_FILE``); ``us-east-1`` only for an emulator endpoint.
    region: str | None = None
    #: DynamoDB table; default ``<app_name>-jobs``. ``SQSJOBS_TABLE``.
    table_name: str = ""
    #: Queue name prefix; default ``<app_name>``. ``SQSJOBS_QUEUE_PREFIX``.
    queue_prefix: str = ""
    #: EventBridge Scheduler group holding the app's schedules (apply deletes only inside it);
    #: default ``<app_name>-schedules``. ``SQSJOBS_SCHEDULE_GROUP``.
    schedule_group: str = ""
    #: EventBridge Scheduler group of the schedules made at runtime (``app.schedules.create``), which
    #: ``schedules apply`` never touches; default ``<app_name>-runtime``. ``SQSJOBS_RUNTIME_SCHEDULE_GROUP``.
    runtime_schedule_group: str = ""
    #: IAM role Scheduler assumes to send fires to SQS (infra creates it). ``SQSJOBS_SCHEDULER_ROLE_ARN``.
    scheduler_role_arn: str | None = None
    #: EventBridge bus that hears when jobs end (name or ARN; docs/events.md); empty: no events.
    #: ``SQSJOBS_EVENT_BUS``.
    event_bus: str = ""
    #: The events every job type publishes: comma-separated names (``JobDead,BatchCompleted``) or
    #: ``all``; a type's ``@job(hooks=Hooks(events=...))`` wins for its own jobs. ``SQSJOBS_EVENTS``.
    events: str = ""
    #: The sweeper relays the table's change stream to the bus itself (``sqsjobs dev``, tests); in
    #: AWS a Lambda on the stream does (infra/). ``SQSJOBS_EVENT_RELAY``.
    event_relay: bool = False
    #: Queue visibility timeout; the heartbeat re-extends held messages to this every third of it.
    visibility_timeout_s: int = 30
    #: Long-poll wait of each receive.
    receive_wait_s: int = MAX_WAIT_TIME_S
    #: Lease a claim takes in the record; renewed by the heartbeat only for jobs that outlive half of it.
    lease_s: float = 60.0
    #: Handlers one worker process runs at once, over all its queues (claims and finishes hold no slot).
    concurrency: int = 10
    #: Per-queue caps inside ``concurrency``.
    queue_concurrency: Mapping[str, int] = field(default_factory=dict)
    #: Messages a worker holds beside its running handlers: at most this many received and claimed (or
    #: being claimed) while they wait for a slot, and receives pause while this many are finishing. None:
    #: ``concurrency``; 0: claim only for a free slot. Bounds what a slow DynamoDB makes a worker hoard.
    held_ahead: int | None = None
    #: Logical queues with ``high`` and ``low`` levels beside their normal one (two more SQS queues each,
    #: polled first and last: docs/flow-control-routing.md). ``SQSJOBS_PRIORITY_QUEUES=reports,mail``.
    priority_queues: frozenset[str] = frozenset()
    #: Of every this many batches a priority queue's worker takes, at least one comes from a lower
    #: level that has work (no starvation while higher levels stay busy).
    lower_priority_every: int = 4
    #: Logical queues with a FIFO queue for jobs with a ``serialize_key``. ``SQSJOBS_SERIALIZED_QUEUES``.
    serialized_queues: frozenset[str] = frozenset()
    #: Hosts, addresses and CIDR blocks a notify webhook may reach although they are not public (and
    #: over plain http): ``SQSJOBS_WEBHOOK_ALLOW=10.0.0.0/8,hooks.internal``. Empty: public HTTPS only.
    webhook_allow: frozenset[str] = frozenset()
    #: Tag names whose values become dimensions of the job metrics (``enqueue(tags=)``): each
    #: distinct value is a CloudWatch metric of its own ($0.30 a month each), so name only tags of
    #: few values (a plan, a region), never one per customer or order. ``SQSJOBS_METRIC_TAGS=plan,region``.
    metric_tags: frozenset[str] = frozenset()
    #: Give a job's tenant as ``MessageGroupId`` on standard queues (SQS fair queues: a tenant with a
    #: deep backlog does not hold up the others' messages). Off only for a consumer that rejects it.
    fair_queues: bool = True
    #: On SIGTERM, how long running jobs may finish before they are released (keep under ECS stopTimeout).
    drain_timeout_s: float = 25.0
    #: On ECS, the task's scale-in protection while it holds jobs lasts this long unless renewed (each
    #: heartbeat renews it past half): a hung worker is protected at most this long. 0 turns it off.
    task_protection_minutes: int = 10
    #: The worker's health probe (``runtime/health_probe.py``): HTTP on 127.0.0.1 at this port, serving
    #: ``/live`` and ``/ready``. None: no probe. ``SQSJOBS_HEALTH_PORT``.
    health_port: int | None = None
    #: The probe fails ``/live`` once the event loop has not run for this long, and ``/ready`` once
    #: DynamoDB or SQS has not answered the probe's own calls (one each, every third of it) for this long.
    health_stall_s: float = 30.0
    #: A hint the sweeper or a replay sent is sent again if no claim took the job this long after it.
    stale_after_s: float = 300.0
    #: Pause between sweeps of ``sqsjobs sweep`` and ``sqsjobs dev``.
    sweep_interval_s: float = 30.0
    #: The longest a job deferred by a wait with no known end (its type paused, its concurrency
    #: limit full, its breaker's probe still running) stays away before a worker looks at it again:
    #: the pause recheck grows up to this, the others are capped by it (docs/flow-control-limits.md).
    #: Each look is one receive; the floor is SQS's 1 s visibility unit. ``SQSJOBS_DEFER_RECHECK_MAX_S``.
    defer_recheck_max_s: float = 60.0
    #: How long the App's queues keep a message (``MessageRetentionPeriod``: ``provision`` and infra/
    #: set it on every queue, their DLQs at ``MAX_MESSAGE_RETENTION_S``). A message is gone this long
    #: after its first send, however often it was re-armed since, so a job may rely on its message
    #: only this long; ``sqsjobs doctor`` checks the queues keep at least this and that every type's
    #: retries fit in it (docs/lifecycle.md, "Witnesses"). ``SQSJOBS_MESSAGE_RETENTION_S``.
    message_retention_s: int = MAX_MESSAGE_RETENTION_S
    #: Redrive backstop; None means the largest ``max_attempts`` of any job type plus ``receive_slack``.
    max_receive_count: int | None = None
    #: Extra receives allowed above max attempts (duplicates, releases, not-yet-due hints).
    receive_slack: int = 10
    #: Finished records are deleted by DynamoDB TTL after this long (unless ``retention`` says otherwise).
    retention_s: float = 14 * 86_400.0
    #: How long a finished record is kept, by how it ended and by type, over ``retention_s``: keys are
    #: an end state (``succeeded``, ``dead``, ``cancelled``, ``expired``), a job type, or both as
    #: ``type:state``; values seconds or ``timedelta``. The most specific key wins. E.g.
    #: ``{"succeeded": 86_400, "dead": 30 * 86_400}``: a day for successes, a month for the dead.
    #: ``SQSJOBS_RETENTION=succeeded=86400,dead=2592000,reports.build:succeeded=604800``.
    #: A record's retention is also its idempotency key's window (docs/operations.md, "Retention").
    retention: Mapping[str, float] = field(default_factory=dict)
    #: Archive finished records to the payload bucket (``archive/``, JSON Lines by date and type,
    #: queryable with Athena) and keep them there this many days; 0: no archive (docs/archive.md).
    #: Read from the table's change stream: by the sweeper when ``event_relay`` is set, by a Lambda
    #: in AWS. ``SQSJOBS_ARCHIVE_DAYS``.
    archive_days: int = 0
    #: S3 bucket of the payloads and results too large for the message or the record (the claim-check);
    #: default ``<app_name>-payloads``. Bucket names are global: on AWS, name your own (infra/ does).
    #: ``SQSJOBS_PAYLOAD_BUCKET``.
    payload_bucket: str = ""
    #: A larger payload is an S3 object and the message carries its reference (docs/payloads.md).
    inline_payload_bytes: int = MAX_INLINE_PAYLOAD_BYTES
    #: A larger payload of a job the record holds (run_at beyond SQS's 15-minute delay) is an S3 object:
    #: a payload in the record is billed again, per KB, by each of the record's later writes.
    held_inline_payload_bytes: int = 2 * 1024
    #: A larger result is an S3 object and the record keeps its reference (docs/payloads.md).
    inline_result_bytes: int = 8 * 1024
    #: The KMS key (id, ARN or alias) every job type's payloads and results are encrypted with before
    #: they leave the producer (docs/encryption.md); empty: none are, unless a type declares its own
    #: (``PayloadVersion(encrypt=...)``). Needs ``sqsjobs[encryption]``. ``SQSJOBS_ENCRYPT``.
    encrypt: str = ""
    #: Larger payloads raise ``PayloadTooLarge`` at enqueue (the worker reads a payload whole).
    max_payload_bytes: int = 64 * 1024 * 1024
    #: Larger results are replaced by a note saying so (the job still succeeds).
    max_result_bytes: int = 64 * 1024 * 1024
    #: S3 objects (payloads and results) expire this many days after they are written (a lifecycle rule,
    #: at least the record's retention). A job whose payload is an object must start within this less the
    #: retention, so enqueue refuses a later ``run_at`` for it.
    payload_object_days: int = 30
    #: Finished messages are deleted in batches; a batch waits at most this long to fill. The record is
    #: already final, so a late delete costs nothing but a redelivery the claim discards.
    ack_linger_s: float = 0.1
    #: A run's finish write waits at most this long to share its DynamoDB request with the next
    #: claims or other finishes (``store/write_batcher.py``); claims never wait. The slot is free
    #: already; the record shows the outcome that much later. 0: every finish leaves at once.
    finish_linger_s: float = 0.02
    #: When some jobs run and the last receive came back full (a backlog), a receive waits at most this
    #: long for enough free slots to fill a batch of ten. Without a backlog it goes back to its long
    #: poll at once with the slots that are free.
    receive_gather_s: float = 0.1
    #: Each ECS worker refreshes its entry in the worker registry (``sqsjobs workers``) this often: one
    #: write per worker per interval, never per job (docs/operations.md, "Workers": $0.054 per worker per
    #: month at 30 s). A worker is shown silent after two intervals without a refresh, and its entry
    #: expires (TTL) after ``sqsjobs.store.workers.TTL_INTERVALS``. Keep it at most 60 s: the heartbeat
    #: alarm counts the refreshes per minute.
    registry_interval_s: float = 30.0
    #: Buffered EMF metrics are written at least this often (Lambda also writes them per invocation).
    metrics_interval_s: float = 60.0
    #: Where the dashboard's charts and ``GET /series`` read their numbers: ``cloudwatch`` (the EMF
    #: metrics the workers emit, with GetMetricData: cost per metric, not per record), ``records`` (a
    #: capped Scan of the job records), or ``auto``: CloudWatch on AWS, the records when an
    #: ``endpoint_url`` names an emulator (which ingests no EMF). docs/dashboard.md has both costs.
    charts_source: str = "auto"
    #: A running job is flagged once it has run this many times its type's p95 running time (a log
    #: line, ``JobsRunningLong``, the ``JobRunningLong`` event, the console); 0 turns the watch off.
    #: ``app.slow_runs.watch(type, factor=)`` sets one type's (docs/observability.md, "Slow runs").
    slow_factor: float = 3.0
    #: A type's baseline is trusted once it was taken over at least this many runs.
    slow_min_runs: int = 20
    #: Put each job's payload in its "job claimed" log line; off, because payloads may hold personal data.
    log_payloads: bool = False
    #: The timeout of the Lambda function that consumes this App's queues, if one does: ``sqsjobs
    #: doctor`` then fails on a job type whose explicit timeout that function can never start
    #: (``sqsjobs.deploy.rules.check_lambda_timeout``). The function itself reads its own deadline
    #: from the Lambda context, not from this.
    lambda_timeout_s: int | None = None
    #: Check every request against botocore's service model before it is sent. Off by default for
    #: speed (it is a fifth of the SDK's CPU in a worker): the request builders are checked against
    #: the model by the test suite, which runs with this on, and AWS validates every request anyway.
    #: Turn it on to get a local error naming the field when a hand-built request is wrong.
    validate_requests: bool = False
    #: Ask DynamoDB for the capacity each request consumed (``ReturnConsumedCapacity=INDEXES``) and
    #: add it up in ``App.requests.capacity``, table and indexes apart: what AWS bills, measured by
    #: DynamoDB itself. For cost tests and benchmarks; a few bytes more per answer.
    measure_capacity: bool = False
    #: Group the claims and finishes a worker has ready at one instant, and ``enqueue_many``'s records,
    #: into ``BatchExecuteStatement`` requests (up to 25 writes each, each with its own condition and
    #: billed as its own write). Off only for an emulator that ignores PartiQL conditions: the
    #: embedded moto of ``sqsjobs dev`` (docs/bench.md, "Batched writes"). ``sqsjobs worker`` asks the
    #: endpoint at start (``sqsjobs.store.probe``) and turns it off, with one log line, when a
    #: statement whose condition is false is not refused (moto's own server); ``sqsjobs doctor`` says so.
    batch_writes: bool = True
    #: Send a job's message and put its record at the same time: one round trip of latency per
    #: ``enqueue`` instead of two. Off by default because it opens one window the default order
    #: (message first, then record) does not have: a producer killed after its put landed and before
    #: SQS took the message leaves a ``queued`` record nothing brings back (its enqueue never
    #: returned; a retry with the same idempotency key runs it, ``sqsjobs doctor --stranded`` finds
    #: it). Turn it on where enqueue latency matters and every enqueue carries an idempotency key
    #: its caller retries (docs/lifecycle.md, "Enqueue in one round trip").
    enqueue_together: bool = False

    def __post_init__(self) -> None:
        if not self.table_name:
            object.__setattr__(self, "table_name", f"{self.app_name}-jobs")
        if not self.queue_prefix:
            object.__setattr__(self, "queue_prefix", self.app_name)
        if not self.schedule_group:
            object.__setattr__(self, "schedule_group", f"{self.app_name}-schedules")
        if not self.runtime_schedule_group:
            object.__setattr__(self, "runtime_schedule_group", f"{self.app_name}-runtime")
        if not self.payload_bucket:
            object.__setattr__(self, "payload_bucket", f"{self.app_name}-payloads")
        object.__setattr__(self, "retention", _retention_rules(self.retention))
        if not 0 < self.inline_payload_bytes <= MAX_INLINE_PAYLOAD_BYTES:
            raise ConfigurationError(
                f"inline_payload_bytes must be 1..{MAX_INLINE_PAYLOAD_BYTES} (a 1 MiB message "
                f"less its envelope), got {self.inline_payload_bytes}"
            )
        if self.payload_object_days < self.retention_days + 1:
            raise ConfigurationError(
                f"payload_object_days ({self.payload_object_days}) must outlast the record's retention "
                f"({self.retention_days} days) by at least a day"
            )
        if not 0 <= self.receive_wait_s <= MAX_WAIT_TIME_S:
            raise ConfigurationError(
                f"receive_wait_s must be 0..{MAX_WAIT_TIME_S}, got {self.receive_wait_s}"
            )
        if not 1 <= self.visibility_timeout_s <= MAX_VISIBILITY_S:
            raise ConfigurationError(
                f"visibility_timeout_s must be 1..{MAX_VISIBILITY_S}, got {self.visibility_timeout_s}"
            )
        if not MIN_MESSAGE_RETENTION_S <= self.message_retention_s <= MAX_MESSAGE_RETENTION_S:
            raise ConfigurationError(
                f"message_retention_s must be {MIN_MESSAGE_RETENTION_S}..{MAX_MESSAGE_RETENTION_S} (what SQS "
                f"accepts), got {self.message_retention_s}"
            )
        if self.concurrency < 1:
            raise ConfigurationError(f"concurrency must be at least 1, got {self.concurrency}")
        if self.held_ahead is not None and self.held_ahead < 0:
            raise ConfigurationError(f"held_ahead must be at least 0, got {self.held_ahead}")
        if self.slow_factor != 0 and self.slow_factor <= 1:
            raise ConfigurationError(f"slow_factor must be more than 1 (or 0: off), got {self.slow_factor}")
        if self.charts_source not in ("auto", "records", "cloudwatch"):
            raise ConfigurationError(
                f"charts_source must be auto, records or cloudwatch, got {self.charts_source!r}"
            )
        for name in ("priority_queues", "serialized_queues", "webhook_allow", "metric_tags"):
            object.__setattr__(self, name, frozenset(getattr(self, name)))
        if self.lower_priority_every < 2:
            raise ConfigurationError(
                f"lower_priority_every must be at least 2, got {self.lower_priority_every}"
            )
        if self.lease_s <= 0:
            raise ConfigurationError(f"lease_s must be positive, got {self.lease_s}")
        if self.defer_recheck_max_s < MIN_DEFER_RECHECK_S:
            raise ConfigurationError(
                f"defer_recheck_max_s must be at least {MIN_DEFER_RECHECK_S:g} s (SQS hides a message in "
                f"whole seconds), got {self.defer_recheck_max_s}"
            )
        if not 0 < self.registry_interval_s <= MAX_REGISTRY_INTERVAL_S:
            raise ConfigurationError(
                f"registry_interval_s must be in (0, {MAX_REGISTRY_INTERVAL_S:g}] seconds (the heartbeat "
                f"alarm counts refreshes per minute), got {self.registry_interval_s}"
            )

    def retention_for(self, job_type: str, status: str) -> float:
        """How long a record of ``job_type`` that ended ``status`` is kept (``retention``, else ``retention_s``)."""
        rules = self.retention
        if not rules:
            return self.retention_s
        for key in (f"{job_type}:{status}", job_type, status):
            if key in rules:
                return rules[key]
        return self.retention_s

    @property
    def longest_retention_s(self) -> float:
        """The longest any finished record is kept (what outlives every record: a tag item, the S3 rules)."""
        return max([self.retention_s, *self.retention.values()])

    @property
    def retention_days(self) -> int:
        """The longest retention in whole days, rounded up (S3 lifecycle rules count days: an object outlives its record)."""
        return max(1, math.ceil(self.longest_retention_s / 86_400))

    @property
    def heartbeat_interval_s(self) -> float:
        """Held messages and long leases are extended this often."""
        return max(self.visibility_timeout_s / 3.0, 0.2)

    def queue_name(self, queue: str) -> str:
        """The SQS queue name for a logical queue."""
        return f"{self.queue_prefix}-{queue}"

    def dlq_name(self, queue: str) -> str:
        """The dead-letter queue name for a logical queue."""
        return f"{self.queue_prefix}-{queue}-dlq"

    def evolve(self, **changes: Any) -> Settings:
        """Return a copy with ``changes`` applied."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def check_names(cls, names: Iterable[str]) -> None:
        """Refuse names that are not settings, suggesting the closest one.

        ``App(...)`` calls this at once, though values are resolved on first use: a misspelt name
        would otherwise fail only when a worker or producer first touches the settings.
        """
        valid = [f.name for f in dataclasses.fields(cls) if f.name != "app_name"]
        problems = []
        for name in sorted(set(names) - set(valid)):
            close = difflib.get_close_matches(name, valid, n=1)
            if name == "app_name":
                problems.append(f"{name!r} (it is the App's name, its first argument)")
            else:
                problems.append(f"{name!r} (did you mean {close[0]!r}?)" if close else repr(name))
        if problems:
            raise ConfigurationError(
                f"unknown setting{'s' if len(problems) > 1 else ''} {', '.join(problems)}; "
                "settings are the fields of sqsjobs.Settings"
            )

    @classmethod
    def from_env(cls, app_name: str, env: Mapping[str, str] | None = None, **explicit: Any) -> Settings:
        """Build settings: ``explicit`` first, then the environment, then the defaults."""
        cls.check_names(explicit)
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        endpoint = env.get("SQSJOBS_ENDPOINT_URL") or env.get("AWS_ENDPOINT_URL")
        if endpoint:
            values["endpoint_url"] = endpoint
        region = env.get("SQSJOBS_REGION") or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
        if region:
            values["region"] = region
        for f in dataclasses.fields(cls):
            if f.name in ("app_name", "endpoint_url", "region", "queue_concurrency", "retention"):
                continue
            if f.name in ("priority_queues", "serialized_queues", "webhook_allow", "metric_tags"):
                listed = env.get(f"SQSJOBS_{f.name.upper()}")
                if listed is not None:
                    values[f.name] = frozenset(filter(None, (q.strip() for q in listed.split(","))))
                continue
            raw = env.get(f"SQSJOBS_{f.name.upper()}")
            if raw is None and f.name == "table_name":
                raw = env.get("SQSJOBS_TABLE")
            if raw is not None:
                values[f.name] = _parse(f.name, raw, f.type)
        raw_qc = env.get("SQSJOBS_QUEUE_CONCURRENCY")
        if raw_qc:
            values["queue_concurrency"] = _parse_queue_caps(raw_qc)
        raw_retention = env.get("SQSJOBS_RETENTION")
        if raw_retention:
            values["retention"] = _parse_retention(raw_retention)
        values.update({k: v for k, v in explicit.items() if v is not None})
        return cls(app_name=app_name, **values)


def _parse(name: str, raw: str, annotation: Any) -> Any:
    kind = str(annotation)
    if kind == "bool":
        return raw.strip().lower() in ("1", "true", "yes", "on")
    try:
        if kind.startswith("int"):
            return int(raw)
        if kind.startswith("float"):
            return float(raw)
    except ValueError as exc:
        raise ConfigurationError(f"SQSJOBS_{name.upper()}={raw!r} is not a number") from exc
    return raw


#: The end states a retention rule may name.
END_STATES = ("succeeded", "dead", "cancelled", "expired")


def _retention_rules(rules: Mapping[str, Any]) -> dict[str, float]:
    """``retention`` in seconds (``ConfigurationError``: ``type:state`` of no end state, a duration <= 0)."""
    out: dict[str, float] = {}
    for key, value in rules.items():
        _, colon, state = key.rpartition(":")
        if colon and state not in END_STATES:
            raise ConfigurationError(
                f"retention {key!r}: after ':' comes an end state, one of {', '.join(END_STATES)}"
            )
        try:
            seconds = to_seconds(value)
        except (TypeError, ValueError):
            seconds = 0.0
        if not seconds > 0:
            raise ConfigurationError(f"retention {key!r} must be a positive duration, got {value!r}")
        out[key] = seconds
    return out


def _parse_retention(raw: str) -> dict[str, float]:
    """Parse ``succeeded=86400,reports.build:dead=2592000``."""
    rules: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in raw.split(","))):
        key, _, seconds = part.partition("=")
        try:
            rules[key.strip()] = float(seconds)
        except ValueError:
            raise ConfigurationError(f"SQSJOBS_RETENTION: expected key=seconds, got {part!r}") from None
    return rules


def _parse_queue_caps(raw: str) -> dict[str, int]:
    """Parse ``default=4,reports=1``."""
    caps: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in raw.split(","))):
        queue, _, n = part.partition("=")
        if not n.isdigit():
            raise ConfigurationError(f"SQSJOBS_QUEUE_CONCURRENCY: expected queue=N, got {part!r}")
        caps[queue] = int(n)
    return caps
