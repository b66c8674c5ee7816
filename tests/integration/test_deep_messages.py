"""Bodies nested past what any parser should follow, met by a real worker process on MiniStack.

A body of 100,000 nested arrays makes ``json.loads`` raise ``RecursionError``. The worker must
dead-letter such a message at once with a reason that says why (not leave it to be received again
until SQS's redrive moves it without one), keep running, and run the good jobs sent around it.
"""

from __future__ import annotations

import json

import pytest

from sqsjobs.envelope import DLQ_REASON
from sqsjobs.store.codec import idempotent_job_id
from tests.apps import foreign
from tests.integration.helpers import attr, wait_until
from tests.integration.test_foreign_messages import (
    TYPE,
    dlq_by_body,
    drained,
    send,
    sns_notification,
    start_worker,
    succeeded,
)

pytestmark = pytest.mark.slow

DEEP = "[" * 100_000 + "]" * 100_000


@pytest.fixture
def app(ministack_url, make_app):
    app = make_app(ministack_url, lease_s=3.0, visibility_timeout_s=2)
    app.registry.include(foreign.app.registry)  # the handler the worker process loads
    app.provision()
    return app


@pytest.fixture
def worker(app):
    proc = start_worker(app, concurrency=4)
    yield proc
    if proc.poll() is None:
        proc.kill()
        proc.wait(10)


def order(runs_dir: str, key: str, n: int) -> str:
    payload = {"order_id": n, "runs_dir": runs_dir}
    return json.dumps({"sqsjobs": 1, "type": TYPE, "idempotency_key": key, "payload": payload})


def test_a_worker_dead_letters_deep_bodies_with_their_reason_and_runs_the_jobs_around_them(
    app, worker, tmp_path
):
    runs_dir = str(tmp_path)
    # GIVEN a good message, then bodies nested far too deep (alone, inside an SNS notification, and
    # as the payload of a foreign message shallow enough for json.loads), then another good one
    send(app, order(runs_dir, "before", 1))
    bodies = {
        "deep body": DEEP,
        "deep SNS message": sns_notification(DEEP, "sns-deep"),
        "deep payload": f'{{"sqsjobs": 1, "type": "{TYPE}", "payload": {"[" * 600 + "]" * 600}}}',
    }
    for body in bodies.values():
        send(app, body)
    send(app, order(runs_dir, "after", 2))

    # WHEN the worker has handled them all
    for key in ("before", "after"):
        wait_until(lambda key=key: succeeded(app, idempotent_job_id(TYPE, key)), 60, f"the {key!r} job ran")
    wait_until(lambda: drained(app), 30, "queue drained")

    # THEN each deep one is in the DLQ with the reason the worker gave it (a redriven copy has none)
    dead = dlq_by_body(app, len(bodies))
    reasons = {name: attr(dead[body], DLQ_REASON) for name, body in bodies.items()}
    assert reasons["deep body"].startswith("malformed message: message body nests deeper than 128 levels")
    assert "its message nests deeper than 128 levels" in reasons["deep SNS message"]
    assert reasons["deep payload"].startswith("malformed message: message body nests deeper than 128 levels")
    # ... and the worker is still running
    assert worker.poll() is None
