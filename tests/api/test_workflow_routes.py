"""Batches and chains over HTTP, against a real worker process of tests/apps/batches.py on MiniStack.

A batch made, filled and sealed over HTTP completes with its counts and its callback, run once
(the handlers log every run outside the worker); items to a sealed batch, unknown ids and malformed
bodies are problems naming what to fix; a chain made over HTTP runs its steps in order, and one
cancelled over HTTP runs none.
"""

from __future__ import annotations

from collections import Counter

import pytest

from sqsjobs import JobStatus
from tests.api.conftest import TOKEN
from tests.api.helpers import assert_problem, client, following, serving
from tests.apps import batches as tb
from tests.integration.helpers import kill_group, worker_process
from tests.integration.test_limits import wait_until

pytestmark = pytest.mark.slow

APP = "tests.apps.batches:app"


@pytest.fixture
def api(ministack_url, make_app, tmp_path, monkeypatch):
    monkeypatch.setenv("TEST_RUNS_DIR", str(tmp_path))
    app = make_app(ministack_url, lease_s=3.0, visibility_timeout_s=2, stale_after_s=2.0)
    app.registry.include(tb.app.registry)  # the handlers the worker process loads
    app.provision()
    procs = []

    def start() -> None:
        procs.append(
            worker_process(app, APP, TEST_RUNS_DIR=str(tmp_path), SQSJOBS_STALE_AFTER_S="2", concurrency=4)
        )

    with serving(app, token=TOKEN) as url, client(url, TOKEN) as http:
        yield app, http, start
    kill_group(*procs)


def test_a_batch_made_filled_and_sealed_over_http_completes_once_with_its_counts(api, tmp_path):
    _, http, start = api
    # GIVEN a batch made over HTTP, with a child batch
    made = http.post("/batches", json={"on_complete": "report", "final_stage": True})
    assert made.status_code == 201, made.text
    root = made.json()
    assert (root["status"], root["counts"], root["tree"]) == (
        "open",
        {"pending": 0, "succeeded": 0, "failed": 0},
        [],
    )
    child = http.post("/batches", json={"on_complete": "report", "parent": root["id"]}).json()
    # WHEN items are added (one key twice: counted once), one of them fails for good
    items = [
        {"type": "calc", "payload": {"n": 1}, "dedupe_key": "a"},
        {"type": "calc", "payload": {"n": 1}, "dedupe_key": "a"},
        {"type": "calc", "payload": {"n": 3}},
        {"type": "calc", "payload": {"fail": True}},
    ]
    added = http.post(f"/batches/{root['id']}/items", json={"items": items})
    assert added.status_code == 200, added.text
    ids = added.json()["job_ids"]
    assert len(ids) == 4 and ids[0] == ids[1] and len(set(ids)) == 3
    kid = http.post(f"/batches/{child['id']}/items", json={"items": [{"type": "calc", "payload": {"n": 5}}]})
    assert kid.status_code == 200, kid.text
    # ... the tree shows both, open, with their pending counts
    tree = http.get(f"/batches/{root['id']}").json()
    assert tree["counts"]["pending"] == 3 and [c["id"] for c in tree["tree"]] == [child["id"]]
    assert tree["tree"][0]["counts"]["pending"] == 1
    sealed = http.post(f"/batches/{root['id']}/seal")
    assert sealed.status_code == 200 and sealed.json()["status"] in ("sealed", "complete")
    # THEN a worker process completes it: counts per node, the callback run once per batch
    with following(str(http.base_url), f"/batches/{root['id']}/events", TOKEN) as seen:
        start()
        wait_until(lambda: http.get(f"/batches/{root['id']}").json()["status"] == "complete", 60, "the batch")
    done = http.get(f"/batches/{root['id']}").json()
    # ... which a client following the batch's events saw move, and end as it is now
    first = seen[0]
    assert first[0] == "status" and (first[1]["status"], first[1]["counts"]["pending"]) == ("sealed", 3)
    assert seen[-1] == ("end", done) and [name for name, _ in seen[:-1]] == ["status"] * (len(seen) - 1)
    assert done["counts"] == {"pending": 0, "succeeded": 2, "failed": 1}
    assert done["callback_id"] and done["tree"][0]["status"] == "complete"
    assert done["tree"][0]["counts"] == {"pending": 0, "succeeded": 1, "failed": 0}
    wait_until(lambda: len(tb.read(tmp_path, "callbacks")) == 2, 30, "both callbacks")
    assert Counter(c["batch"] for c in tb.read(tmp_path, "callbacks")) == {root["id"]: 1, child["id"]: 1}
    # ... and an item added now is refused, naming the batch; nothing was written
    late = assert_problem(
        http.post(f"/batches/{root['id']}/items", json={"items": [{"type": "calc", "payload": {}}]}),
        409,
        "batch_id",
    )
    assert late["type"].endswith(":batch-sealed") and late["detail"].startswith("items.0: ")
    assert http.get(f"/batches/{root['id']}").json()["counts"]["succeeded"] == 2


def test_a_batch_item_the_app_refuses_names_the_item_and_the_ones_before_it_stay_added(api):
    app, http, _ = api
    batch = http.post("/batches", json={"on_complete": "report"}).json()
    # an unknown type anywhere in the list: refused before anything is written
    unknown = assert_problem(
        http.post(
            f"/batches/{batch['id']}/items",
            json={"items": [{"type": "calc", "payload": {}}, {"type": "nope"}]},
        ),
        422,
        "items.1.type",
    )
    assert unknown["type"].endswith(":unknown-job-type")
    assert http.get(f"/batches/{batch['id']}").json()["counts"]["pending"] == 0
    # the same key with another payload: the item before it stays added, this one is named
    clash = [
        {"type": "calc", "payload": {"n": 1}, "dedupe_key": "k"},
        {"type": "calc", "payload": {"n": 2}, "dedupe_key": "k"},
    ]
    refused = assert_problem(
        http.post(f"/batches/{batch['id']}/items", json={"items": clash}), 409, "items.1.dedupe_key"
    )
    assert refused["type"].endswith(":idempotency-conflict") and refused["detail"].startswith("items.1: ")
    assert http.get(f"/batches/{batch['id']}").json()["counts"]["pending"] == 1
    # a cancelled batch takes no items; its waiting items are cancelled with it
    again = http.post(f"/batches/{batch['id']}/items", json={"items": clash[:1]})
    [job_id] = again.json()["job_ids"]
    cancelled = http.post(f"/batches/{batch['id']}/cancel")
    assert cancelled.status_code == 200 and cancelled.json()["failed"] is True
    assert app.get(job_id, load_result=False).status is JobStatus.CANCELLED
    assert_problem(
        http.post(f"/batches/{batch['id']}/items", json={"items": [{"type": "calc", "payload": {}}]}),
        409,
        "batch_id",
    )


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "field"),
    [
        ("GET", "/batches/nope", None, 404, "batch_id"),
        ("POST", "/batches/nope/seal", None, 404, "batch_id"),
        ("POST", "/batches/nope/cancel", None, 404, "batch_id"),
        ("POST", "/batches/nope/items", {"items": [{"type": "calc", "payload": {}}]}, 404, "batch_id"),
        ("GET", "/chains/nope", None, 404, "chain_id"),
        ("POST", "/chains/nope/cancel", None, 404, "chain_id"),
        ("POST", "/batches", {}, 422, "on_complete"),
        ("POST", "/batches", {"on_complete": "nope"}, 422, "type"),
        ("POST", "/batches", {"on_complete": "report", "shards": 65}, 422, "shards"),
        ("POST", "/batches", {"on_complete": "report", "final_stage": "yes"}, 422, "final_stage"),
        ("POST", "/batches", {"on_complete": "report", "colour": "red"}, 422, "colour"),
        ("POST", "/batches/x/items", {"items": []}, 422, "items"),
        ("POST", "/batches/x/items", {"items": [{"type": "calc"}] * 101}, 422, "items"),
        ("POST", "/batches/x/items", {"items": [{"payload": {}}]}, 422, "items.0.type"),
        ("POST", "/batches/x/items", {"items": [{"type": "calc", "queue": "no such"}]}, 422, "items.0.queue"),
        ("POST", "/chains", {"steps": []}, 422, "steps"),
        ("POST", "/chains", {"steps": [{"type": "calc"}] * 100}, 422, "steps"),
        ("POST", "/chains", {"steps": [{"type": "nope"}]}, 422, "steps.0.type"),
        ("POST", "/chains", {"steps": "calc"}, 422, "steps"),
        ("GET", "/batches/" + "x" * 257, None, 422, "batch_id"),
    ],
)
def test_malformed_or_unknown_workflow_requests_are_problems(api, method, path, body, status, field):
    _, http, _ = api
    assert_problem(http.request(method, path, json=body), status, field)


def test_a_chain_made_over_http_runs_its_steps_in_order_and_a_cancelled_one_runs_none(api, tmp_path):
    _, http, start = api
    made = http.post("/chains", json={"steps": [{"type": "calc", "payload": {"n": n}} for n in (1, 2, 3)]})
    assert made.status_code == 201, made.text
    chain = made.json()
    assert chain["status"] == "running" and [s["status"] for s in chain["steps"]] == [
        "queued",
        "waiting",
        "waiting",
    ]
    other = http.post("/chains", json={"steps": [{"type": "calc", "payload": {"n": 9}}] * 2}).json()
    stopped = http.post(f"/chains/{other['id']}/cancel")
    assert stopped.json() == {"id": other["id"], "result": "cancelled"}
    with following(str(http.base_url), f"/chains/{chain['id']}/events", TOKEN) as seen:
        start()
        wait_until(
            lambda: http.get(f"/chains/{chain['id']}").json()["status"] == "succeeded", 60, "the chain"
        )
    # a client following the chain's events saw each step start, and its end
    assert seen[-1] == ("end", http.get(f"/chains/{chain['id']}").json())
    currents = [view["current"] for name, view in seen if name == "status"]
    assert currents[0] == 0 and currents == sorted(currents) and set(currents) <= {0, 1, 2}
    steps = http.get(f"/chains/{chain['id']}", params={"results": "true"}).json()["steps"]
    assert [(s["status"], s["result"], s["error"]) for s in steps] == [
        ("succeeded", n * 2, None) for n in (1, 2, 3)
    ]
    assert "result" not in http.get(f"/chains/{chain['id']}").json()["steps"][0]
    runs = [r["job"] for r in tb.read(tmp_path, "runs")]
    assert runs == [s["job_id"] for s in steps]  # each once, in order; the cancelled chain's never
    assert http.get(f"/chains/{other['id']}").json()["status"] == "cancelled"
