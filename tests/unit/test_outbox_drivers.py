"""Which connections the outbox writes through, and what it says to one it cannot use."""

from __future__ import annotations

import pytest

from sqsjobs import App
from sqsjobs.errors import ConfigurationError


class Psycopg2Connection:
    """Stands for psycopg2's connection class: only its module matters to the outbox."""

    def execute(self, *args: object) -> None:
        raise AssertionError("the outbox must refuse it before writing anything")


Psycopg2Connection.__module__ = "psycopg2.extensions"


def app() -> App:
    made = App("outboxed", endpoint_url="http://127.0.0.1:9")
    made.job("report.build")(lambda payload, ctx: None)
    return made


def test_a_psycopg2_connection_is_refused_with_what_to_use_instead():
    with pytest.raises(ConfigurationError) as refused:
        app().enqueue("report.build", {}, connection=Psycopg2Connection())
    assert "psycopg 3" in str(refused.value) and "not psycopg2" in str(refused.value)


def test_an_unknown_connection_is_a_type_error_naming_what_is_accepted():
    with pytest.raises(TypeError, match="psycopg 3 connection or cursor, or a SQLAlchemy 2 Session"):
        app().enqueue("report.build", {}, connection=object())
