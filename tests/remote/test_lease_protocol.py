"""The HTTP worker protocol attacked from outside: raw HTTP against a served API on MiniStack.

A test here is the HTTP worker: it leases, heartbeats, completes and fails with httpx, as a worker
in any language would, and reads the outcome from the record and the queues.
"""

from __future__ import annotations

import json
import time

import httpx
import pytest
from itsdangerous import URLSafeSerializer

from sqsjobs import JobStatus
from sqsjobs.errors import PayloadInvalid
from sqsjobs.limits.plugin import PAUSE_CACHE_S
from sqsjobs.remote.lease import SALT
from tests.api.helpers import serving
from tests.apps import polyglot
from tests.integration.helpers import kill_group, wait_until, worker_process

pytestmark = pytest.mark.slow

TOKEN = "test-token-lease-protocol"
KEY = "k" * 32


@pytest.fixture
def api(app):
    with (
        serving(app, token=TOKEN, lease_key=KEY) as url,
        httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30, verify=False
        ) as c,
    ):
        yield c


def lease(api, *, types=("render.thumbnail",), wait_s=5.0, max_jobs=1, worker_id="w1") -> list[dict]:
    r = api.post(
        "/leases", json={"worker_id": worker_id, "types": list(types), "wait_s": wait_s, "max_jobs": max_jobs}
    )
    assert r.status_code == 200, r.text
    return r.json()["leases"]


def thumbnail(app, **fields) -> str:
    return app.enqueue("render.thumbnail", {"url": "s3://in/a.png", "width": 64, **fields})


def queue_is_empty(app, queue: str) -> bool:
    sqs = app.clients.boto3.get("sqs")
    url = sqs.get_queue_url(QueueName=app.settings.queue_name(queue))["QueueUrl"]
    attrs = sqs.get_queue_attributes(
        QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    )["Attributes"]
    return attrs == {"ApproximateNumberOfMessages": "0", "ApproximateNumberOfMessagesNotVisible": "0"}


def test_a_leased_job_is_claimed_for_its_worker_and_completes_once(app, api):
    job_id = thumbnail(app)
    [leased] = lease(api)
    # the answer is a claimed job: the record says running, owned by this HTTP worker
    assert (leased["job_id"], leased["type"], leased["attempt"]) == (job_id, "render.thumbnail", 1)
    assert leased["payload"] == {"url": "s3://in/a.png", "width": 64, "mode": "ok", "runs_dir": ""}
    record = app.get(job_id)
    assert (record.status, record.lease_owner) == (JobStatus.RUNNING, "http:w1")
    assert leased["fencing_token"] == record.fencing_token
    # nobody else gets it meanwhile (a heartbeat keeps its message hidden: 2 s)
    assert api.post("/leases/heartbeat", json={"lease": leased["lease"]}).status_code == 200
    assert lease(api, wait_s=0, worker_id="w2") == []
    done = api.post(
        "/leases/complete", json={"lease": leased["lease"], "result": {"thumbnail": "s3://out/a.png"}}
    )
    assert done.status_code == 200, done.text
    assert done.json() == {"job_id": job_id, "status": "succeeded", "attempt": 1}
    assert app.get(job_id).result == {"thumbnail": "s3://out/a.png"}
    wait_until(lambda: queue_is_empty(app, "render"), 30, "the message deleted")
    # the same lease again: the job is finished, nothing changes
    again = api.post("/leases/complete", json={"lease": leased["lease"], "result": "other"})
    assert again.status_code == 409 and again.json()["type"].endswith("lease-conflict"), again.text
    assert "succeeded" in again.json()["detail"]
    assert app.get(job_id).result == {"thumbnail": "s3://out/a.png"}


def test_an_altered_or_foreign_lease_is_refused_and_changes_nothing(app, api):
    job_id = thumbnail(app)
    [leased] = lease(api)
    ours = URLSafeSerializer(KEY, salt=SALT)
    raw = ours.loads(leased["lease"])
    signature = leased["lease"].rpartition(".")[2]
    # its epoch changed under the server's signature, the whole lease signed with another key, a cut signature
    tampered = ours.dump_payload({**raw, "epoch": raw["epoch"] + 1}).decode() + "." + signature
    forged = URLSafeSerializer("another key entirely", salt=SALT).dumps(raw)
    for bad in (f"{tampered}.{signature}", forged, leased["lease"][:-2] + "xx"):
        for route in ("/leases/complete", "/leases/fail", "/leases/heartbeat"):
            r = api.post(route, json={"lease": bad})
            assert r.status_code == 400 and r.json()["type"].endswith("lease-invalid"), (route, r.text)
    record = app.get(job_id)
    assert (record.status, record.attempt) == (JobStatus.RUNNING, 1)
    assert api.post("/leases/complete", json={"lease": leased["lease"]}).status_code == 200


def test_hostile_bodies_on_every_lease_route_are_4xx_and_the_leased_job_runs_on(app, api):
    job_id = thumbnail(app)
    [leased] = lease(api)
    json_body = {"content-type": "application/json"}
    deep = "[" * 100_000 + "]" * 100_000
    nested = "[" * 950 + "1" + "]" * 950  # deeper than a result may be, shallow enough to parse
    for route in ("/leases", "/leases/heartbeat", "/leases/complete", "/leases/fail"):
        for body, status in (
            (deep, 400),  # 100,000 levels: refused by the parser, not a RecursionError
            ("{", 400),  # not JSON
            ('{"lease": ' + '"' + "a" * 2_000_000 + '"}', 413),  # over the body limit
            ('{"lease": 7}', 422),  # the wrong type
        ):
            r = api.post(route, content=body, headers=json_body)
            assert r.status_code == status, (route, body[:20], r.text[:200])
            assert r.headers["content-type"].startswith("application/problem+json"), route
    nested_result = f'{{"lease": {json.dumps(leased["lease"])}, "result": {nested}}}'
    assert api.post("/leases/complete", content=nested_result, headers=json_body).status_code == 422
    lease_json = json.dumps(leased["lease"])
    error = f'{{"type": "E", "message": "m", "stack": {nested}}}'
    nested_stack = f'{{"lease": {lease_json}, "error": {error}}}'
    assert api.post("/leases/fail", content=nested_stack, headers=json_body).status_code == 422
    nested_progress = f'{{"lease": {lease_json}, "progress": {{"data": {nested}}}}}'
    assert api.post("/leases/heartbeat", content=nested_progress, headers=json_body).status_code == 422
    # none of it touched the job: its worker completes it
    assert (app.get(job_id).status, app.get(job_id).attempt) == (JobStatus.RUNNING, 1)
    assert api.post("/leases/complete", json={"lease": leased["lease"], "result": 1}).status_code == 200
    assert app.get(job_id).result == 1


def test_a_lease_past_its_lease_time_without_heartbeats_cannot_complete_and_the_job_ends_right(app, api):
    job_id = thumbnail(app)
    [stale] = lease(api, worker_id="stalled")
    # no heartbeat: past the record's lease (3 s) and the message's visibility (2 s) another worker gets it
    [fresh] = lease(api, wait_s=20, worker_id="rescuer")
    assert (fresh["job_id"], fresh["attempt"]) == (job_id, 2)
    refused = api.post("/leases/complete", json={"lease": stale["lease"], "result": "stale"})
    assert refused.status_code == 409, refused.text
    assert api.post("/leases/heartbeat", json={"lease": stale["lease"]}).status_code == 409
    assert api.post("/leases/fail", json={"lease": stale["lease"]}).status_code == 409
    assert api.post("/leases/complete", json={"lease": fresh["lease"], "result": "fresh"}).status_code == 200
    record = app.get(job_id)
    assert (record.status, record.result, record.attempt) == (JobStatus.SUCCEEDED, "fresh", 2)
    assert [(h.attempt, h.worker) for h in record.history] == [(2, "http:rescuer")]


def test_a_long_job_heartbeats_past_several_leases_and_no_one_else_gets_it(app, api):
    job_id = thumbnail(app)
    [leased] = lease(api)
    assert leased["heartbeat_every_s"] == pytest.approx(2 / 3, abs=0.01)
    began = time.monotonic()
    while time.monotonic() - began < 9:  # three record leases, four visibility timeouts
        beat = api.post("/leases/heartbeat", json={"lease": leased["lease"]})
        assert beat.status_code == 200, beat.text
        assert beat.json()["cancel_requested"] is False
        assert lease(api, wait_s=leased["heartbeat_every_s"], worker_id="thief") == []
        assert app.get(job_id).lease_owner == "http:w1"
    assert api.post("/leases/complete", json={"lease": leased["lease"], "result": 1}).status_code == 200
    record = app.get(job_id)
    assert (record.status, record.attempt) == (JobStatus.SUCCEEDED, 1)


def test_a_cancel_reaches_the_worker_at_its_next_heartbeat_and_ends_the_job_cancelled(app, api):
    job_id = thumbnail(app)
    [leased] = lease(api)
    assert app.cancel(job_id) == "requested"
    beat = api.post("/leases/heartbeat", json={"lease": leased["lease"]})
    assert beat.status_code == 200 and beat.json()["cancel_requested"] is True, beat.text
    ended = api.post("/leases/fail", json={"lease": leased["lease"], "cancelled": True})
    assert ended.json()["status"] == "cancelled", ended.text
    assert app.get(job_id).status is JobStatus.CANCELLED


def test_failures_follow_the_types_backoff_and_a_permanent_one_is_dead_in_the_dlq_with_its_reason(app, api):
    job_id = thumbnail(app)
    failed_at = []
    for attempt in (1, 2):
        [leased] = lease(api, wait_s=20)
        assert (leased["job_id"], leased["attempt"]) == (job_id, attempt)
        error = {"type": "TypeError", "message": f"bad pixel {attempt}", "stack": "at render (render.js:1)"}
        r = api.post("/leases/fail", json={"lease": leased["lease"], "error": error})
        assert r.json()["status"] == "retry_scheduled", r.text
        failed_at.append(time.time())
        record = app.get(job_id)
        # the type's policy: 1 s, then 2 s (no jitter)
        assert record.run_at.timestamp() - failed_at[-1] == pytest.approx(float(attempt), abs=0.5)
        assert (record.last_error.error_class, record.last_error.message) == (
            "TypeError",
            f"bad pixel {attempt}",
        )
        assert record.last_error.traceback == "at render (render.js:1)"
    [third] = lease(api, wait_s=20)
    assert third["attempt"] == 3
    assert (
        api.post("/leases/complete", json={"lease": third["lease"], "result": "ok"}).json()["status"]
        == "succeeded"
    )

    doomed = thumbnail(app, mode="permanent")
    [leased] = lease(api, wait_s=20)
    assert leased["job_id"] == doomed
    error = {"type": "InvalidImage", "message": "not a PNG"}
    r = api.post("/leases/fail", json={"lease": leased["lease"], "error": error, "retryable": False})
    assert r.json() == {"job_id": doomed, "status": "dead", "attempt": 1}, r.text
    dead = api.get("/dlq", params={"queue": "render"}).json()
    [entry] = [m for m in dead["messages"] if m.get("job_id") == doomed]
    assert (entry["reason"], entry["error_class"], entry["error_message"]) == (
        "permanent error",
        "InvalidImage",
        "not a PNG",
    )


def test_external_payloads_are_validated_at_enqueue_by_model_and_by_json_schema(app):
    with pytest.raises(PayloadInvalid, match="width"):
        app.enqueue("render.thumbnail", {"url": "x"})
    with pytest.raises(PayloadInvalid, match="minimum"):
        app.enqueue("render.count", {"n": -1})
    assert app.get(app.enqueue("render.count", {"n": 3})).status is JobStatus.QUEUED


def test_the_types_route_lists_external_types_with_their_schema(app, api):
    types = {t["name"]: t for t in api.get("/types").json()["types"]}
    assert types["render.count"]["runs_in"] == "http"
    assert types["render.count"]["payload_schema"]["required"] == ["n"]
    assert types["render.thumbnail"]["payload_schema"]["required"] == ["url", "width"]
    assert types["py.caption"]["runs_in"] == "python"
    r = api.post("/leases", json={"worker_id": "w", "types": ["py.caption"], "wait_s": 0})
    assert r.status_code == 422 and "Python handler" in r.json()["detail"]


def test_a_python_worker_never_receives_an_external_queue(app, api, tmp_path):
    job_id = thumbnail(app)
    worker = worker_process(app, "tests.apps.polyglot:app", concurrency=2)
    try:
        caption = app.enqueue("py.caption", {"runs_dir": str(tmp_path), "title": "t"})
        wait_until(lambda: app.get(caption).status is JobStatus.SUCCEEDED, 60, "the Python job ran")
        assert app.get(job_id).status is JobStatus.QUEUED
    finally:
        kill_group(worker)
    [leased] = lease(api)
    assert leased["job_id"] == job_id


def test_flow_control_holds_for_leased_jobs_a_limit_a_pause_and_an_expiry(app, api):
    # a limit of one: two jobs enqueued, one leased; the other only once the first ended
    first, second = app.enqueue("render.gpu", {}), app.enqueue("render.gpu", {})
    held = lease(api, types=("render.gpu",), max_jobs=2, wait_s=3)
    assert len(held) == 1 and held[0]["job_id"] in (first, second)
    assert lease(api, types=("render.gpu",), wait_s=2, worker_id="w2") == []
    assert api.post("/leases/complete", json={"lease": held[0]["lease"]}).json()["status"] == "succeeded"
    [other] = lease(api, types=("render.gpu",), wait_s=20, worker_id="w2")
    assert {held[0]["job_id"], other["job_id"]} == {first, second}
    assert api.post("/leases/complete", json={"lease": other["lease"]}).status_code == 200
    # a pause (seen within PAUSE_CACHE_S, as by a Python worker): nothing is handed out until it resumes
    app.limits.pause("render.gpu")
    time.sleep(PAUSE_CACHE_S)
    paused = app.enqueue("render.gpu", {})
    assert lease(api, types=("render.gpu",), wait_s=3) == []
    app.limits.resume("render.gpu")
    [resumed] = lease(api, types=("render.gpu",), wait_s=20)
    assert resumed["job_id"] == paused
    assert api.post("/leases/complete", json={"lease": resumed["lease"]}).status_code == 200
    # an expiry: a job not started in time ends expired, never leased
    late = app.enqueue("render.count", {"n": 1}, expires_after=1)
    time.sleep(1.5)
    assert lease(api, types=("render.count",), wait_s=3) == []
    assert app.get(late).status is JobStatus.EXPIRED


def test_external_jobs_are_batch_items_and_each_end_is_counted_on_the_batch(app, api):
    batch = app.batches.create("py.collect")
    items = [batch.add("render.count", {"n": n}) for n in range(3)]
    batch.seal()
    leased: list[dict] = []
    while len(leased) < 3:
        leased += lease(api, types=("render.count",), max_jobs=3, wait_s=20)
    assert sorted(one["job_id"] for one in leased) == sorted(items)
    first, *rest = leased
    error = {"type": "ValueError", "message": "no"}
    assert (
        api.post(
            "/leases/fail", json={"lease": first["lease"], "error": error, "retryable": False}
        ).status_code
        == 200
    )
    for one in rest:
        assert (
            api.post(
                "/leases/complete", json={"lease": one["lease"], "result": one["payload"]["n"]}
            ).status_code
            == 200
        )
    wait_until(lambda: app.batches.get(batch.id).complete, 30, "the batch completed")
    assert app.batches.get(batch.id).counts == {"pending": 0, "succeeded": 2, "failed": 1}


def test_a_leased_job_costs_a_claim_a_read_per_heartbeat_and_a_read_and_a_write_to_end(
    ministack_url, make_app
):
    # GIVEN leases long enough that no heartbeat here renews one (60 s: renewed past half)
    app = make_app(ministack_url, lease_s=60.0, visibility_timeout_s=30)
    app.registry.include(polyglot.app.registry)
    app.limits.include(polyglot.app.limits)
    app.provision()
    jobs = [app.enqueue("render.count", {"n": n}) for n in range(3)]
    calls = app.requests.counts
    with (
        serving(app, token=TOKEN, lease_key=KEY) as url,
        httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30, verify=False
        ) as api,
    ):
        calls.clear()
        leased: list[dict] = []
        while len(leased) < 3:
            leased += lease(api, types=("render.count",), max_jobs=3, wait_s=5)
        # THEN leasing is the receives and one conditional write (the claim) per job
        assert sorted(j["job_id"] for j in leased) == sorted(jobs)
        assert {op: n for (_, op), n in calls.items() if op != "ReceiveMessage"} == {"UpdateItem": 3}
        calls.clear()
        for one in leased:
            assert api.post("/leases/heartbeat", json={"lease": one["lease"]}).status_code == 200
        # a heartbeat reads the claim back (the server keeps nothing) and hides the message again; the
        # slow-run watch reads the type's baseline once (kept 5 minutes per process: docs/observability.md)
        assert dict(calls) == {
            ("dynamodb", "GetItem"): 3,
            ("sqs", "ChangeMessageVisibilityBatch"): 3,
            ("dynamodb", "BatchGetItem"): 1,
        }
        calls.clear()
        # a heartbeat that carries a progress report renews the lease at once: the renewal is its one write
        report = {"fraction": 0.5, "message": "half way", "data": {"frames": 12}}
        for one in leased:
            assert (
                api.post("/leases/heartbeat", json={"lease": one["lease"], "progress": report}).status_code
                == 200
            )
        assert dict(calls) == {
            ("dynamodb", "GetItem"): 3,
            ("dynamodb", "UpdateItem"): 3,
            ("sqs", "ChangeMessageVisibilityBatch"): 3,
        }
        shown = [app.get(j).progress for j in jobs]
        assert {(p.fraction, p.message, p.report) for p in shown if p} == {(0.5, "half way", 1)}
        # a report out of bounds is 422 naming it, and writes nothing
        oversized = {"lease": leased[0]["lease"], "progress": {"data": {"blob": "x" * 3000}}}
        refused = api.post("/leases/heartbeat", json=oversized)
        assert refused.status_code == 422 and "2048" in refused.text, refused.text
        calls.clear()
        for one in leased:
            assert api.post("/leases/complete", json={"lease": one["lease"], "result": 1}).status_code == 200
        # an end reads the claim back, writes the fenced finish and deletes the message
        assert dict(calls) == {
            ("dynamodb", "GetItem"): 3,
            ("dynamodb", "UpdateItem"): 3,
            ("sqs", "DeleteMessageBatch"): 3,
        }
