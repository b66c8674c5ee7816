"""The outbox's writes, through each driver, in the caller's transaction; one relay pass moves them.

A real Postgres (tests/outbox/postgres.py) and MiniStack: a committed row becomes a job record and a
message; a rolled-back one leaves nothing; the id the write returns is the job's id.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import timedelta

import psycopg
import pytest
from pydantic import BaseModel
from sqlalchemy import create_engine, text
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session

from sqsjobs import App, DedupeFor, JobContext, JobNotFound, JobStatus
from sqsjobs.errors import HandlerNotFound, PayloadInvalid
from sqsjobs.outbox import OutboxRelay, write_job
from sqsjobs.outbox.dead import dead_rows
from sqsjobs.outbox.relay import LOCK_SPACE, in_order
from sqsjobs.outbox.tables import CHANNEL, count


class Order(BaseModel):
    order_id: str


def outbox_app(make_app, ministack_url) -> App:
    app = make_app(ministack_url)

    @app.job("orders.ship", queue="default")
    def ship(payload: Order, ctx: JobContext) -> str:
        return payload.order_id

    app.provision()
    return app


@pytest.fixture
def app(make_app, ministack_url):
    return outbox_app(make_app, ministack_url)


def relay_of(app: App, dsn: str, **options) -> OutboxRelay:
    return OutboxRelay(dsn, app.enqueue_many, **options)


def rows(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        return count(conn)


def sqlalchemy_url(dsn: str, driver: str) -> str:
    parts = dict(p.split("=", 1) for p in dsn.split())
    return f"postgresql+{driver}://postgres@/{parts['dbname']}?host={parts['host']}"


def test_a_committed_psycopg_write_becomes_the_job_its_id_names_and_a_rollback_leaves_nothing(app, dsn):
    with psycopg.connect(dsn) as conn:
        with conn.transaction():
            conn.execute("INSERT INTO orders VALUES ('o1', 10)")
            kept = app.enqueue("orders.ship", {"order_id": "o1"}, connection=conn)
        with conn.transaction():
            conn.execute("INSERT INTO orders VALUES ('o2', 20)")
            dropped = app.enqueue("orders.ship", {"order_id": "o2"}, connection=conn)
            raise psycopg.Rollback()
    assert rows(dsn) == 1
    relay = relay_of(app, dsn)
    assert relay.move_once() == 1
    relay.close()
    assert rows(dsn) == 0
    job = app.get(kept)
    assert (job.type, job.status) == ("orders.ship", JobStatus.QUEUED)
    with pytest.raises(JobNotFound):
        app.get(dropped)


def test_the_callers_idempotency_key_names_the_same_job_as_a_direct_enqueue(app, dsn):
    with psycopg.connect(dsn) as conn, conn.transaction():
        job_id = app.enqueue("orders.ship", {"order_id": "o7"}, idempotency_key="order-7", connection=conn)
    relay = relay_of(app, dsn)
    relay.move_once()
    relay.close()
    assert app.enqueue("orders.ship", {"order_id": "o7"}, idempotency_key="order-7") == job_id


def test_sqlalchemy_sessions_and_connections_write_in_their_transaction(app, dsn):
    engine = create_engine(sqlalchemy_url(dsn, "psycopg"))
    try:
        with Session(engine) as session, session.begin():
            session.execute(text("INSERT INTO orders VALUES ('s1', 1)"))
            from_session = app.enqueue("orders.ship", {"order_id": "s1"}, connection=session)
        with engine.connect() as connection:
            app.enqueue("orders.ship", {"order_id": "c1"}, connection=connection)
            connection.rollback()
            from_connection = app.enqueue("orders.ship", {"order_id": "c2"}, connection=connection)
            connection.commit()
    finally:
        engine.dispose()
    relay = relay_of(app, dsn)
    assert relay.move_once() == 2
    relay.close()
    assert {app.get(from_session).status, app.get(from_connection).status} == {JobStatus.QUEUED}


def test_async_psycopg_and_sqlalchemy_async_sessions_write_in_their_transaction(app, dsn):
    async def write() -> list[str]:
        ids = []
        async with await psycopg.AsyncConnection.connect(dsn) as conn:
            async with conn.transaction():
                ids.append(await app.aenqueue("orders.ship", {"order_id": "a1"}, connection=conn))
            async with conn.transaction():
                await app.aenqueue("orders.ship", {"order_id": "a2"}, connection=conn)
                raise psycopg.Rollback()
        engine = create_async_engine(sqlalchemy_url(dsn, "psycopg_async"))
        try:
            async with AsyncSession(engine) as session, session.begin():
                ids.append(await app.aenqueue("orders.ship", {"order_id": "a3"}, connection=session))
        finally:
            await engine.dispose()
        return ids

    ids = asyncio.run(write())
    relay = relay_of(app, dsn)
    assert relay.move_once() == 2
    relay.close()
    assert [app.get(i).status for i in ids] == [JobStatus.QUEUED, JobStatus.QUEUED]


def test_the_payload_is_validated_before_the_commit_and_a_thin_producer_names_the_queue(app, dsn, make_app):
    thin = App(app.name, endpoint_url=app.settings.endpoint_url)
    with psycopg.connect(dsn) as conn:
        with pytest.raises(PayloadInvalid), conn.transaction():
            app.enqueue("orders.ship", {"order_id": 5}, connection=conn)
        with pytest.raises(HandlerNotFound), conn.transaction():
            thin.enqueue("orders.ship", {"order_id": "t"}, connection=conn)
        with pytest.raises(ValueError, match="does not take dedupe="), conn.transaction():
            app.enqueue(
                "orders.ship", {"order_id": "t"}, idempotency_key="k", dedupe=DedupeFor(60), connection=conn
            )
        with conn.transaction():
            thin_id = thin.enqueue("orders.ship", {"order_id": "t1"}, queue="default", connection=conn)
    relay = relay_of(app, dsn)
    assert relay.move_once() == 1
    relay.close()
    assert app.get(thin_id).status == JobStatus.QUEUED


def test_the_relay_is_notified_at_the_commit_only(app, dsn):
    with psycopg.connect(dsn, autocommit=True) as listener, psycopg.connect(dsn) as conn:
        listener.execute(f"LISTEN {CHANNEL}")
        with conn.transaction():
            app.enqueue("orders.ship", {"order_id": "n1"}, connection=conn)
            raise psycopg.Rollback()
        assert list(listener.notifies(timeout=0.5, stop_after=1)) == []
        with conn.transaction():
            app.enqueue("orders.ship", {"order_id": "n2"}, connection=conn)
            assert list(listener.notifies(timeout=0.2, stop_after=1)) == []  # not before the commit
        assert [n.channel for n in listener.notifies(timeout=10, stop_after=1)] == [CHANNEL]


def test_a_partition_another_relay_holds_is_left_alone_and_the_others_move(app, dsn):
    def write(conn, order_id: str, partition: str | None = None) -> str:
        return write_job(
            conn,
            app.registry,
            "orders.ship",
            {"order_id": order_id},
            settings=app.settings,
            now=time.time(),
            partition=partition,
        )

    with psycopg.connect(dsn) as conn, conn.transaction():
        held = [write(conn, f"h{i}", "p1") for i in range(3)]
        free = [write(conn, f"f{i}") for i in range(2)]
        # the partition's last row: behind the held head, so it must wait for it (order per partition)
        held.append(write(conn, "h3", "p1"))
    with psycopg.connect(dsn) as other, other.transaction():
        # another relay mid-pass: it holds the head row of p1 and the partition's lock
        other.execute("SELECT id FROM sqsjobs_outbox WHERE partition = 'p1' ORDER BY id LIMIT 1 FOR UPDATE")
        relay = relay_of(app, dsn)
        assert relay.move_once() == 2
        relay.close()
    assert [app.get(i).status for i in free] == [JobStatus.QUEUED] * 2
    for job_id in held:
        with pytest.raises(JobNotFound):
            app.get(job_id)
    relay = relay_of(app, dsn)
    assert relay.move_once() == 4
    relay.close()
    assert {app.get(i).status for i in held} == {JobStatus.QUEUED}
    assert LOCK_SPACE  # the relays' advisory lock space is a fixed, documented constant


def test_in_order_stops_a_partition_at_the_first_row_this_pass_does_not_hold():
    from datetime import UTC, datetime

    from sqsjobs.outbox.relay import Row

    def row(i: int, p: str) -> Row:
        return Row(i, p, "t", None, {"idempotency_key": uuid.uuid4().hex}, datetime.now(UTC))

    held = [row(1, "a"), row(2, "b"), row(4, "a"), row(5, "c")]
    visible = [(1, "a"), (2, "b"), (3, "a"), (4, "a"), (5, "c")]
    assert [r.id for r in in_order(held, visible, {"a", "b"})] == [1, 2]
    assert [r.id for r in in_order(held, [(0, "a"), *visible], {"a", "b", "c"})] == [2, 5]


def test_a_refused_row_is_set_aside_and_the_good_rows_go_in_batches_in_their_order(app, dsn):
    """The relay halves a refused batch: the good rows still go several to a call, in id order.

    A row that waited past its ``expires_after`` is no refusal: it becomes its job, already expired.
    """
    writer = App(app.name, endpoint_url=app.settings.endpoint_url)
    writer.job("orders.ship", queue="default")(lambda payload, ctx: None)  # no model: any payload
    with psycopg.connect(dsn) as conn, conn.transaction():
        ids = [
            writer.enqueue("orders.ship", {"order_id": f"g{i}"} if i != 2 else {"order": 2}, connection=conn)
            for i in range(8)
        ]
        late = writer.enqueue("orders.ship", {"order_id": "late"}, expires_after=0.001, connection=conn)
    calls: list[list[str]] = []

    def recording(requests):
        calls.append([r.payload.get("order_id", "bad") for r in requests])
        return app.enqueue_many(requests)

    relay = OutboxRelay(dsn, recording)
    assert relay.move_once() == 9
    relay.close()
    handed = [c for c in calls if "bad" not in c]  # the calls that enqueued
    assert [o for c in handed for o in c] == ["g0", "g1", "g3", "g4", "g5", "g6", "g7", "late"]
    assert len(handed) < 8 and calls[0] == ["g0", "g1", "bad", "g3", "g4", "g5", "g6", "g7", "late"]
    assert [app.get(i).status for i in ids[:2] + ids[3:]] == [JobStatus.QUEUED] * 7
    with pytest.raises(JobNotFound):
        app.get(ids[2])
    with psycopg.connect(dsn) as conn:
        (dead,) = dead_rows(conn)
    assert (dead["job_id"], dead["partition"], dead["error"]["class"]) == (ids[2], "", "PayloadInvalid")
    expired = app.get(late)  # its deadline passed in the outbox: the first claim will expire it
    assert expired.start_by is not None and expired.start_by <= expired.created_at + timedelta(seconds=1)
    assert rows(dsn) == 0
