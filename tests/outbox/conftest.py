"""Fixtures of the outbox tests: one real Postgres per xdist worker, one fresh database per test."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from sqsjobs.outbox import migrate
from tests.outbox.postgres import Postgres, binaries


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    if binaries() is None:
        reason = "Debian's postgresql is not installed (make test installs it: mk/postgres.mk)"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    server = Postgres()
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture
def dsn(postgres: Postgres) -> str:
    """A new database with the outbox table migrated, and an ``orders`` table to write beside it."""
    url = postgres.create_database(f"t{uuid.uuid4().hex[:12]}")
    migrate(url)
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE orders (id text PRIMARY KEY, total int NOT NULL)")
    return url
