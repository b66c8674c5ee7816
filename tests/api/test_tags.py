"""Tags, from outside: jobs enqueued with what they are about are found by exact tag over HTTP, the CLI and the console.

A served App on MiniStack (``own_api``): 1,000 jobs of 10 customers enqueued through the library,
a few through ``POST /jobs``, a chain and a batch whose steps and items inherit their tags; then
``GET /jobs?tag=``, ``sqsjobs jobs list --tag`` and ``/ui/jobs?tag=`` find exactly the jobs of
one tag, and DynamoDB's own ConsumedCapacity says what tagging cost (untagged jobs: nothing).
"""

from __future__ import annotations

import pytest

from sqsjobs import App, JobRequest
from sqsjobs.errors import TagsInvalid
from tests.cli import jobs_app
from tests.cli.conftest import invoke, new_app
from tests.conftest import FAST

CUSTOMERS = 10
JOBS = 1_000


def _listed(http, tag: str) -> list[str]:
    """Every job id ``GET /jobs?tag=`` lists, page after page."""
    ids: list[str] = []
    cursor = None
    while True:
        params = {"tag": tag, "limit": 100, **({"cursor": cursor} if cursor else {})}
        page = http.get("/jobs", params=params)
        assert page.status_code == 200, page.text
        body = page.json()
        assert body["index"] == "tags"
        ids += [row["id"] for row in body["jobs"]]
        cursor = body["next_cursor"]
        if cursor is None:
            return ids


@pytest.fixture(scope="module")
def tagged(own_api):
    """1,000 jobs, customer ``i % 10`` and order ``o-<i>`` each; their ids by customer."""
    app = own_api.world.app
    requests = [
        JobRequest(
            "orders.ok", {"order_id": f"o-{i}"}, tags={"customer": str(i % CUSTOMERS), "order": f"o-{i}"}
        )
        for i in range(JOBS)
    ]
    ids = app.enqueue_many(requests)
    by_customer: dict[str, set[str]] = {}
    for i, job_id in enumerate(ids):
        by_customer.setdefault(str(i % CUSTOMERS), set()).add(job_id)
    return by_customer


def _listed_since(http, tag: str, since: str) -> set[str]:
    found: set[str] = set()
    cursor = None
    while True:
        params = {"tag": tag, "since": since, "limit": 100, **({"cursor": cursor} if cursor else {})}
        page = http.get("/jobs", params=params).json()
        found |= {row["id"] for row in page["jobs"]}
        if (cursor := page["next_cursor"]) is None:
            return found


def test_a_customers_jobs_are_found_by_its_tag_over_http_exactly(own_api, tagged):
    listed = _listed(own_api.http, "customer=7")
    assert len(listed) == len(set(listed)) == JOBS // CUSTOMERS
    assert set(listed) == tagged["7"]
    # AND a window bounds the enqueue time: the last hour holds them all, an instant from now none
    assert _listed_since(own_api.http, "customer=7", "1h") == tagged["7"]
    assert _listed_since(own_api.http, "customer=7", "2099-01-01T00:00:00Z") == set()


def test_one_order_is_one_job_and_an_unknown_tag_is_none(own_api, tagged):
    [job_id] = _listed(own_api.http, "order=o-42")
    assert job_id in tagged["2"]
    assert own_api.http.get(f"/jobs/{job_id}").json()["tags"] == {"customer": "2", "order": "o-42"}
    assert _listed(own_api.http, "customer=nobody") == []


def test_the_cli_lists_the_same_jobs(own_api, tagged):
    # the CLI's own App on the same table (the served one keeps its clients)
    app = new_app(own_api.world.endpoint, own_api.world.app.name)
    found: set[str] = set()
    cursor: list[str] = []
    while True:
        run = invoke(
            app,
            own_api.world.endpoint,
            "jobs",
            "list",
            "--tag",
            "customer=3",
            "--limit",
            "100",
            "--json",
            *cursor,
        )
        assert run.code == 0, run.err
        found |= {row["id"] for row in run.json["jobs"]}
        if run.json["next_cursor"] is None:
            break
        cursor = ["--cursor", run.json["next_cursor"]]
    assert found == tagged["3"]
    # AND a malformed tag is a clear error, not a traceback
    bad = invoke(app, own_api.world.endpoint, "jobs", "list", "--tag", "customer")
    assert bad.code != 0 and "name=value" in bad.out + bad.err
    app.close()


def test_the_console_searches_by_tag_and_links_a_jobs_tags(own_api, tagged):
    page = own_api.http.get("/ui/jobs", params={"tag": "order=o-5"})
    assert page.status_code == 200, page.text
    [job_id] = [i for i in tagged["5"] if i in page.text]
    shown = own_api.http.get(f"/ui/jobs/{job_id}")
    assert "/ui/jobs?tag=customer%3D5" in shown.text


def test_post_jobs_takes_tags_and_refuses_bad_ones_with_the_field_named(own_api):
    made = own_api.http.post(
        "/jobs", json={"type": "orders.ok", "payload": {"order_id": "h-1"}, "tags": {"customer": "http-1"}}
    )
    assert made.status_code in (201, 202), made.text
    assert _listed(own_api.http, "customer=http-1") == [made.json()["id"]]
    for tags in ({"bad=name": "x"}, {"customer": ""}, {f"k{n}": "v" for n in range(11)}, {"c": "a\nb"}):
        refused = own_api.http.post(
            "/jobs", json={"type": "orders.ok", "payload": {"order_id": "h-2"}, "tags": tags}
        )
        assert refused.status_code == 422, (tags, refused.text)
        assert "tags" in refused.text
    with pytest.raises(TagsInvalid, match="at most 10"):
        own_api.world.app.enqueue("orders.ok", {"order_id": "x"}, tags={f"k{n}": "v" for n in range(11)})


def test_chain_steps_and_batch_items_inherit_their_tags(own_api):
    app = own_api.world.app
    chain_id = app.chains.start(
        [
            ("orders.ok", {"order_id": "c-1"}),
            JobRequest("orders.ok", {"order_id": "c-2"}, tags={"step": "two"}),
        ],
        tags={"customer": "chain-9"},
    )
    steps = _listed(own_api.http, "customer=chain-9")
    assert len(steps) == 2 and all(s.startswith(chain_id) for s in steps)
    assert [app.get(s).tags for s in sorted(steps)] == [
        {"customer": "chain-9"},
        {"customer": "chain-9", "step": "two"},
    ]
    batch = app.batches.create("orders.ok", tags={"customer": "batch-4"})
    item = batch.add("orders.ok", {"order_id": "b-1"}, tags={"order": "b-1"})
    assert _listed(own_api.http, "customer=batch-4") == [item]
    assert app.get(item).tags == {"customer": "batch-4", "order": "b-1"}


def test_a_tag_costs_one_write_unit_in_the_table_and_one_in_the_index_and_no_tag_costs_nothing(own_api):
    # an App of its own on the same table, measuring what DynamoDB says each request consumed
    app = jobs_app.register(
        App(own_api.world.app.name, endpoint_url=own_api.world.endpoint, measure_capacity=True, **FAST)
    )
    try:
        before = dict(app.requests.capacity)
        app.enqueue("orders.ok", {"order_id": "plain"})
        plain = {
            k: v - before.get(k, 0.0) for k, v in app.requests.capacity.items() if v != before.get(k, 0.0)
        }
        before = dict(app.requests.capacity)
        app.enqueue("orders.ok", {"order_id": "tagged"}, tags={"customer": "cost-1", "order": "cost-1"})
        tagged = {
            k: v - before.get(k, 0.0) for k, v in app.requests.capacity.items() if v != before.get(k, 0.0)
        }
    finally:
        app.close()
    assert plain == {("write", "table"): 1.0}
    assert tagged == {("write", "table"): 3.0, ("write", "index:tags"): 2.0}
