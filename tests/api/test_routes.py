"""Every route over real HTTP against MiniStack: what it answers agrees with the App and the CLI's --json."""

from __future__ import annotations

import re
import time
from datetime import datetime, timedelta
from pathlib import Path

from sqsjobs import JobStatus
from sqsjobs.api.http_app import create_app, route_summary
from tests.api.helpers import assert_problem
from tests.cli.conftest import World, invoke, new_app

DOCS = Path(__file__).resolve().parents[2] / "docs" / "api.md"
README = Path(__file__).resolve().parents[2] / "README.md"


def at(text: str) -> datetime:
    return datetime.fromisoformat(text)


def cli(world: World, *args: str):
    """``sqsjobs ARGS --json`` on an App of the same name: the CLI reconfigures the App it loads, and
    would drop the served one's async clients under the server."""
    twin = new_app(world.endpoint, world.app.name)
    try:
        run = invoke(twin, world.endpoint, *args, "--json")
    finally:
        twin.close()
    assert run.code == 0, run.err
    return run.json


# ── POST /jobs ───────────────────────────────────────────────────────────────────────────────
def test_enqueue_answers_202_with_the_recorded_job_and_when_it_may_start(served):
    # WHEN a job due now is posted
    before = time.time()
    r = served.http.post(
        "/jobs", json={"type": "orders.ok", "payload": {"order_id": "h-1"}, "tenant": "acme"}
    )
    # THEN 202 with its id, status, queue, and a Location to read it at
    assert r.status_code == 202, r.text
    body = r.json()
    assert r.headers["location"] == f"/jobs/{body['id']}"
    assert (body["type"], body["queue"], body["status"]) == ("orders.ok", "default", "queued")
    assert body["queue_depth"] is not None and body["queue_depth"] >= 0
    # ... an estimate only when nothing else was waiting in the queue (then: now)
    if body["queue_depth"] <= 1:
        assert before - 1 <= at(body["estimated_start"]).timestamp() <= time.time() + 1
    else:
        assert body["estimated_start"] is None
    # ... and the record is the App's, tenant included (the payload travels in the message)
    job = served.world.app.get(body["id"])
    assert (job.status, job.tenant, job.type) == (JobStatus.QUEUED, "acme", "orders.ok")


def test_a_delayed_job_is_estimated_to_start_at_its_run_at(served):
    r = served.http.post("/jobs", json={"type": "orders.ok", "payload": {"order_id": "h-2"}, "delay": 900})
    assert r.status_code == 202, r.text
    body = r.json()
    assert body["estimated_start"] == body["run_at"] and body["queue_depth"] is None
    assert at(body["run_at"]).timestamp() > time.time() + 850
    # ... and run_at is taken as given
    when = datetime.fromisoformat("2031-02-03T04:05:06+00:00")
    r = served.http.post(
        "/jobs", json={"type": "orders.ok", "payload": {"order_id": "h-3"}, "run_at": when.isoformat()}
    )
    assert r.status_code == 202, r.text
    assert at(r.json()["run_at"]) == at(r.json()["estimated_start"]) == when
    assert served.world.app.get(r.json()["id"]).run_at == when


def test_an_idempotency_key_returns_the_same_job_and_refuses_another_payload(served):
    job = {"type": "orders.ok", "payload": {"order_id": "h-4"}, "idempotency_key": "order-h-4", "delay": 600}
    first = served.http.post("/jobs", json=job)
    again = served.http.post("/jobs", json=job)
    assert first.status_code == again.status_code == 202
    assert first.json()["id"] == again.json()["id"]
    other = served.http.post("/jobs", json={**job, "payload": {"order_id": "h-4-other"}})
    problem = assert_problem(other, 409, "idempotency_key")
    assert problem["type"].endswith("idempotency-conflict")


def test_dedup_modes_over_http_say_what_they_did(served):
    job = {"type": "orders.ok", "payload": {"order_id": "h-u"}, "idempotency_key": "h-u", "delay": 600}
    # while_active: the live job again, told so; once it finished (cancelled here), a new one saying whose place
    first = served.http.post("/jobs", json={**job, "unique": "while_active"})
    again = served.http.post(
        "/jobs", json={**job, "payload": {"order_id": "other"}, "unique": "while_active"}
    )
    assert first.status_code == again.status_code == 202, again.text
    assert (first.json()["deduplicated"], first.json()["replaced"]) == (False, None)
    assert again.json()["id"] == first.json()["id"] and again.json()["deduplicated"] is True
    assert served.http.delete(f"/jobs/{first.json()['id']}").status_code == 200
    after = served.http.post("/jobs", json={**job, "unique": "while_active"})
    assert after.json()["id"] != first.json()["id"]
    assert (after.json()["deduplicated"], after.json()["replaced"]) == (False, first.json()["id"])
    # throttle: another payload in the window gets the first job, no 409
    t1 = served.http.post("/jobs", json={**job, "idempotency_key": "h-t", "throttle": 86400})
    t2 = served.http.post(
        "/jobs", json={**job, "idempotency_key": "h-t", "throttle": 86400, "payload": {"order_id": "x"}}
    )
    assert t1.status_code == t2.status_code == 202 and t1.json()["id"] == t2.json()["id"]
    # debounce: the later payload joins the waiting job
    d1 = served.http.post("/jobs", json={**job, "idempotency_key": "h-d", "debounce": 600})
    d2 = served.http.post(
        "/jobs", json={**job, "idempotency_key": "h-d", "debounce": 600, "payload": {"order_id": "y"}}
    )
    assert d1.status_code == d2.status_code == 202, d2.text
    assert d2.json()["id"] == d1.json()["id"] and d2.json()["deduplicated"] is True
    # a mode needs a key, and one mode at most
    assert_problem(
        served.http.post("/jobs", json={"type": "orders.ok", "payload": {"order_id": "k"}, "throttle": 5}),
        422,
        "body",
    )
    two = {**job, "dedupe_for": 5, "throttle": 5}
    assert_problem(served.http.post("/jobs", json=two), 422, "body")


def test_a_queue_override_is_used_and_one_that_does_not_exist_is_422(served):
    r = served.http.post("/jobs", json={"type": "orders.ok", "payload": {"order_id": "h-5"}, "queue": "mail"})
    assert r.status_code == 202 and r.json()["queue"] == "mail", r.text
    missing = served.http.post(
        "/jobs", json={"type": "orders.ok", "payload": {"order_id": "h-6"}, "queue": "nosuchqueue"}
    )
    assert assert_problem(missing, 422, "queue")["type"].endswith("no-such-queue")


# ── GET /jobs/{id} ───────────────────────────────────────────────────────────────────────────
def test_get_returns_what_jobs_get_json_prints(served):
    world = served.world
    for job_id in (world.ok[0], world.dead_perm, world.waiting):
        r = served.http.get(f"/jobs/{job_id}")
        assert r.status_code == 200, r.text
        assert r.json() == cli(world, "jobs", "get", job_id)
    assert served.http.get(f"/jobs/{world.ok[0]}").json()["result"] == {"order": "o-0"}
    assert served.http.get(f"/jobs/{world.dead_perm}").json()["last_error"]["class"] == "PermanentError"


# ── DELETE /jobs/{id} ────────────────────────────────────────────────────────────────────────
def test_cancel_a_waiting_job_then_it_is_refused_and_unknown_ids_are_404(served):
    job_id = served.http.post(
        "/jobs", json={"type": "orders.ok", "payload": {"order_id": "h-7"}, "delay": 600}
    ).json()["id"]
    r = served.http.delete(f"/jobs/{job_id}")
    assert r.status_code == 200 and r.json() == {"id": job_id, "result": "cancelled"}
    assert served.world.app.get(job_id).status is JobStatus.CANCELLED
    problem = assert_problem(served.http.delete(f"/jobs/{job_id}"), 409, "job_id")
    assert "cancelled" in problem["detail"]
    assert_problem(served.http.delete(f"/jobs/{served.world.ok[0]}"), 409, "job_id")
    assert_problem(served.http.delete("/jobs/no-such-job"), 404, "job_id")


# ── POST /jobs/{id}/retry ────────────────────────────────────────────────────────────────────
def test_retry_requeues_a_dead_job_once_and_a_corrected_payload_is_validated(fresh_api):
    api = fresh_api(mails=2, perm=True, extra=False)
    dead, other = api.world.dead_value
    # a corrected payload the handler refuses: 422 naming the payload's field, nothing changed
    bad = api.http.post(f"/jobs/{dead}/retry", json={"payload": {"to": 5}})
    body = assert_problem(bad, 422, "payload")
    assert [e["field"] for e in body["errors"]] == ["payload.to"]
    assert api.world.app.get(dead).status is JobStatus.DEAD
    # the job's own payload
    r = api.http.post(f"/jobs/{dead}/retry")
    assert r.status_code == 200, r.text
    assert r.json()["id"] == dead and r.json()["status"] == "queued"
    assert api.world.app.get(dead).status is JobStatus.QUEUED
    assert_problem(api.http.post(f"/jobs/{dead}/retry"), 409, "job_id")  # it is queued now
    # ... and a corrected one, same id, new payload
    r = api.http.post(f"/jobs/{other}/retry", json={"payload": {"to": "fixed@example.com"}})
    assert r.status_code == 200, r.text
    assert api.world.app.get(other).payload == {"to": "fixed@example.com"}
    assert_problem(api.http.post("/jobs/no-such-job/retry"), 404, "job_id")


# ── GET /jobs ────────────────────────────────────────────────────────────────────────────────
def test_listing_filters_pages_with_the_cursor_and_matches_jobs_list_json(served):
    world = served.world
    dead = served.http.get("/jobs", params={"status": "dead"})
    assert dead.status_code == 200, dead.text
    assert {r["id"] for r in dead.json()["jobs"]} == set(world.dead)
    assert dead.json()["index"] == "attention"
    listed = cli(world, "jobs", "list", "--status", "dead")
    assert [r["id"] for r in dead.json()["jobs"]] == [r["id"] for r in listed["jobs"]]
    # ... a type filter, and one page at a time, following next_cursor with the same filters
    seen: list[str] = []
    params = {"type": "mail.send", "status": "dead", "limit": 1}
    while True:
        page = served.http.get("/jobs", params=params)
        assert page.status_code == 200, page.text
        seen += [r["id"] for r in page.json()["jobs"]]
        if not page.json()["next_cursor"]:
            break
        params["cursor"] = page.json()["next_cursor"]
    assert sorted(seen) == sorted(world.dead)
    # ... a scan listing with a tenant and a window given as an instant
    since = (datetime.now().astimezone() - timedelta(hours=1)).isoformat()
    tenant = served.http.get("/jobs", params={"tenant": "acme", "since": since})
    assert world.tenant_job in {r["id"] for r in tenant.json()["jobs"]}
    assert {r["tenant"] for r in tenant.json()["jobs"]} == {"acme"}
    # ... and a cursor from another listing is refused, naming it
    other = served.http.get(
        "/jobs", params={"status": "succeeded", "cursor": dead.json()["next_cursor"] or "x"}
    )
    assert_problem(other, 422, "cursor")


# ── GET /queues ──────────────────────────────────────────────────────────────────────────────
def test_queues_show_depths_dlq_and_the_oldest_waiting_job(served):
    r = served.http.get("/queues")
    assert r.status_code == 200, r.text
    queues = {q["queue"]: q for q in r.json()["queues"]}
    assert set(queues) == {"default", "mail"}
    assert queues["mail"]["dlq"] == len(served.world.dead)
    for q in queues.values():
        assert {"visible", "in_flight", "delayed", "dlq", "oldest_due_s"} <= set(q)
    types = {t["type"]: t for t in r.json()["types"]}
    assert types["mail.send"]["counts"]["dead"] >= len(served.world.dead)
    # ... and without the table scan: depths only
    quick = served.http.get("/queues", params={"counts": "false"})
    assert quick.status_code == 200 and quick.json()["types"] is None
    assert {q["queue"]: q["dlq"] for q in quick.json()["queues"]}["mail"] == len(served.world.dead)


# ── GET /dlq, POST /dlq/replay ───────────────────────────────────────────────────────────────
def test_dlq_lists_why_each_job_died_and_replay_is_a_dry_run_unless_told(fresh_api):
    api = fresh_api(mails=2, perm=True, extra=False)
    world = api.world
    listed = api.http.get("/dlq", params={"type": "mail.send"})
    assert listed.status_code == 200, listed.text
    messages = listed.json()["messages"]
    assert sorted(m["job_id"] for m in messages) == sorted(world.dead)
    assert {m["record_status"] for m in messages} == {"dead"}
    assert {m["error_class"] for m in messages} == {"ValueError", "PermanentError"}
    # a replay without dry_run says what it would do and changes nothing
    dry = api.http.post("/dlq/replay", json={"type": ["mail.send"]})
    assert dry.status_code == 200, dry.text
    assert dry.json()["dry_run"] is True and dry.json()["counts"]["would_replay"] == len(world.dead)
    assert {world.app.get(j).status for j in world.dead} == {JobStatus.DEAD}
    # ... and for real, one job
    done = api.http.post("/dlq/replay", json={"job_id": [world.dead_perm], "dry_run": False})
    assert done.status_code == 200, done.text
    assert done.json()["counts"]["replayed"] == 1
    assert world.app.get(world.dead_perm).status is JobStatus.QUEUED
    left = api.http.get("/dlq").json()["messages"]
    assert world.dead_perm not in {m["job_id"] for m in left}


# ── the OpenAPI document, the docs, and every route documented ───────────────────────────────
def test_the_openapi_document_and_the_docs_are_served(served):
    schema = served.http.get("/openapi.json")
    assert schema.status_code == 200
    paths = schema.json()["paths"]
    assert {"/jobs", "/jobs/{job_id}", "/jobs/{job_id}/retry", "/queues", "/dlq", "/dlq/replay"} <= set(paths)
    assert "bearer" in str(schema.json()["components"]["securitySchemes"]).lower()
    docs = served.http.get("/docs")
    assert docs.status_code == 200 and "swagger" in docs.text.lower()
    assert served.http.get("/redoc").status_code == 200


def test_docs_api_md_shows_a_curl_example_for_every_route_and_the_readme_links_it(served):
    text = DOCS.read_text()
    shown = set()
    for line in text.splitlines():
        if not line.lstrip().startswith("curl"):
            continue
        method = re.search(r"-X\s+(\w+)", line)
        path = re.search(r"\$API(/[\w/{}$.-]*)", line)
        if path:
            shown.add(((method.group(1) if method else "GET"), re.sub(r"\$\w+", "{}", path.group(1))))
    routes = {(m, re.sub(r"\{\w+\}", "{}", p)) for m, p in route_summary(create_app(served.world.app))}
    assert routes <= shown, routes - shown
    assert "docs/api.md" in README.read_text()
