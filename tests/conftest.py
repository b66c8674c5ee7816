"""Suite-wide fixtures: a scrubbed environment, the emulators, and unique apps per test.

Backends (tests/emulators.py): MiniStack is the suite's emulator; the core invariant tests also run on the
serialised embedded moto that ``sqsjobs dev`` uses. ``SQSJOBS_TEST_ENDPOINT`` points the whole
suite at another endpoint instead (LocalStack, or real AWS with real credentials).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator

import pytest

from sqsjobs import App
from sqsjobs.local.emulator import EmbeddedMoto
from tests.emulators import MiniStack

EXTERNAL_ENDPOINT = os.environ.get("SQSJOBS_TEST_ENDPOINT")
_KEEP = {"SQSJOBS_MINISTACK_BIN"}

#: Short timings so failure paths finish in seconds; each test may override.
FAST = {
    "visibility_timeout_s": 5,
    "receive_wait_s": 1,
    "lease_s": 5.0,
    "drain_timeout_s": 5.0,
}


@pytest.fixture(autouse=True)
def clean_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    """No shell setting leaks in: AWS_* and SQSJOBS_* are removed, fake credentials set."""
    for key in list(os.environ):
        if key.startswith(("AWS_", "SQSJOBS_", "POWERTOOLS_")) and key not in _KEEP:
            if EXTERNAL_ENDPOINT and key.startswith("AWS_"):
                continue
            monkeypatch.delenv(key)
    # Every request the suite makes (worker subprocesses too) is checked against botocore's model.
    monkeypatch.setenv("SQSJOBS_VALIDATE_REQUESTS", "1")
    if not EXTERNAL_ENDPOINT:
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("SQSJOBS_LOG_LEVEL", "WARNING")


@pytest.fixture(scope="session")
def ministack_url() -> Iterator[str]:
    """The suite's emulator, one per session."""
    if EXTERNAL_ENDPOINT:
        yield EXTERNAL_ENDPOINT
        return
    server = MiniStack()
    try:
        yield server.start()
    finally:
        server.stop()


@pytest.fixture(scope="session")
def moto_url() -> Iterator[str]:
    """The embedded, serialised moto server of ``sqsjobs dev``."""
    if EXTERNAL_ENDPOINT:
        yield EXTERNAL_ENDPOINT
        return
    server = EmbeddedMoto()
    try:
        yield server.start()
    finally:
        server.stop()


@pytest.fixture(params=["ministack", "moto"])
def backend_url(request: pytest.FixtureRequest) -> str:
    """Both backends, for the invariant tests."""
    return str(request.getfixturevalue(f"{request.param}_url"))


@pytest.fixture
def make_app() -> Iterator[Callable[..., App]]:
    """Factory of uniquely named Apps (own table and queues) on an endpoint."""
    made: list[App] = []

    def make(endpoint: str, name: str | None = None, **settings: object) -> App:
        app = App(name or f"t{uuid.uuid4().hex[:10]}", endpoint_url=endpoint, **{**FAST, **settings})
        made.append(app)
        return app

    yield make
    for app in made:
        app.close()


@pytest.fixture
def results_app(ministack_url: str, make_app: Callable[..., App]) -> App:
    """A provisioned app with ``tests/apps/results``' job types: a worker process of that module runs its jobs,
    and enqueue validates payloads against the same handlers."""
    from tests.apps import results

    app = make_app(ministack_url)
    app.registry = results.app.registry
    app.provision()
    return app
