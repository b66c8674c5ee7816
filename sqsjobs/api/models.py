"""The request and response bodies of the API, as pydantic models (they also write the OpenAPI schemas).

Request models forbid unknown members, so a misspelt option (``idempotencyKey``) is a 422 naming
it rather than an option silently dropped. Numbers must be finite: JSON has no NaN or Infinity,
though Python's parser accepts them.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from fastapi import Path
from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StringConstraints,
    ValidationInfo,
    field_validator,
    model_validator,
)

from sqsjobs.dedupe.modes import MAX_WINDOW_S, MIN_WINDOW_S
from sqsjobs.envelope import MAX_PAYLOAD_DEPTH, TOO_DEEP_ADVICE
from sqsjobs.ops._common import parse_duration
from sqsjobs.store.tags import MAX_TAGS

#: Ten years: a longer delay is a mistake, not a plan (a held job waits in the table meanwhile).
MAX_DELAY_S = 10 * 365 * 86_400.0
#: The bounds of every request member, in one place: each model below takes its numbers from these
#: types, and the library's own bounds (``sqsjobs.dedupe``) are where they come from, so a
#: request the document allows is one ``App.enqueue`` takes, and none reaches a store unchecked.
Delay = Annotated[float, Field(ge=0, le=MAX_DELAY_S, allow_inf_nan=False)]
#: A dedup window, quiet period or ``debounce_max`` (``dedupe.of_options`` refuses any other).
Window = Annotated[float, Field(ge=MIN_WINDOW_S, le=MAX_WINDOW_S, allow_inf_nan=False)]
#: A rate (per second): positive and finite.
Rate = Annotated[float, Field(gt=0, le=1e6, allow_inf_nan=False)]
#: The longest id or name any route takes in its path or body (a job's, a batch's, a chain's, a
#: worker's, a job type's): sqsjobs' own ids are far shorter, and DynamoDB answers a key over 2,048
#: bytes with an error, not "no such item". One bound, so every route answers alike: 422.
MAX_ID_LENGTH = 256
JobId = Annotated[str, Path(min_length=1, max_length=MAX_ID_LENGTH, description="The job's id")]
BatchId = Annotated[str, Path(min_length=1, max_length=MAX_ID_LENGTH, description="The batch's id")]
ChainId = Annotated[str, Path(min_length=1, max_length=MAX_ID_LENGTH, description="The chain's id")]
WorkerId = Annotated[
    str, Path(min_length=1, max_length=MAX_ID_LENGTH, description="As GET /workers lists it")
]
TypeName = Annotated[
    str, Path(min_length=1, max_length=MAX_ID_LENGTH, description="A job type the App registers")
]
#: A limit's name (``Limit`` refuses a longer one).
LimitName = Annotated[str, Path(min_length=1, max_length=64, description="A limit the App declares")]
#: A logical queue name: what SQS allows in a queue name, less the App's prefix.
QUEUE_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
_FORBID = ConfigDict(extra="forbid")


def check_json(value: Any) -> Any:
    """``value`` if it is plain JSON data; ``ValueError`` for NaN or an infinity anywhere in it.

    And for nesting deeper than a payload may (``MAX_PAYLOAD_DEPTH``): a 422 that says what to do,
    rather than a failure when the enqueue serializes it.
    """
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            raise ValueError("JSON has no NaN or Infinity")
        if isinstance(item, dict | list):
            if depth == MAX_PAYLOAD_DEPTH:
                raise ValueError(TOO_DEEP_ADVICE)
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return value


def since_seconds(text: str, now: float) -> float:
    """How far back ``since`` reaches: a duration (``30m``, ``2h``, ``7d``) or an ISO 8601 instant."""
    try:
        return parse_duration(text)
    except ValueError:
        pass
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"expected a duration like 30m, 2h or 7d, or an ISO 8601 instant, got {text!r}"
        ) from None
    if at.tzinfo is None:
        raise ValueError(f"give the instant's time zone (e.g. {text}Z or {text}+00:00)")
    return max(0.0, now - at.timestamp())


class NotifyWebhook(BaseModel):
    """Tell the job's end to an HTTPS webhook, signed per Standard Webhooks with a configured secret."""

    model_config = _FORBID

    url: str = Field(pattern=r"^https?://[^\s]+$", max_length=2048, description="Where to POST the job's end")
    secret: str | None = Field(
        None,
        min_length=1,
        max_length=200,
        description="The name of a configured signing secret (never the secret)",
    )


class NotifyQueue(BaseModel):
    """Tell the job's end to an SQS queue (its URL)."""

    model_config = _FORBID

    queue: str = Field(pattern=r"^https://\S+$", max_length=2048, description="The SQS queue's URL")


class NotifyBus(BaseModel):
    """Tell the job's end to an EventBridge bus (its name or ARN)."""

    model_config = _FORBID

    bus: str = Field(pattern=r"^[\w./:+-]+$", max_length=1600, description="The event bus's name or ARN")


#: Where an end is told (``notify`` on a job, a chain or a batch).
NotifyTarget = NotifyWebhook | NotifyQueue | NotifyBus


def notify_json(target: NotifyTarget | None) -> dict[str, str] | None:
    """A request's notify target as the library takes it (``producer.notify_target`` checks it)."""
    return None if target is None else target.model_dump(exclude_none=True)


#: A tag's name and value, as ``sqsjobs.store.tags`` checks them (the document states the same bounds).
TagName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.:/-]{1,64}$")]
TagValue = Annotated[str, StringConstraints(min_length=1, max_length=256, pattern=r"^[^\x00-\x1f]*$")]


def tags_field() -> Any:
    """``tags``: at most ``MAX_TAGS`` names to strings, no other name (``additionalProperties: false``)."""
    return Field(
        default_factory=dict,
        max_length=MAX_TAGS,
        json_schema_extra={"additionalProperties": False},
        description='What the job is about, e.g. {"customer": "42"}: kept on the record, each findable '
        "(GET /jobs?tag=customer=42)",
    )


class EnqueueRequest(BaseModel):
    """``POST /jobs``: one job, as ``App.enqueue`` takes it."""

    model_config = _FORBID

    type: str = Field(min_length=1, max_length=MAX_ID_LENGTH, description="A job type the App registers")
    payload: Any = Field(None, description="Validated against the job type's handler annotation")
    idempotency_key: str | None = Field(
        None, min_length=1, max_length=512, description="Same key (and payload): the same job again"
    )
    delay: Delay | None = Field(None, description="Seconds before it may run")
    run_at: AwareDatetime | None = Field(
        None, description="Run no sooner than this instant (with a time zone)"
    )
    queue: str | None = Field(None, pattern=QUEUE_PATTERN, description="Override the handler's logical queue")
    tenant: str | None = Field(
        None, min_length=1, max_length=256, description="Recorded; part of the key's scope"
    )
    priority: Literal["high", "normal", "low"] | None = Field(
        None, description="Level on a queue with priority levels; default: the type's, else normal"
    )
    serialize_key: str | None = Field(
        None,
        min_length=1,
        max_length=128,
        description="Jobs with one key run one at a time, in enqueue order",
    )
    unique: Literal["while_active", "replace"] | None = Field(
        None,
        description="while_active: the key names the live job only (once it finished, a new job); replace: the "
        "newest enqueue runs and the job the key named is cancelled, mid-run too (needs idempotency_key)",
    )
    dedupe_for: Window | None = Field(None, description="Seconds: the key names one job per aligned window")
    throttle: Window | None = Field(
        None, description="Seconds: the first job of the key's aligned window wins"
    )
    debounce: Window | None = Field(
        None,
        description="Seconds: the last payload of a quiet period this long wins",
    )
    debounce_max: Window | None = Field(
        None,
        description="Seconds: a debounced key's job starts at the latest this long after its first enqueue",
    )
    notify: NotifyTarget | None = Field(
        None, description="Where the job's end is told, once, after it succeeded, died or was cancelled"
    )
    tags: dict[TagName, TagValue] = tags_field()

    @field_validator("payload")
    @classmethod
    def _finite(cls, value: Any) -> Any:
        return check_json(value)

    @model_validator(mode="after")
    def _one_mode(self) -> EnqueueRequest:
        modes = [self.unique, self.dedupe_for, self.throttle, self.debounce]
        if sum(m is not None for m in modes) > 1:
            raise ValueError("give one of unique, dedupe_for, throttle and debounce")
        if self.debounce_max is not None and self.debounce is None:
            raise ValueError("debounce_max needs debounce")
        if any(m is not None for m in modes) and self.idempotency_key is None:
            raise ValueError("a dedup mode needs an idempotency_key")
        return self

    @field_validator("run_at")
    @classmethod
    def _one_start(cls, value: datetime | None, info: ValidationInfo) -> datetime | None:
        if value is not None and info.data.get("delay") is not None:
            raise ValueError("give delay or run_at, not both")
        return value


class EnqueueResponse(BaseModel):
    """What ``POST /jobs`` answers (202): the job as recorded, and when it may start."""

    id: str
    type: str
    queue: str
    #: The record's status: ``queued`` for a new job; a repeated idempotency key gives the job's own.
    status: str
    run_at: datetime = Field(description="The earliest the job may start")
    estimated_start: datetime | None = Field(
        description="run_at for a job not yet due; the enqueue time when nothing else waited in its "
        "queue; now + the messages ahead over the drain rate the API measured (see estimate); null "
        "when there is no rate yet (a first sample, or nothing drained lately) or the job is no "
        "longer waiting"
    )
    deduplicated: bool = Field(
        False, description="unique=while_active: the key named a live job, this one (no new job)"
    )
    replaced: str | None = Field(
        None, description="unique=while_active: the finished job the key named before this new one"
    )
    queue_depth: int | None = Field(
        description="Messages visible in the job's queue right after the enqueue (approximate, may "
        "count this one); null when the job is not due yet or no longer waiting"
    )
    estimate: EstimateBasis | None = Field(
        default=None, description="How estimated_start was computed; null when there is none"
    )


class EstimateBasis(BaseModel):
    """How ``estimated_start`` was computed (``sqsjobs.api.drain``)."""

    #: ``run_at`` (not due yet), ``nothing_ahead``, or ``depth_over_drain_rate``.
    method: Literal["run_at", "nothing_ahead", "depth_over_drain_rate"]
    #: Visible messages ahead of the job when it was enqueued.
    ahead: int | None = None
    #: Messages per second the queue drained, over ``observed_s`` seconds and ``samples`` depth reads.
    drain_per_s: float | None = None
    observed_s: float | None = None
    samples: int | None = None


class CancelResponse(BaseModel):
    """``DELETE /jobs/{job_id}``."""

    id: str
    result: Literal["cancelled", "requested"] = Field(
        description="cancelled: it will not run; requested: it is running and stops at its next heartbeat"
    )


class RetryRequest(BaseModel):
    """``POST /jobs/{job_id}/retry``: an optional corrected payload."""

    model_config = _FORBID

    payload: Any = Field(
        None,
        description="Replaces the job's payload (validated by its handler; same job id and key). "
        "Leave it out to retry with the job's own",
    )

    @field_validator("payload")
    @classmethod
    def _finite(cls, value: Any) -> Any:
        return check_json(value)


class RetryResponse(BaseModel):
    """The job as queued again (``sqsjobs jobs retry --json``)."""

    id: str
    status: str
    queue: str
    max_attempts: int | None
    payload_hash: str | None
    payload_version: int


class ReplayRequest(BaseModel):
    """``POST /dlq/replay``: which dead-lettered jobs to requeue; a dry run unless ``dry_run`` is false."""

    model_config = _FORBID

    type: list[str] = Field(default_factory=list, description="Only these job types")
    error_class: list[str] = Field(default_factory=list, description="Only these error classes")
    job_id: list[str] = Field(default_factory=list, description="Only these jobs (or DLQ message ids)")
    queue: list[str] = Field(default_factory=list, description="These logical queues' DLQs (default: all)")
    since: str | None = Field(
        None, description="Only messages dead-lettered this recently (30m, 2h, 7d, or an instant)"
    )
    dry_run: StrictBool = Field(True, description="Report what would happen and change nothing")
    limit: int | None = Field(100, ge=1, description="Requeue at most this many jobs (null: no limit)")
    rate: Rate | None = Field(None, description="At most this many requeues per second")
    payload: Any = Field(None, description="A corrected payload for every job replayed; needs job_id or type")

    @field_validator("queue")
    @classmethod
    def _queues(cls, value: list[str]) -> list[str]:
        bad = [q for q in value if not is_queue(q)]
        if bad:
            raise ValueError(f"not logical queue names: {bad}")
        return value

    @field_validator("since")
    @classmethod
    def _since(cls, value: str | None) -> str | None:
        if value is not None:
            since_seconds(value, datetime.now(UTC).timestamp())
        return value

    @field_validator("payload")
    @classmethod
    def _selected(cls, value: Any, info: ValidationInfo) -> Any:
        # Runs only when a payload is given (fields before it are in info.data, if they validated).
        if not (info.data.get("job_id") or info.data.get("type")):
            raise ValueError(
                "payload replaces the payload of every job replayed: select them with job_id or type"
            )
        return check_json(value)


def is_queue(name: str) -> bool:
    """True for a logical queue name (``QUEUE_PATTERN``)."""
    return re.fullmatch(QUEUE_PATTERN, name) is not None
