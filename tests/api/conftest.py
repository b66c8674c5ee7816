"""Fixtures for the HTTP API tests: the CLI tests' job types on MiniStack, served over real HTTP.

``world`` is an app a worker ran (succeeded, dead and waiting jobs, DLQ messages), shared by the
read-only tests with one server; tests that change things make their own (``fresh_api``).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from sqsjobs import App
from tests.api.helpers import client, serving
from tests.cli import jobs_app
from tests.cli.conftest import World, fake_aws_env, populate
from tests.conftest import FAST

TOKEN = "test-token-7f3a"


@dataclass
class Served:
    """A populated app and its API."""

    world: World
    url: str
    http: httpx.Client


@pytest.fixture(scope="package")
def served(ministack_url) -> Iterator[Served]:
    with fake_aws_env():
        world = populate(ministack_url)
    with serving(world.app, token=TOKEN) as url, client(url, TOKEN) as http:
        yield Served(world, url, http)
    world.app.close()


@pytest.fixture
def fresh_api(ministack_url):
    """A populated app of the test's own, served; call it with ``populate``'s options."""
    with contextlib.ExitStack() as stack:

        def make(**options) -> Served:
            world = populate(ministack_url, **options)
            stack.callback(world.app.close)
            url = stack.enter_context(serving(world.app, token=TOKEN))
            return Served(world, url, stack.enter_context(client(url, TOKEN)))

        yield make


@pytest.fixture(scope="module")
def own_api(ministack_url) -> Iterator[Served]:
    """An unpopulated app of the test module's own (its enqueues touch no other test's listings), served with a token."""
    with fake_aws_env():
        app = jobs_app.register(App(f"m{uuid.uuid4().hex[:10]}", endpoint_url=ministack_url, **FAST))
        app.provision()
    try:
        with serving(app, token=TOKEN) as url, client(url, TOKEN) as http:
            yield Served(World(app, ministack_url), url, http)
    finally:
        app.close()
