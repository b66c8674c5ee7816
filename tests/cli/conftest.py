"""Fixtures for the CLI tests on MiniStack: apps with data a worker run produced (``world``), or
records enqueued and then written as the store writes them (``ledger``, no worker needed)."""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from typer.testing import CliRunner

from sqsjobs import App, JobStatus
from sqsjobs._aws import Call, one
from sqsjobs.cli.main import cli
from sqsjobs.job import TERMINAL
from sqsjobs.store import schema
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


@contextlib.contextmanager
def fake_aws_env() -> Iterator[None]:
    """The suite's scrubbed environment, for package fixtures made before the per-test scrub runs."""
    with pytest.MonkeyPatch.context() as mp:
        for key in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "SQSJOBS_APP", "SQSJOBS_ENDPOINT_URL"):
            mp.delenv(key, raising=False)
        mp.setenv("AWS_ACCESS_KEY_ID", "testing")
        mp.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        mp.setenv("AWS_DEFAULT_REGION", "us-east-1")
        mp.setenv("SQSJOBS_LOG_LEVEL", "WARNING")
        yield


@pytest.fixture(scope="package")
def world(ministack_url):
    """Read-only tests (all of tests/cli) share one populated app (made before the per-test env scrub, so set creds here)."""
    with fake_aws_env():
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


# ── ledger: records in every state, written without a worker ─────────────────────────────────
def _av(value: Any) -> dict[str, Any]:
    if isinstance(value, str):
        return {"S": value}
    if isinstance(value, int | float):
        return {"N": str(value)}
    raise TypeError(value)


def settle(app: App, job_id: str, status: JobStatus, at: float, **attrs: Any) -> None:
    """Write ``job_id`` in ``status`` as of ``at``, in the record's v2 layout (``store/schema.py``).

    Stands in for the worker's transitions: finished records carry ``finished_at`` and a TTL, and a
    dead one its ``attention`` entry (``dead#NN``, ``due`` = finished_at) and its payload.
    """
    values: dict[str, Any] = {"status": status.value, "updated_at": at, **attrs}
    if status in TERMINAL:
        values |= {"finished_at": at, "expires_at": int(at + 14 * 86_400)}  # as retention_s: not yet reaped
    if status is JobStatus.DEAD:
        values |= {"attn": schema.attention_key(schema.DEAD, job_id), "due": at, "payload": "{}"}
    names = {f"#a{i}": k for i, k in enumerate(values)}
    app.run(
        one(
            Call(
                "dynamodb",
                "update_item",
                {
                    "TableName": app.settings.table_name,
                    "Key": {"id": {"S": job_id}},
                    "ConditionExpression": "attribute_exists(id)",
                    "UpdateExpression": "SET " + ", ".join(f"#a{i} = :v{i}" for i in range(len(values))),
                    "ExpressionAttributeNames": names,
                    "ExpressionAttributeValues": {f":v{i}": _av(v) for i, v in enumerate(values.values())},
                },
            )
        )
    )


@dataclass
class Ledger:
    """An app whose records are in every state; ``at`` is each job's ``updated_at``."""

    app: App
    endpoint: str
    now: float
    succeeded: list[str] = field(default_factory=list)
    #: Dead jobs, newest finished first.
    dead: list[str] = field(default_factory=list)
    #: Succeeded two days ago: outside the scan listings' default window.
    old: str = ""
    waiting: str = ""
    held: str = ""
    running: str = ""
    stuck: str = ""
    retrying: str = ""
    cancelled: str = ""
    tenant_job: str = ""
    at: dict[str, float] = field(default_factory=dict)

    def cli(self, *args: str) -> Run:
        return invoke(self.app, self.endpoint, *args)

    def ids(self, *, since_s: float = 86_400.0) -> set[str]:
        """Every job updated within ``since_s``."""
        return {i for i, at in self.at.items() if at >= self.now - since_s}


def fill_ledger(endpoint: str) -> Ledger:
    """Enqueue (records and messages as a producer makes them), then move each job to its state."""
    app = new_app(endpoint)
    app.provision()
    now = time.time()
    led = Ledger(app, endpoint, now)

    def job(job_type: str, order: str, **options: Any) -> str:
        payload = {"to": f"{order}@example.com"} if job_type == "mail.send" else {"order_id": order}
        job_id = app.enqueue(job_type, payload, **options)
        led.at[job_id] = now  # as enqueued; ``settle`` moves it
        return job_id

    def moved(job_id: str, status: JobStatus, ago_s: float, **attrs: Any) -> str:
        led.at[job_id] = now - ago_s
        settle(app, job_id, status, now - ago_s, **attrs)
        return job_id

    for i in range(3):
        led.succeeded.append(moved(job("orders.ok", f"o-{i}"), JobStatus.SUCCEEDED, 50 + 10 * i, attempt=1))
    led.tenant_job = moved(job("orders.ok", "o-t", tenant="acme"), JobStatus.SUCCEEDED, 45, attempt=1)
    led.succeeded.append(led.tenant_job)
    led.succeeded.append(moved(job("orders.flaky", "o-f"), JobStatus.SUCCEEDED, 40, attempt=2))
    led.dead = [
        moved(job("mail.send", "user1"), JobStatus.DEAD, 100, attempt=2, reason="attempts exhausted (2/2)"),
        moved(job("orders.flaky", "o-d"), JobStatus.DEAD, 200, attempt=3, reason="attempts exhausted (3/3)"),
        moved(job("mail.send", "perm"), JobStatus.DEAD, 300, attempt=1, reason="permanent error"),
        moved(job("mail.send", "user0"), JobStatus.DEAD, 7200, attempt=2, reason="attempts exhausted (2/2)"),
    ]
    led.old = moved(job("orders.ok", "o-old"), JobStatus.SUCCEEDED, 2 * 86_400, attempt=1)
    led.waiting = job("orders.ok", "o-later", delay=600)
    led.held = job("orders.ok", "o-much-later", delay=7200)
    led.running = moved(
        job("orders.ok", "o-run"),
        JobStatus.RUNNING,
        5,
        attempt=1,
        lease_expires=now + 300,
        started_at=now - 5,
    )
    led.stuck = moved(
        job("mail.send", "stuck"),
        JobStatus.RUNNING,
        600,
        attempt=1,
        lease_expires=now - 300,
        started_at=now - 600,
    )
    led.retrying = moved(
        job("orders.flaky", "o-r"), JobStatus.RETRY_SCHEDULED, 20, attempt=1, run_at=now - 10
    )
    led.cancelled = job("orders.ok", "o-c", delay=300)
    app.cancel(led.cancelled)
    led.at[led.cancelled] = float(app.get(led.cancelled).updated_at.timestamp())
    return led


@pytest.fixture(scope="package")
def ledger(ministack_url):
    """Read-only tests of listings and counts share one ledger (made before the per-test env scrub)."""
    with fake_aws_env():
        led = fill_ledger(ministack_url)
    yield led
    led.app.close()
