"""A transactional outbox in the application's Postgres: a job commits or rolls back with its rows.

``write_job(conn, registry, "type", payload, ...)`` (sync) and ``awrite_job`` (async) insert the job
into the ``sqsjobs_outbox`` table through the caller's own psycopg 3 connection or SQLAlchemy 2
Session/Connection, inside the transaction the caller has open, and return the job's id at once.
``App.enqueue(..., connection=conn)`` calls them. The relay (``OutboxRelay``, ``sqsjobs outbox
relay``) moves committed rows to SQS and the job record; ``sqsjobs outbox migrate`` creates the table.
See docs/outbox.md.

Needs the optional extra ``sqsjobs[postgres]`` (psycopg 3; SQLAlchemy 2 for its sessions).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Unpack, cast

from sqsjobs.outbox.relay import OutboxRelay
from sqsjobs.outbox.rows import ainsert, insert, outbox_row
from sqsjobs.outbox.schema import CHANNEL, TABLE, migrate
from sqsjobs.producer import EnqueueOptions, JobRequest

if TYPE_CHECKING:
    from collections.abc import Coroutine

    from sqsjobs.config import Settings
    from sqsjobs.registry import Handler, Registry

__all__ = ["CHANNEL", "TABLE", "OutboxOptions", "OutboxRelay", "awrite_job", "migrate", "write_job"]


def write_job(
    conn: Any,
    registry: Registry,
    job_type: str | Handler,
    payload: Any = None,
    *,
    settings: Settings,
    now: float,
    partition: str | None = None,
    **options: Unpack[EnqueueOptions],
) -> str:
    """Insert one job into the outbox in ``conn``'s open transaction; return the id it will have.

    Args:
        conn: a psycopg 3 ``Connection`` (or cursor), or a SQLAlchemy 2 ``Session`` or ``Connection``.
        registry: validates the payload when it has the type (a thin producer passes ``queue=``).
        settings: the App's: the route and the payload's size are checked as an enqueue checks them.
        job_type: the type's name or its handler.
        payload: JSON-serialisable (after the handler's validation).
        now: the write's time, from which a ``delay`` counts.
        partition: the relay moves one partition's rows in id order (default: ``serialize_key``, else
            one shared partition).
        options: ``App.enqueue``'s options, less the dedup modes.
    """
    row = outbox_row(
        JobRequest(job_type, payload, **options), registry, settings, now=now, partition=partition
    )
    insert(conn, row)
    return row.job_id


async def awrite_job(
    conn: Any,
    registry: Registry,
    job_type: str | Handler,
    payload: Any = None,
    *,
    settings: Settings,
    now: float,
    partition: str | None = None,
    **options: Unpack[EnqueueOptions],
) -> str:
    """Async ``write_job``: a psycopg ``AsyncConnection`` or a SQLAlchemy ``AsyncSession``/``AsyncConnection``."""
    row = outbox_row(
        JobRequest(job_type, payload, **options), registry, settings, now=now, partition=partition
    )
    await ainsert(conn, row)
    return row.job_id


class OutboxOptions(EnqueueOptions, total=False):
    """``App.enqueue``'s options: ``EnqueueOptions`` and the ``connection`` that sends the job to the outbox."""

    connection: Any


def enqueue_options(options: OutboxOptions) -> EnqueueOptions:
    """``options`` without ``connection``: what a direct enqueue takes."""
    return cast("EnqueueOptions", {k: v for k, v in options.items() if k != "connection"})


def write_in(
    options: OutboxOptions,
    registry: Registry,
    settings: Settings,
    job_type: str | Handler,
    payload: Any,
    now: float,
) -> str | None:
    """``write_job`` when ``options`` has a ``connection`` (``App.enqueue``'s dispatch); else None."""
    conn = options.get("connection")
    if conn is None:
        return None
    return write_job(
        conn, registry, job_type, payload, settings=settings, now=now, **enqueue_options(options)
    )


def awrite_in(
    options: OutboxOptions,
    registry: Registry,
    settings: Settings,
    job_type: str | Handler,
    payload: Any,
    now: float,
) -> Coroutine[Any, Any, str] | None:
    """``awrite_job``, to await, when ``options`` has a ``connection`` (``App.aenqueue``'s dispatch); else None."""
    conn = options.get("connection")
    if conn is None:
        return None
    return awrite_job(
        conn, registry, job_type, payload, settings=settings, now=now, **enqueue_options(options)
    )
