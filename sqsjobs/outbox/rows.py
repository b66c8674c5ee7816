"""Writing a job into the outbox inside the caller's own transaction (psycopg 3, SQLAlchemy 2).

The helpers never commit: the row lands with the caller's business rows when the caller commits,
and disappears with them on a rollback. The job's id is known at once and stays the job's id: the
row carries an idempotency key (the caller's, or ``outbox:<random>``), and the relay enqueues with
that key, so ``codec.idempotent_job_id`` gives the same id whether the relay moves the row once or,
killed between its send and its delete, twice.

A payload is validated here when the registry has the type's handler (the error reaches the caller
before the commit); a thin producer without the handler writes a bare type name, and must name the
queue, as ``App.enqueue`` asks of it.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from sqsjobs.config import to_seconds
from sqsjobs.errors import ConfigurationError
from sqsjobs.outbox.tables import TABLE
from sqsjobs.producer import build_new_job
from sqsjobs.store import codec

if TYPE_CHECKING:
    from sqsjobs.config import Settings
    from sqsjobs.producer import JobRequest
    from sqsjobs.registry import Registry

T = TypeVar("T")
#: The outbox's writes, sans I/O: they yield ``(statement, parameters)`` for the caller's connection
#: to execute (``run_sql`` drives them through a sync one, ``arun_sql`` through an async one).
SqlFlow = Generator[tuple[Any, dict[str, str]], None, T]

#: Request fields the relay passes on to ``App.enqueue`` as they are (times become ``run_at`` and
#: ``expires_after_s``, seconds, fixed at the write).
PASSED_ON = ("queue", "tenant", "parent_id", "trace", "priority", "serialize_key", "tags")
#: Dedup modes make an id that depends on the enqueue time or on another job holding the key: the
#: id this helper returns at the write could then differ from the one the relay's enqueue makes.
UNSUPPORTED = ("dedupe",)

_COLUMNS = ("job_id", "job_type", "payload", "options", "partition")
#: One statement per driver family: psycopg's ``%(name)s`` and SQLAlchemy ``text()``'s ``:name``.
PSYCOPG_INSERT = (
    f"INSERT INTO {TABLE} ({', '.join(_COLUMNS)}) VALUES "
    "(%(job_id)s, %(job_type)s, %(payload)s::jsonb, %(options)s::jsonb, %(partition)s)"
)
SQLALCHEMY_INSERT = (
    f"INSERT INTO {TABLE} ({', '.join(_COLUMNS)}) VALUES "
    "(:job_id, :job_type, CAST(:payload AS jsonb), CAST(:options AS jsonb), :partition)"
)


@dataclass(frozen=True)
class OutboxRow:
    """One outbox row as the helpers insert it (JSON columns as canonical JSON text)."""

    job_id: str
    job_type: str
    payload: str
    options: str
    partition: str

    def params(self) -> dict[str, str]:
        """The insert's bind parameters."""
        return dataclasses.asdict(self)


def outbox_row(
    request: JobRequest[Any], registry: Registry, settings: Settings, *, now: float, partition: str | None
) -> OutboxRow:
    """Validate ``request`` exactly as ``App.enqueue`` does and turn it into a row; ``now`` fixes a delay.

    The enqueue's own validation (``build_new_job``: the payload against the handler, the route, the
    size) runs here, so a row the relay cannot enqueue fails the caller's transaction instead of
    blocking its partition; it also makes the job id, from the idempotency key the row keeps.

    ``partition`` defaults to the request's ``serialize_key`` (jobs run one at a time per key, so the
    relay hands them over in their commit order), else the one shared partition ``""``.
    """
    for name in UNSUPPORTED:
        if getattr(request, name) is not None:
            raise ValueError(f"the outbox does not take {name}= (its job id must be known at the write)")
    job_type = registry.name_of(request.type)
    spec = registry.get(job_type) if job_type in registry else None
    if spec is not None and spec.dedupe is not None:
        raise ValueError(
            f"{job_type!r} has a dedup mode: enqueue it with App.enqueue, not through the outbox"
        )
    key = request.idempotency_key or f"outbox:{uuid.uuid4().hex}"
    job = build_new_job(
        dataclasses.replace(request, idempotency_key=key), registry=registry, settings=settings, now=now
    )
    options: dict[str, Any] = {"idempotency_key": key}
    options.update({n: getattr(request, n) for n in PASSED_ON if getattr(request, n) is not None})
    if request.run_at is not None or request.delay is not None:
        options["run_at"] = job.run_at
    if request.expires_after is not None:
        options["expires_after_s"] = to_seconds(request.expires_after)
    return OutboxRow(
        job_id=job.id,
        job_type=job_type,
        payload=codec.canonical_json(job.payload),
        options=codec.canonical_json(options),
        partition=partition if partition is not None else request.serialize_key or "",
    )


def _statement(conn: Any) -> Any:
    """The insert in ``conn``'s driver's dialect of bind parameters."""
    module = type(conn).__module__
    if module.startswith("psycopg2"):
        raise ConfigurationError(
            "the outbox writes through psycopg 3 (`pip install 'sqsjobs[postgres]'`), not psycopg2: pass a "
            "psycopg 3 connection, a SQLAlchemy 2 Session or Connection (any driver), or use Django's "
            "backend (sqsjobs.django), which writes through Django's own cursor"
        )
    # psycopg 3's Connection, AsyncConnection or their cursors; Django's CursorWrapper (its PostgreSQL
    # backend passes the same pyformat parameters to its driver, and logs the statement as Django does)
    if module.startswith(("psycopg", "django.db")):
        return PSYCOPG_INSERT
    if module.startswith("sqlalchemy"):  # Session, AsyncSession, Connection, AsyncConnection
        from sqlalchemy import text

        return text(SQLALCHEMY_INSERT)
    raise TypeError(
        f"the outbox writes through a psycopg 3 connection or cursor, or a SQLAlchemy 2 Session or "
        f"Connection (sync or async); got {type(conn).__module__}.{type(conn).__qualname__}"
    )


def insert_flow(conn: Any, row: OutboxRow) -> SqlFlow[str]:
    """Insert ``row`` in the transaction ``conn`` has open (never committed here); returns the job's id."""
    yield _statement(conn), row.params()
    return row.job_id


def run_sql(conn: Any, flow: SqlFlow[T]) -> T:
    """Drive ``flow`` through a sync connection or session: each statement it yields is executed."""
    try:
        statement = next(flow)
        while True:
            conn.execute(*statement)
            statement = flow.send(None)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


async def arun_sql(conn: Any, flow: SqlFlow[T]) -> T:
    """Drive ``flow`` through an async connection or session."""
    try:
        statement = next(flow)
        while True:
            await conn.execute(*statement)
            statement = flow.send(None)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
