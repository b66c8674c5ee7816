"""Hostile input from outside, over real HTTP on MiniStack: the API and the console answer, never fall over.

A DLQ holding a body of 100,000 nested arrays among good dead jobs still lists and replays (the bad
one reported by message id and reason); a payload nested past the documented depth is a 422 that
says what to do; an id naming one of the table's own items that is not a job (a breaker's, a
pause's, a batch's, a chain's, a worker's) is a 404 that changes nothing; an id of 10,000
characters is a 404 or 422 on every route that takes one, JSON or console.
"""

from __future__ import annotations

import re
import time
from urllib.parse import quote

import pytest

from sqsjobs import App, JobStatus, PayloadInvalid
from sqsjobs._aws import Call, one
from sqsjobs.api.http_app import create_app
from sqsjobs.envelope import MAX_PAYLOAD_DEPTH
from sqsjobs.limits import records as limit_records
from sqsjobs.store.apply import apply
from sqsjobs.store.presence_items import WorkerEntry, register
from tests.api.conftest import TOKEN
from tests.api.helpers import assert_problem, flat_routes
from tests.integration.helpers import queue_url, sqs_call

DEEP_BODY = "[" * 100_000 + "]" * 100_000


def nested(levels: int) -> object:
    """A JSON value ``levels`` arrays deep."""
    value: object = 1
    for _ in range(levels):
        value = [value]
    return value


def scan(app) -> dict[str, dict]:
    items = app.run(
        one(Call("dynamodb", "scan", {"TableName": app.settings.table_name, "ConsistentRead": True}))
    )
    return {i["id"]["S"]: i for i in items["Items"]}


# ── a DLQ holding one message no parser can read ─────────────────────────────────────────────
@pytest.fixture
def deep_dlq(fresh_api):
    """Two dead jobs in the ``mail`` DLQ (a worker put them there) and a 100,000-deep body beside them."""
    served = fresh_api(mails=2, perm=False, extra=False)
    app = served.world.app
    bad = sqs_call(app, "send_message", QueueUrl=queue_url(app, "mail", dlq=True), MessageBody=DEEP_BODY)
    return served, str(bad["MessageId"])


def test_the_dlq_lists_and_replays_the_good_messages_and_reports_the_deep_one(deep_dlq):
    served, bad_id = deep_dlq
    http, world = served.http, served.world
    # WHEN the DLQ is listed
    listed = http.get("/dlq", params={"queue": "mail"})
    # THEN every message is there: the dead jobs, and the unreadable one with its reason
    assert listed.status_code == 200, listed.text
    by_id = {m["message_id"]: m for m in listed.json()["messages"]}
    assert {m["job_id"] for m in by_id.values() if m["job_id"]} == set(world.dead_value)
    assert "nests deeper than 128 levels" in by_id[bad_id]["malformed"]

    # WHEN a dry run, then a replay, are asked for
    dry = http.post("/dlq/replay", json={"queue": ["mail"], "dry_run": True})
    assert dry.status_code == 200, dry.text
    items = {i["message_id"]: i for i in dry.json()["items"]}
    assert items[bad_id]["outcome"] == "skipped" and "nests deeper" in items[bad_id]["reason"]
    assert dry.json()["counts"]["would_replay"] == 2

    done = http.post("/dlq/replay", json={"queue": ["mail"], "dry_run": False})
    # THEN the good jobs are queued again, and the bad message is reported and left where it is
    assert done.status_code == 200, done.text
    assert done.json()["counts"] == {"replayed": 2, "would_replay": 0, "stale": 0, "skipped": 1, "failed": 0}
    assert {i["job_id"] for i in done.json()["items"] if i["outcome"] == "replayed"} == set(world.dead_value)
    assert [m["message_id"] for m in http.get("/dlq", params={"queue": "mail"}).json()["messages"]] == [
        bad_id
    ]


def test_the_consoles_replay_dry_run_and_replay_report_the_deep_message(deep_dlq):
    served, bad_id = deep_dlq
    http, world = served.http, served.world
    same_origin = {"Origin": served.url}
    # WHEN the console's dry run is posted
    dry = http.post("/ui/replay/dry-run", data={"queue": "mail"}, headers=same_origin)
    # THEN it lists the two jobs it would replay and names the message it skipped, with its reason
    assert dry.status_code == 200, dry.text
    assert "2 job(s) would be replayed" in dry.text
    assert f"message {bad_id}" in dry.text and "nests deeper than 128 levels" in dry.text
    listed_ids = re.findall(r'name="job_id" value="([^"]+)"', dry.text)
    assert set(listed_ids) == set(world.dead_value)

    # WHEN the confirmation replays what the dry run listed
    done = http.post("/ui/replay", data={"queue": "mail", "job_id": listed_ids}, headers=same_origin)
    assert done.status_code == 200, done.text
    assert "Replayed 2 job(s)" in done.text
    assert {world.app.get(job_id).status for job_id in world.dead_value} == {JobStatus.QUEUED}


# ── payloads nested deeper than a payload may ────────────────────────────────────────────────
@pytest.mark.parametrize("levels", [600, 950])
def test_a_payload_nested_too_deep_is_a_422_that_says_what_to_do(own_api, levels):
    http = own_api.http
    # GIVEN the bound itself: a payload MAX_PAYLOAD_DEPTH deep (its object, then arrays) is a job
    at_bound = {"order_id": "x", "tree": nested(MAX_PAYLOAD_DEPTH - 1)}
    accepted = http.post("/jobs", json={"type": "orders.ok", "payload": at_bound})
    assert accepted.status_code in (201, 202), accepted.text
    deep = "[" * levels + "1" + "]" * levels  # written out: encoding it would need ``levels`` stack frames
    batch = http.post("/batches", json={"on_complete": "orders.ok"})
    assert batch.status_code == 201, batch.text
    cases = [
        ("/jobs", '{"type": "orders.ok", "payload": {"order_id": "x", "tree": %s}}', "payload"),
        ("/chains", '{"steps": [{"type": "orders.ok", "payload": %s}]}', "steps.0.payload"),
        (
            f"/batches/{batch.json()['id']}/items",
            '{"items": [{"type": "orders.ok", "payload": {"order_id": "1"}}, {"type": "orders.ok", "payload": %s}]}',
            "items.1.payload",
        ),
    ]
    for path, body, field in cases:
        response = http.post(path, content=body % deep, headers={"content-type": "application/json"})
        problem = assert_problem(response, 422, field)
        assert f"more than {MAX_PAYLOAD_DEPTH} levels deep: flatten it" in problem["detail"], problem


@pytest.mark.parametrize("levels", [MAX_PAYLOAD_DEPTH + 1, 600, 5000])
def test_enqueue_from_python_refuses_a_deep_payload_with_payload_invalid(own_api, levels):
    app = own_api.world.app
    # A type this producer has no handler for: its payload is stored as given (nothing drops the depth).
    with pytest.raises(PayloadInvalid, match=f"more than {MAX_PAYLOAD_DEPTH} levels deep"):
        app.enqueue("elsewhere.handled", nested(levels), queue="default")


# ── ids that name an item of the table that is not a job ─────────────────────────────────────
def write_items_that_are_not_jobs(app: App) -> dict[str, dict]:
    """A breaker, a pause, a batch, a chain and a worker in ``app``'s table, written as sqsjobs writes them; by id."""
    table, now = app.settings.table_name, time.time()
    app.run(apply(limit_records.record_failure(table, "breaker#payments", now=now)))
    app.run(apply(limit_records.pause(table, "orders.ok", reason="hold", now=now)))
    batch = app.batches.create("orders.ok")
    batch.add("orders.ok", {"order_id": "b1"})
    chain = app.chains.start([("orders.ok", {"order_id": "c1"}), ("orders.ok", {"order_id": "c2"})])
    entry = WorkerEntry(
        worker_id="w-hostile",
        host="h",
        pid=1,
        version="0",
        queues=("default",),
        job_types=("orders.ok",),
        concurrency=1,
        started_at=now,
        interval_s=30.0,
    )
    app.run(one(Call("dynamodb", "put_item", register(table, entry, now=now).put_item())))
    items = scan(app)
    ids = ["breaker#payments", "pause#orders.ok", f"batch#{batch.id}", f"chain#{chain}", "worker#w-hostile"]
    assert set(ids) <= set(items), sorted(items)
    return {i: items[i] for i in ids}


@pytest.fixture
def foreign_items(fresh_api):
    """An app whose table holds a breaker, a pause, a batch, a chain and a worker beside its jobs."""
    served = fresh_api(mails=1, perm=False, extra=False)
    return served, write_items_that_are_not_jobs(served.world.app)


def test_an_id_that_is_not_a_jobs_answers_404_and_changes_nothing(foreign_items):
    served, items = foreign_items
    http, app = served.http, served.world.app
    for item_id in items:
        path = quote(item_id, safe="")
        for method, route in (
            ("GET", f"/jobs/{path}"),
            ("DELETE", f"/jobs/{path}"),
            ("POST", f"/jobs/{path}/retry"),
        ):
            assert_problem(http.request(method, route), 404, "job_id")
        page = http.get(f"/ui/jobs/{path}")
        assert page.status_code == 404 and "Job not found" in page.text, (item_id, page.status_code)
        retried = http.post(f"/ui/jobs/{path}/retry", headers={"Origin": served.url})
        assert retried.status_code == 404, (item_id, retried.status_code, retried.text[:200])
    # Nothing answered 404 after writing: every item is as it was.
    after = scan(app)
    assert {i: after[i] for i in items} == items


# ── ids far longer than any id ───────────────────────────────────────────────────────────────
def test_a_10000_character_id_is_a_404_or_422_on_every_route_that_takes_one(own_api):
    long_id = "x" * 10_000
    # Every route with a path parameter, the console's included (their list comes from the app itself).
    api = create_app(own_api.world.app, token=TOKEN)
    routes = [
        (method, route.path)
        for route in flat_routes(api.routes)
        if "{" in route.path
        for method in sorted((getattr(route, "methods", None) or set()) - {"HEAD"})
    ]
    assert ("GET", "/ui/jobs/{job_id}") in routes and ("GET", "/ui/chains/{chain_id}") in routes
    answered = {}
    for method, path in routes:
        url = re.sub(r"\{[^}]+\}", long_id, path)
        response = own_api.http.request(method, url, headers={"Origin": own_api.url})
        answered[(method, path)] = response.status_code
    assert {k: v for k, v in answered.items() if v not in (404, 422)} == {}
