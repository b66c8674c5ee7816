"""The outbox table in the application's Postgres database, and the statement that creates it.

One row is one job written in the caller's transaction and not yet moved to SQS and DynamoDB by the
relay (``sqsjobs.outbox.relay``). The row carries what ``App.enqueue`` needs: the type, the payload
as JSON, the enqueue options (the idempotency key among them, from which the job id is derived), a
partition (the relay moves one partition's rows in id order) and the insert time (the relay's lag is
measured from it). A row the relay cannot enqueue, ever, moves to ``DEAD_TABLE`` with its reason
(``sqsjobs.outbox.dead``). An insert trigger notifies ``CHANNEL``: Postgres delivers a NOTIFY only when its
transaction commits, so a rolled-back job wakes nobody and a committed one wakes the relay at once.
"""

from __future__ import annotations

from typing import Any

#: The table every helper writes and the relay reads.
TABLE = "sqsjobs_outbox"
#: Rows the relay set aside: a refusal no retry can change (``sqsjobs.outbox.dead``), with its reason.
DEAD_TABLE = "sqsjobs_outbox_dead"
#: The LISTEN/NOTIFY channel the insert trigger signals on each committed insert statement.
CHANNEL = "sqsjobs_outbox"

#: Idempotent: ``sqsjobs outbox migrate`` may run at every deploy. ``clock_timestamp()`` rather than
#: ``now()``: ``now()`` is the transaction's start, which would count a long transaction's own
#: duration as relay lag. The index serves the relay's "oldest rows of these partitions" reads. The
#: dead table keeps a set-aside row whole (its outbox id, its first write's time) beside the reason.
MIGRATION = f"""
CREATE TABLE IF NOT EXISTS {TABLE} (
    id bigserial PRIMARY KEY,
    job_id text NOT NULL,
    job_type text NOT NULL,
    payload jsonb,
    options jsonb NOT NULL DEFAULT '{{}}'::jsonb,
    partition text NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX IF NOT EXISTS {TABLE}_partition_id ON {TABLE} (partition, id);
CREATE TABLE IF NOT EXISTS {DEAD_TABLE} (
    id bigserial PRIMARY KEY,
    outbox_id bigint NOT NULL,
    job_id text NOT NULL,
    job_type text NOT NULL,
    payload jsonb,
    options jsonb NOT NULL,
    partition text NOT NULL,
    created_at timestamptz NOT NULL,
    reason text NOT NULL,
    error jsonb,
    dead_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE OR REPLACE FUNCTION {TABLE}_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('{CHANNEL}', '');
    RETURN NULL;
END
$$;
CREATE OR REPLACE TRIGGER {TABLE}_notify AFTER INSERT ON {TABLE}
    FOR EACH STATEMENT EXECUTE FUNCTION {TABLE}_notify();
"""


def migrate(dsn: str) -> None:
    """Create the outbox table, its index and its notify trigger in the database at ``dsn`` (psycopg 3)."""
    import psycopg  # the optional extra sqsjobs[postgres]: imported only where a database is used

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(MIGRATION)


def count(conn: Any) -> int:
    """Rows waiting in the outbox (a psycopg connection): what an operator or a test reads."""
    row = conn.execute(f"SELECT count(*) FROM {TABLE}").fetchone()
    return int(row[0])
