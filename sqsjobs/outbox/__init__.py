"""A transactional outbox in the application's Postgres: a job commits or rolls back with its rows.

``write_job(conn, registry, "type", payload, ...)`` (sync) and ``awrite_job`` (async) insert the job
into the ``sqsjobs_outbox`` table through the caller's own psycopg 3 connection or SQLAlchemy 2
Session/Connection, inside the transaction the caller has open, and return the job's id at once.
Both drive one sans-I/O ``job_flow``, which yields the statement for the connection to execute.
``App.enqueue(..., connection=conn)`` calls them. The relay (``OutboxRelay``, ``sqsjobs outbox
relay``) moves committed rows to SQS and the job record; ``sqsjobs outbox migrate`` creates the table.
See docs/outbox.md.

Needs the optional extra ``sqsjobs[postgres]`` (plain psycopg 3: the application picks its libpq, e.g.
``psycopg[binary]``); SQLAlchemy 2 sessions are taken when the application uses SQLAlchemy.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar, Unpack, cast

from sqsjobs.outbox.relay import OutboxRelay
from sqsjobs.outbox.rows import SqlFlow, arun_sql, insert_flow, outbox_row, run_sql
from sqsjobs.outbox.tables import CHANNEL, TABLE, migrate
from sqsjobs.producer import EnqueueOptions, JobRequest

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine

    from sqsjobs.config import Settings
    from sqsjobs.registry import Handler, Registry

__all__ = [
    "CHANNEL",
    "TABLE",
    "OutboxOptions",
    "OutboxRelay",
    "arun_sql",
    "awrite_job",
    "job_flow",
    "migrate",
    "run_sql",
    "write_job",
]

P = ParamSpec("P")
T = TypeVar("T")


def job_flow(
    conn: Any,
    registry: Registry,
    job_type: str | Handler,
    payload: Any = None,
    *,
    settings: Settings,
    now: float,
    partition: str | None = None,
    **options: Unpack[EnqueueOptions],
) -> SqlFlow[str]:
    """Insert one job into the outbox in ``conn``'s open transaction; return the id it will have.

    Args:
        conn: a psycopg 3 ``Connection`` (or cursor), or a SQLAlchemy 2 ``Session`` or ``Connection``
            (``awrite_job``: a psycopg ``AsyncConnection`` or a SQLAlchemy ``AsyncSession``/``AsyncConnection``).
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
    return (yield from insert_flow(conn, row))


def _sync_driver(flow: Callable[Concatenate[Any, P], SqlFlow[T]]) -> Callable[Concatenate[Any, P], T]:
    @functools.wraps(flow)
    def write(conn: Any, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return run_sql(conn, flow(conn, *args, **kwargs))

    return write


def _async_driver(
    flow: Callable[Concatenate[Any, P], SqlFlow[T]],
) -> Callable[Concatenate[Any, P], Coroutine[Any, Any, T]]:
    @functools.wraps(flow)
    async def write(conn: Any, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await arun_sql(conn, flow(conn, *args, **kwargs))

    return write


#: ``job_flow`` through a sync connection or session.
write_job = _sync_driver(job_flow)
#: ``job_flow`` through an async connection or session.
awrite_job = _async_driver(job_flow)


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
) -> tuple[Any, SqlFlow[str]] | None:
    """The connection and its ``job_flow`` when ``options`` has a ``connection``; else None.

    ``App.enqueue`` drives the flow with ``run_sql``, ``App.aenqueue`` with ``arun_sql``.
    """
    conn = options.get("connection")
    if conn is None:
        return None
    return conn, job_flow(
        conn, registry, job_type, payload, settings=settings, now=now, **enqueue_options(options)
    )
