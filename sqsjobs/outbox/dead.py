"""Outbox rows the relay cannot enqueue: which refusals are permanent, and the table they are set aside in.

A pass's ``enqueue_many`` can fail for the whole outbox (DynamoDB or SQS unreachable, throttled, a
broken connection: the rows stay and the next pass tries again) or for one row that no later pass
will enqueue either. ``refusal`` tells them apart: it names the reason of a permanent refusal and
returns None for everything else, so an error it does not know keeps the rows (a stalled outbox
raises the lag alarm; a wrongly set-aside row would only be noticed by its missing job).

Permanent, by the typed errors (``sqsjobs.errors``):

- ``HandlerNotFound``: a type the relay's App does not register, written without ``queue=``;
- ``PayloadError``: the payload fails the relay's model (an upcast too), or is over ``max_payload_bytes``;
- ``IdempotencyConflict``: the key already names a job with another payload;
- ``RoutingError``, ``ExpiryInvalid`` and a ``ValueError``/``TypeError``/``KeyError`` while the row's
  request is built (a row written by hand or by another version): building is pure, it fails again;
- an AWS answer that a named resource does not exist: the row's queue, or the payload bucket.

The row is set aside, not deleted: it moves to ``sqsjobs_outbox_dead`` with its reason, in the pass's
transaction (so it is never both gone from the outbox and missing from the dead table), and
``sqsjobs outbox retry`` puts it back once its cause is fixed (docs/outbox.md).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from sqsjobs.errors import (
    AwsError,
    ExpiryInvalid,
    HandlerNotFound,
    IdempotencyConflict,
    PayloadError,
    RoutingError,
)
from sqsjobs.outbox.tables import DEAD_TABLE, TABLE

if TYPE_CHECKING:
    from collections.abc import Sequence

#: AWS codes that say a resource the row names does not exist: no retry makes it appear.
MISSING_RESOURCE = ("AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist", "NoSuchBucket")

_COLUMNS = "job_id, job_type, payload, options, partition, created_at"
#: One statement moves one row: deleted from the outbox and inserted with its reason, or neither.
SET_ASIDE = f"""
WITH gone AS (DELETE FROM {TABLE} WHERE id = %(id)s RETURNING id, {_COLUMNS})
INSERT INTO {DEAD_TABLE} (outbox_id, {_COLUMNS}, reason, error)
SELECT id, {_COLUMNS}, %(reason)s, %(error)s::jsonb FROM gone
"""
#: Back into the outbox with a new id (the end of its partition) and its first write's time (an
#: ``expires_after`` still counts from it).
_RETRY = f"""
WITH back AS (DELETE FROM {DEAD_TABLE} WHERE %(all)s OR id = ANY(%(ids)s) RETURNING id, {_COLUMNS})
INSERT INTO {TABLE} ({_COLUMNS}) SELECT {_COLUMNS} FROM back ORDER BY id
"""
_LIST = f"""
SELECT id, outbox_id, job_id, job_type, partition, reason, error, created_at, dead_at
FROM {DEAD_TABLE} ORDER BY id LIMIT %(limit)s
"""


def refusal(exc: BaseException) -> str | None:
    """The reason a row can never be enqueued as it is, or None when the failure may pass."""
    if isinstance(exc, HandlerNotFound):
        return f"unknown job type: {exc}"
    if isinstance(exc, PayloadError):
        return f"payload refused ({type(exc).__name__}): {exc}"
    if isinstance(exc, IdempotencyConflict):
        return f"idempotency key already names another payload's job: {exc}"
    if isinstance(exc, AwsError):
        return f"{exc.code}: {exc}" if exc.code in MISSING_RESOURCE else None
    if isinstance(exc, RoutingError | ExpiryInvalid | ValueError | TypeError | KeyError):
        return f"row cannot make a job ({type(exc).__name__}): {exc}"
    return None


def error_json(exc: BaseException) -> str:
    """The refusal's class and message, as the dead row's ``error`` column keeps them."""
    return json.dumps({"class": type(exc).__name__, "message": str(exc)[:1000]})


def dead_count(conn: Any) -> int:
    """Rows set aside (a psycopg connection)."""
    row = conn.execute(f"SELECT count(*) FROM {DEAD_TABLE}").fetchone()
    return int(row[0])


def dead_rows(conn: Any, limit: int = 100) -> list[dict[str, Any]]:
    """The set-aside rows, oldest first: what ``sqsjobs outbox dead`` prints."""
    names = ("id", "outbox_id", "job_id", "job_type", "partition", "reason", "error", "created_at", "dead_at")
    return [dict(zip(names, r, strict=True)) for r in conn.execute(_LIST, {"limit": limit}).fetchall()]


def retry(conn: Any, ids: Sequence[int] = (), *, every: bool = False) -> int:
    """Put set-aside rows (by dead-table id, or ``every`` one) back into the outbox; how many moved.

    Commits (the relay is woken by the insert trigger at the commit).
    """
    with conn.transaction():
        moved = conn.execute(_RETRY, {"all": every, "ids": list(ids)}).rowcount
    return int(moved)
