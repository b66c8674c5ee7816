r"""Where a job's message goes: the SQS queue of its logical queue, priority level or serialize key.

A logical queue is one standard SQS queue (``<prefix>-<queue>``, the *normal* level) unless the
settings opt it into more:

- ``priority_queues``: two more standard queues, ``<queue>-high`` and ``<queue>-low``, that share
  the logical queue's DLQ. Workers serve the higher level first (``sqsjobs.runtime.levels``).
- ``serialized_queues``: a FIFO queue, ``<queue>.fifo``, for jobs with a ``serialize_key`` (its
  ``MessageGroupId``: SQS holds a group while its head is in flight, so one key's jobs run one at a
  time, in enqueue order). Its redrive backstop is a FIFO DLQ, ``<queue>-dlq.fifo`` (SQS requires a
  FIFO queue's DLQ to be FIFO); a worker dead-letters with a reason into the logical queue's
  standard DLQ, as for every other job.

A *route* names one of these queues: the logical queue's name for its normal level (so every
existing mapping keyed by queue name keeps working), ``"<queue>\\0high"``, ``"<queue>\\0low"`` or
``"<queue>\\0fifo"`` otherwise. A queue that opts into nothing has one route and costs nothing more.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from typing import TYPE_CHECKING, Any, Literal

from sqsjobs.errors import RoutingError

if TYPE_CHECKING:
    from sqsjobs.config import Settings

Priority = Literal["high", "normal", "low"]
#: Priority levels, highest first.
PRIORITIES: tuple[Priority, ...] = ("high", "normal", "low")
NORMAL: Priority = "normal"
FIFO = "fifo"
_SEP = "\0"

#: What SQS takes as a ``MessageGroupId``: 1..128 characters, alphanumeric and punctuation.
#: https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SendMessage.html
_GROUP_ID = re.compile(r"""^[A-Za-z0-9!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~]{1,128}$""")


def route(queue: str, level: str = NORMAL) -> str:
    """The route of ``queue``'s ``level`` (``"high"``, ``"normal"``, ``"low"`` or ``"fifo"``)."""
    return queue if level == NORMAL else f"{queue}{_SEP}{level}"


def split(key: str) -> tuple[str, str]:
    """``(logical queue, level)`` of a route."""
    queue, _, level = key.partition(_SEP)
    return queue, level or NORMAL


def queue_name(settings: Settings, key: str) -> str:
    """The SQS queue name of a route."""
    queue, level = split(key)
    base = settings.queue_name(queue)
    if level == FIFO:
        return f"{base}.fifo"
    return base if level == NORMAL else f"{base}-{level}"


def fifo_dlq_name(settings: Settings, queue: str) -> str:
    """The redrive backstop of ``queue``'s FIFO queue."""
    return f"{settings.dlq_name(queue)}.fifo"


def routes_of(settings: Settings, queue: str) -> list[str]:
    """The routes a worker of ``queue`` polls, highest priority first (a FIFO queue ranks as normal)."""
    levels: list[str] = list(PRIORITIES) if queue in settings.priority_queues else [NORMAL]
    if queue in settings.serialized_queues:
        levels.insert(levels.index(NORMAL) + 1, FIFO)
    return [route(queue, level) for level in levels]


def rank(key: str) -> int:
    """0 for high, 1 for normal and FIFO, 2 for low: routes of one rank share their turns."""
    level = split(key)[1]
    return 1 if level == FIFO else PRIORITIES.index(level)


def job_route(queue: str, priority: str | None, serialize_key: str | None) -> str:
    """The route of a job (its record's or message's ``queue``, ``priority``, ``serialize_key``)."""
    if serialize_key is not None:
        return route(queue, FIFO)
    return route(queue, priority or NORMAL)


def check(settings: Settings, queue: str, priority: str | None, serialize_key: str | None) -> Priority | None:
    """Validate a job's routing options; the priority to record (None for normal: nothing stored).

    ``RoutingError`` says what to change: an unknown level, a level or key on a queue that was not
    opted in (its extra SQS queues do not exist), or both on one job.
    """
    if priority is not None and priority not in PRIORITIES:
        raise RoutingError(f"priority must be one of {', '.join(PRIORITIES)}; got {priority!r}")
    level = None if priority in (None, NORMAL) else priority
    if level is not None and serialize_key is not None:
        raise RoutingError(
            "a job takes a priority or a serialize_key, not both: one key's jobs run in enqueue order"
        )
    if level is not None and queue not in settings.priority_queues:
        raise RoutingError(
            f"queue {queue!r} has no priority levels: add it to the priority_queues setting "
            f"(SQSJOBS_PRIORITY_QUEUES) of producers and workers, and run `sqsjobs provision`"
        )
    if serialize_key is not None:
        if not isinstance(serialize_key, str) or not _GROUP_ID.match(serialize_key):
            raise RoutingError(
                f"serialize_key must be 1..128 ASCII letters, digits or punctuation (an SQS message "
                f"group id); got {serialize_key!r}"
            )
        if queue not in settings.serialized_queues:
            raise RoutingError(
                f"queue {queue!r} takes no serialize_key: add it to the serialized_queues setting "
                f"(SQSJOBS_SERIALIZED_QUEUES) of producers and workers, and run `sqsjobs provision`"
            )
    return level


def group_id(value: str) -> str:
    """``value`` as an SQS message group id: itself when SQS takes it, else a stable digest of it."""
    if _GROUP_ID.match(value):
        return value
    return "h-" + hashlib.sha256(value.encode()).hexdigest()[:40]


def message_fields(
    key: str, *, tenant: str | None, serialize_key: str | None, fair: bool = True
) -> dict[str, Any]:
    """The group fields of a SendMessage(Batch) entry for a job on route ``key``.

    FIFO: the key is the group, and a fresh deduplication id per send (the record already makes
    enqueue idempotent; a job id as dedup id would swallow a replay's hint sent within five minutes).
    Standard queue with a tenant: ``MessageGroupId = tenant`` (SQS fair queues), unless ``fair``
    (the ``fair_queues`` setting) is off. Nothing otherwise, so a plain job's message is what it always was.
    """
    if split(key)[1] == FIFO:
        assert serialize_key is not None
        return {"MessageGroupId": serialize_key, "MessageDeduplicationId": uuid.uuid4().hex}
    if tenant is not None and fair:
        return {"MessageGroupId": group_id(tenant)}
    return {}


def is_fifo(key: str) -> bool:
    """True for a FIFO route: no per-message delay (SQS refuses it), one group at a time."""
    return split(key)[1] == FIFO


def route_from_name(settings: Settings, sqs_name: str) -> str | None:
    """The route of an SQS queue name (a Lambda event's source), or None when it is not one of the App's.

    ``<prefix>-reports-high`` is the high level of ``reports`` only when ``reports`` has levels;
    otherwise it is a logical queue named ``reports-high``.
    """
    prefix = settings.queue_prefix + "-"
    if not sqs_name.startswith(prefix) or len(sqs_name) == len(prefix):
        return None
    rest = sqs_name[len(prefix) :]
    if rest.endswith(".fifo") and rest[: -len(".fifo")] in settings.serialized_queues:
        return route(rest[: -len(".fifo")], FIFO)
    for level in ("high", "low"):
        base = rest[: -len(level) - 1]
        if rest.endswith("-" + level) and base in settings.priority_queues:
            return route(base, level)
    return rest
