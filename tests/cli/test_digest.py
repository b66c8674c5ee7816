"""``sqsjobs digest`` and ``sqsjobs dlq list --group-by error``: 50 dead jobs of 3 error signatures → 3 lines (MiniStack)."""

from __future__ import annotations

import json

import pytest

from sqsjobs import JobContext, PermanentError
from sqsjobs._aws import Call, one
from sqsjobs.ops import digest as digest_ops
from sqsjobs.testing import all_finished, work_until
from tests.cli import jobs_app
from tests.cli.conftest import fake_aws_env, invoke


class NotFound(PermanentError):
    """A record the job needs is missing."""


class CardDeclined(PermanentError):
    """The bank said no."""


@pytest.fixture(scope="module")
def dead_world(ministack_url):
    """50 dead jobs: 25 'order <n> not found', 15 card declines with varying tokens, 10 timeouts."""
    import uuid

    from sqsjobs import App
    from tests.conftest import FAST

    app = App(f"d{uuid.uuid4().hex[:10]}", endpoint_url=ministack_url, **FAST)

    @app.job("orders.fetch", max_attempts=1)
    def fetch(payload: dict, ctx: JobContext) -> None:
        if payload["kind"] == "missing":
            raise NotFound(f"order {payload['n']} not found")
        raise TimeoutError(f"timed out after {payload['n'] / 10}s talking to 10.0.{payload['n'] % 200}.7:443")

    @app.job("cards.charge", max_attempts=1)
    def charge(payload: dict, ctx: JobContext) -> None:
        raise CardDeclined(f"card 'tok_{payload['n']:x}{payload['n']}' declined by bank {payload['n'] * 7}")

    with fake_aws_env():
        app.provision()
        ids = _die(app)
    yield app, ministack_url, ids
    app.close()


def _die(app):
    ids = [app.enqueue("orders.fetch", {"kind": "missing", "n": 1000 + n}) for n in range(25)]
    ids += [app.enqueue("cards.charge", {"n": n}) for n in range(15)]
    ids += [app.enqueue("orders.fetch", {"kind": "slow", "n": 300 + n}) for n in range(10)]
    work_until(app, all_finished(app, ids))
    return ids


def test_the_digest_groups_50_dead_jobs_of_3_error_signatures_into_3_lines(dead_world):
    app, endpoint, ids = dead_world
    run = invoke(app, endpoint, "digest", "--json")
    assert run.code == 0, run.err
    body = json.loads(run.out)
    lines = {(g["type"], g["signature"], g["count"]) for g in body["groups"]}
    assert lines == {
        ("orders.fetch", "NotFound: order <n> not found", 25),
        ("cards.charge", "CardDeclined: card '<v>' declined by bank <n>", 15),
        ("orders.fetch", "TimeoutError: timed out after <n> talking to <addr>", 10),
    }
    assert body["total"] == 50
    assert all(set(g["samples"]) <= set(ids) and g["samples"] for g in body["groups"])
    # the table: one line per group
    table = invoke(app, endpoint, "digest")
    assert table.code == 0 and "50 dead job(s) in 3 group(s)" in table.out


def test_dlq_list_grouped_by_error_shows_the_same_three_lines(dead_world):
    app, endpoint, _ = dead_world
    run = invoke(app, endpoint, "dlq", "list", "--group-by", "error", "--json")
    assert run.code == 0, run.err
    groups = {(g["type"], g["signature"], g["count"]) for g in json.loads(run.out)["groups"]}
    assert {(t, c) for t, _, c in groups} == {
        ("orders.fetch", 25),
        ("cards.charge", 15),
        ("orders.fetch", 10),
    }
    assert len(groups) == 3
    assert invoke(app, endpoint, "dlq", "list", "--group-by", "type").code == 2


def test_a_digest_is_published_as_one_event_on_the_apps_bus(dead_world, monkeypatch):
    app, endpoint, _ = dead_world
    bus = f"{app.name}-bus"
    app.configure(event_bus=bus)
    try:
        app.run(one(Call("events", "create_event_bus", {"Name": bus})))
        url = app.run(one(Call("sqs", "create_queue", {"QueueName": f"{app.name}-digests"})))["QueueUrl"]
        arn = app.run(
            one(Call("sqs", "get_queue_attributes", {"QueueUrl": url, "AttributeNames": ["QueueArn"]}))
        )
        pattern = json.dumps({"detail-type": ["DeadJobsDigest"]})
        app.run(one(Call("events", "put_rule", {"Name": "d", "EventBusName": bus, "EventPattern": pattern})))
        target = {"Id": "q", "Arn": arn["Attributes"]["QueueArn"]}
        app.run(one(Call("events", "put_targets", {"Rule": "d", "EventBusName": bus, "Targets": [target]})))
        jobs_app.current = app
        run = invoke(app, endpoint, "digest", "--publish", "--json")
        assert run.code == 0, run.err
        got = app.run(one(Call("sqs", "receive_message", {"QueueUrl": url, "WaitTimeSeconds": 2})))
        [message] = got["Messages"]
        detail = json.loads(message["Body"])["detail"]
        assert (
            detail["total"] == 50 and len(detail["groups"]) == 3 and detail["event_id"].startswith("digest:")
        )
        # the scheduled function (infra/'s daily rule) does the same
        monkeypatch.setenv("SQSJOBS_APP", "tests.cli.jobs_app:current")
        assert digest_ops.handler({}) == {"dead": 50, "groups": 3}
        got = app.run(one(Call("sqs", "receive_message", {"QueueUrl": url, "WaitTimeSeconds": 2})))
        assert json.loads(got["Messages"][0]["Body"])["detail-type"] == "DeadJobsDigest"
    finally:
        app.configure(event_bus="")
