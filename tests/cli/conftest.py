"""Fixtures for the CLI tests: apps with real data produced by a worker run on MiniStack."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field

import pytest
from typer.testing import CliRunner

from sqsjobs import App
from sqsjobs.cli.main import cli
from sqsjobs.testing import all_finished, work_until
from tests.cli import jobs_app
from tests.conftest import FAST

APP_PATH = "tests.cli.jobs_app:current"


@dataclass
class Run:
    """One CLI invocation's outcome."""

    code: int
    out: str
    err: str

    @property
    def json(self):
        return json.loads(self.out)


@dataclass
class World:
    """An app with jobs that succeeded, retried, died, and one still waiting."""

    app: App
    endpoint: str
    ok: list[str] = field(default_factory=list)
    flaky: str = ""
    dead_value: list[str] = field(default_factory=list)
    dead_perm: str = ""
    waiting: str = ""
    tenant_job: str = ""

    @property
    def dead(self) -> list[str]:
        return [*self.dead_value, self.dead_perm]

    def cli(self, *args: str, app: App | None = None) -> Run:
        return invoke(app or self.app, self.endpoint, *args)


def invoke(app: App, endpoint: str, *args: str) -> Run:
    jobs_app.current = app
    argv = [*args, "--app", APP_PATH, "--endpoint-url", endpoint]
    result = CliRunner().invoke(cli, argv, env={"COLUMNS": "250"})
    # Never a traceback: anything but a clean exit is a test failure here.
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return Run(result.exit_code, result.stdout, result.stderr)


def new_app(endpoint: str, name: str | None = None, *, strict: bool = False) -> App:
    app = App(name or f"c{uuid.uuid4().hex[:10]}", endpoint_url=endpoint, **FAST)
    return jobs_app.register(app, strict=strict)


def populate(endpoint: str, *, mails: int = 2, perm: bool = True, extra: bool = True) -> World:
    """Enqueue, then run a worker until every job but the delayed one is finished."""
    jobs_app.BROKEN["mail"] = True
    app = new_app(endpoint)
    app.provision()
    world = World(app, endpoint)
    if extra:
        world.ok = [app.enqueue("orders.ok", {"order_id": f"o-{i}"}) for i in range(2)]
        world.tenant_job = app.enqueue("orders.ok", {"order_id": "o-t"}, tenant="acme")
        world.ok.append(world.tenant_job)
        world.flaky = app.enqueue("orders.flaky", {"order_id": "o-f"})
        world.waiting = app.enqueue("orders.ok", {"order_id": "o-later"}, delay=600)
    world.dead_value = [app.enqueue("mail.send", {"to": f"user{i}@example.com"}) for i in range(mails)]
    if perm:
        world.dead_perm = app.enqueue("mail.send", {"to": "perm@example.com"})
    finished = [*world.ok, *([world.flaky] if world.flaky else []), *world.dead_value]
    finished += [world.dead_perm] if world.dead_perm else []
    if finished:
        work_until(app, all_finished(app, finished), timeout_s=30)
    return world


@pytest.fixture(scope="package")
def world(ministack_url):
    """Read-only tests (all of tests/cli) share one populated app (made before the per-test env scrub, so set creds here)."""
    with pytest.MonkeyPatch.context() as mp:
        for key in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "SQSJOBS_APP", "SQSJOBS_ENDPOINT_URL"):
            mp.delenv(key, raising=False)
        mp.setenv("AWS_ACCESS_KEY_ID", "testing")
        mp.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        mp.setenv("AWS_DEFAULT_REGION", "us-east-1")
        mp.setenv("SQSJOBS_LOG_LEVEL", "WARNING")
        w = populate(ministack_url)
    yield w
    w.app.close()


@pytest.fixture
def fresh(ministack_url):
    """A populated app of the test's own (for tests that change things)."""
    made: list[World] = []

    def make(**kwargs) -> World:
        w = populate(ministack_url, **kwargs)
        made.append(w)
        return w

    yield make
    jobs_app.BROKEN["mail"] = True
    for w in made:
        w.app.close()
