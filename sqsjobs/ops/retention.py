"""Doctor's retention checks: the queues keep a message long enough, and every job type fits in that.

A message is a job's witness only until SQS deletes it, ``MessageRetentionPeriod`` after its *first*
send: re-arming it (a retry's backoff, a deferral) does not make it younger. So a record whose
message was deleted under it says ``queued`` or ``retry_scheduled`` with nothing to bring it back
(docs/lifecycle.md, "Witnesses"). Two things are checked against ``Settings.message_retention_s``:

- each SQS queue of the App (levels, FIFO queues and DLQs included) keeps messages at least that
  long (a standard DLQ counts a message's age from its first send to the source queue);
- each job type's *message span* fits in it: how long one message of the type may have to live::

      first send ─ run ─ backoff ─ run ─ backoff ─ ... ─ run (max_attempts runs) ─▶
      │◀── each run up to the type's timeout, each backoff at its largest ──────▶│

  A backoff beyond the 12-hour visibility cap is held by the record and sent as a new message, so
  the span restarts there; a retry policy's ``max_age`` caps it (no retry starts later than that
  after the enqueue); a type's ``expires_after`` must fit too, or its message may be deleted before
  the job is due to expire.

The span is a bound from the type's settings: a handler's own ``Retry(delay_s=...)`` and a queue's
backlog add to a message's age and cannot be known in advance.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from sqsjobs.config import MAX_MESSAGE_RETENTION_S
from sqsjobs.ops.checks import Check
from sqsjobs.retry import MAX_VISIBILITY_S

if TYPE_CHECKING:
    from sqsjobs.config import Settings
    from sqsjobs.registry import HandlerSpec, Registry

_SETTING = "message_retention_s (SQSJOBS_MESSAGE_RETENTION_S)"


def duration(seconds: float) -> str:
    """``14 d``, ``3 h 20 min``, ``90 s``: a span as an operator reads it."""
    seconds = round(seconds)
    if seconds < 120:
        return f"{seconds} s"
    days, rest = divmod(seconds, 86_400)
    hours, rest = divmod(rest, 3600)
    minutes = rest // 60
    parts = [f"{days} d" if days else "", f"{hours} h" if hours else "", f"{minutes} min" if minutes else ""]
    return " ".join(p for p in parts if p) or "0 s"


def message_span_s(spec: HandlerSpec) -> float:
    """How long one message of ``spec``'s type may have to live (see the module docstring)."""
    policy = dataclasses.replace(spec.retry, jitter=False)  # each delay at its largest
    longest = span = 0.0
    for attempt in range(1, spec.max_attempts):
        span += spec.timeout_s
        delay = policy.delay_for(attempt)
        if delay > MAX_VISIBILITY_S:  # held by the record: the retry is a new message
            longest, span = max(longest, span), 0.0
        else:
            span += delay
    longest = max(longest, span + spec.timeout_s)
    if spec.retry.max_age_s is not None:
        longest = min(longest, spec.retry.max_age_s + spec.timeout_s)
    return longest


def queue_retention_check(name: str, attributes: dict[str, str], settings: Settings) -> Check:
    """One SQS queue's ``MessageRetentionPeriod`` against ``settings.message_retention_s``."""
    kept = int(attributes.get("MessageRetentionPeriod", 0) or 0)
    wanted = settings.message_retention_s
    if kept >= wanted:
        return Check(f"retention {name}", "ok", f"keeps messages {duration(kept)}")
    return Check(
        f"retention {name}",
        "fail",
        f"keeps messages {duration(kept)} < message_retention_s {duration(wanted)}: a job whose message "
        "is older is left with a record that says it is on its way and nothing to bring it",
        f"aws sqs set-queue-attributes --queue-url <{name}> --attributes MessageRetentionPeriod={wanted} "
        f"(or `sqsjobs provision`), or set SQSJOBS_MESSAGE_RETENTION_S={kept} if every type fits in that",
    )


def type_retention_checks(settings: Settings, registry: Registry) -> list[Check]:
    """Each job type's message span and ``expires_after`` against ``settings.message_retention_s``.

    One ``fail`` per type that does not fit, naming what to change; one ``ok`` line otherwise.
    """
    retention = settings.message_retention_s
    raise_it = (
        f", or raise {_SETTING} (at most {duration(MAX_MESSAGE_RETENTION_S)})"
        if retention < MAX_MESSAGE_RETENTION_S
        else ""
    )
    checks = []
    for spec in registry:
        span = message_span_s(spec)
        if span > retention:
            checks.append(
                Check(
                    f"retention {spec.name}",
                    "fail",
                    f"its message may have to live {duration(span)} ({spec.max_attempts} attempts of up to "
                    f"{duration(spec.timeout_s)}, backoffs up to {duration(spec.retry.max_delay_s)}) but the "
                    f"queues keep messages {duration(retention)}: a retry would find its message gone",
                    f"on @app.job({spec.name!r}, ...): lower max_attempts, timeout or the retry policy's "
                    f"max_delay_s, or set RetryPolicy(max_age_s=) at most {duration(max(retention - spec.timeout_s, 0))}"
                    f"{raise_it}",
                )
            )
        expires = spec.expires_after_s
        if expires is not None and expires > retention:
            checks.append(
                Check(
                    f"expiry {spec.name}",
                    "fail",
                    f"expires_after {duration(expires)} > the queues' retention {duration(retention)}: its "
                    "message may be deleted before the job is due to expire, leaving it queued",
                    f"on @app.job({spec.name!r}, ...): set expires_after to at most {duration(retention)}"
                    f"{raise_it}",
                )
            )
    if not checks:
        longest = max(registry, key=message_span_s, default=None)
        detail = f"every job type fits the queues' {duration(retention)}"
        if longest is not None:
            detail += f" (longest message span: {longest.name}, {duration(message_span_s(longest))})"
        checks.append(Check("retention job types", "ok", detail))
    return checks
