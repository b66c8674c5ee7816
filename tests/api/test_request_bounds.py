"""Every request of issue 47 answers a 4xx naming the field and the rule, over real HTTP on MiniStack.

Extreme dedup windows (an overflow, a window that rounds to 0 ms, a ``debounce_max`` DynamoDB cannot
store) were 500s and 503s; an unknown queue in a chain's step or a batch's item was a 503 and an
unknown step type a 201; a few answers were not in the document, and ``Allow`` left out methods.
"""

from __future__ import annotations

import pytest

from sqsjobs import Debounce, DedupeFor, DedupeInvalid, Throttle
from sqsjobs.dedupe.modes import MAX_WINDOW_S
from tests.api.helpers import assert_problem, client

ORDER = {"type": "orders.ok", "payload": {"order_id": "o-1"}, "idempotency_key": "k"}


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"throttle": 1e308}, "throttle"),  # was 500: OverflowError in dedupe/modes.py
        ({"dedupe_for": 1e308}, "dedupe_for"),
        ({"debounce": 1e308}, "debounce"),  # was 500: OverflowError in dedupe/debounce.py
        ({"dedupe_for": 2.2e-16}, "dedupe_for"),  # was 500: a 0 ms window, ZeroDivisionError
        ({"debounce": 1, "debounce_max": 1e308}, "debounce_max"),  # was 503: DynamoDB's number overflow
    ],
)
def test_a_dedup_window_out_of_bounds_is_a_422_naming_it(own_api, options, field):
    answer = own_api.http.post("/jobs", json={**ORDER, **options})
    body = assert_problem(answer, 422, field)
    assert body["type"].endswith(":invalid-request"), body
    assert "less than or equal" in body["detail"] or "greater than or equal" in body["detail"], body


def test_the_largest_window_the_document_allows_is_taken(own_api):
    answer = own_api.http.post("/jobs", json={**ORDER, "idempotency_key": "max", "throttle": MAX_WINDOW_S})
    assert answer.status_code == 202, answer.text


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: Throttle(1e308), "throttle"),
        (lambda: DedupeFor(2.2e-16), "dedupe_for"),
        (lambda: Debounce(1, max=1e308), "debounce_max"),
    ],
    ids=["throttle", "dedupe_for", "debounce_max"],
)
def test_app_enqueue_refuses_the_same_windows_with_a_typed_error(own_api, make, field):
    # The typed mode refuses the window where it is made, before anything is sent.
    with pytest.raises(DedupeInvalid, match="between") as refused:
        own_api.world.app.enqueue("orders.ok", {"order_id": "o"}, idempotency_key="k", dedupe=make())
    assert refused.value.field == field


def test_a_chain_step_on_an_unknown_queue_is_a_422_naming_the_step(own_api):
    steps = [
        {"type": "orders.ok", "payload": {"order_id": "a"}},
        {"type": "orders.ok", "payload": {"order_id": "b"}, "queue": "nope"},
    ]
    body = assert_problem(own_api.http.post("/chains", json={"steps": steps}), 422, "steps.1.queue")
    assert body["type"].endswith(":no-such-queue"), body


def test_a_chain_step_of_an_unregistered_type_is_a_422_naming_the_step(own_api):
    steps = [{"type": "orders.ok", "payload": {"order_id": "a"}}, {"type": "no.such.type"}]
    body = assert_problem(own_api.http.post("/chains", json={"steps": steps}), 422, "steps.1.type")
    assert body["type"].endswith(":unknown-job-type"), body


def test_a_chain_step_whose_payload_its_handler_refuses_is_a_422_naming_the_step(own_api):
    steps = [{"type": "orders.ok", "payload": {"order_id": "a"}}, {"type": "orders.ok", "payload": {}}]
    body = assert_problem(own_api.http.post("/chains", json={"steps": steps}), 422, "steps.1.payload")
    assert body["errors"][0]["field"] == "steps.1.payload.order_id", body
    assert body["type"].endswith(":payload-invalid"), body


def test_a_batch_item_on_an_unknown_queue_is_a_422_naming_the_item(own_api):
    http = own_api.http
    created = http.post("/batches", json={"on_complete": "orders.ok"})
    assert created.status_code == 201, created.text
    items = [{"type": "orders.ok", "payload": {"order_id": "a"}, "queue": "nope"}]
    answer = http.post(f"/batches/{created.json()['id']}/items", json={"items": items})
    body = assert_problem(answer, 422, "items.0.queue")
    assert body["type"].endswith(":no-such-queue"), body


def test_answers_the_issue_found_undocumented_are_in_the_document(own_api):
    http, document = own_api.http, own_api.http.get("/openapi.json").json()
    paths = document["paths"]
    # GET /workers without a token: 401 (it declared only 200)
    with client(own_api.url) as anonymous:
        assert_problem(anonymous.get("/workers"), 401, "Authorization")
    assert "401" in paths["/workers"]["get"]["responses"]
    # a body that is not JSON: 400 malformed-json (undeclared on these two)
    for path, documented in (("/dlq/replay", "/dlq/replay"), ("/tokens/t1", "/tokens/{token_id}")):
        answer = http.post(path, content=b"{not json", headers={"Content-Type": "application/json"})
        assert_problem(answer, 400, "body")
        assert "400" in paths[documented]["post"]["responses"], documented


def test_every_operation_declares_the_problems_every_route_can_answer(own_api):
    document = own_api.http.get("/openapi.json").json()
    missing = {}
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            wanted = {"400", "401", "503"} | (
                {"403", "413"} if method in ("post", "put", "delete") else set()
            )
            if not wanted <= set(operation["responses"]):
                missing[f"{method.upper()} {path}"] = sorted(wanted - set(operation["responses"]))
    assert missing == {}


def test_a_method_a_path_lacks_is_a_405_whose_allow_lists_every_method_of_the_path(own_api):
    answer = own_api.http.request("OPTIONS", "/jobs")
    assert_problem(answer, 405, None)
    assert {m.strip() for m in answer.headers["allow"].split(",")} >= {"GET", "POST"}, answer.headers


def test_the_document_states_the_types_payloads_queues_and_exclusive_options_the_server_enforces(own_api):
    schemas = own_api.http.get("/openapi.json").json()["components"]["schemas"]

    def resolve(schema):
        return schemas[schema["$ref"].rsplit("/", 1)[1]] if "$ref" in schema else schema

    types = sorted(spec.name for spec in own_api.world.app.registry)
    for name in ("EnqueueRequest", "JobSpec", "BatchItem"):
        # one named request per type, told apart by ``type``, pairing it with its handler's payload
        union = schemas[name]
        assert sorted(union["discriminator"]["mapping"]) == types
        branches = {resolve(b)["properties"]["type"]["const"]: resolve(b) for b in union["oneOf"]}
        assert sorted(branches) == types
        ok = branches["orders.ok"]
        assert resolve(ok["properties"]["payload"])["required"] == ["order_id"]
        assert "payload" in ok["required"]
        queue = next(o for o in ok["properties"]["queue"]["anyOf"] if o.get("type") == "string")
        assert queue["enum"] == own_api.world.app.registry.queues()
    enqueue = resolve(schemas["EnqueueRequest"]["oneOf"][0])
    # the options that exclude each other, and the bounds, in every type's request
    refused = enqueue["not"]["anyOf"]
    assert {"required": ["throttle", "debounce"]} in refused
    assert {"required": ["delay", "run_at"]} in refused
    throttle = next(o for o in enqueue["properties"]["throttle"]["anyOf"] if o.get("type") == "number")
    assert throttle["minimum"] == 0.001 and throttle["maximum"] == MAX_WINDOW_S
