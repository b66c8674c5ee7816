"""The malformed-request corpus: each bad request gets its 4xx and a problem body naming the field.

Never a 500, never a traceback, never the input echoed back. Runs in ``make test`` with the rest of
tests/api, against a served App on MiniStack whose payload limit is small enough to reach.
"""

from __future__ import annotations

import json
import tracemalloc
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from sqsjobs import App
from sqsjobs.api.body import DEFAULT_MAX_BODY_BYTES, DRAIN_BYTES
from tests.api.conftest import TOKEN
from tests.api.helpers import assert_problem, client, serving
from tests.cli import jobs_app
from tests.cli.conftest import fake_aws_env
from tests.conftest import FAST

MAX_PAYLOAD = 4096
SECRET = "corpus-secret-4242"


@dataclass(frozen=True)
class Case:
    """One malformed request and what must come back."""

    name: str
    method: str
    path: str
    status: int
    field: str | None
    json: Any = None
    content: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    problem: str | None = None


def body(**members: Any) -> dict[str, Any]:
    return {"type": "orders.ok", "payload": {"order_id": "ok"}, **members}


CORPUS = [
    # ── the body as a whole ──
    Case(
        "not json", "POST", "/jobs", 400, "body", content=b'{"type": "orders.ok",', problem="malformed-json"
    ),
    Case(
        "single quotes",
        "POST",
        "/jobs",
        400,
        "body",
        content=b"{'type': 'orders.ok'}",
        problem="malformed-json",
    ),
    Case(
        "trailing comma",
        "POST",
        "/jobs",
        400,
        "body",
        content=b'{"type": "orders.ok",}',
        problem="malformed-json",
    ),
    Case("not utf-8", "POST", "/jobs", 400, "body", content=b'{"type": "\xff\xfe"}'),
    Case("nested too deep", "POST", "/jobs", 400, "body", content=b"[" * 100_000 + b"]" * 100_000),
    Case("empty body", "POST", "/jobs", 422, "body", content=b""),
    Case("a list", "POST", "/jobs", 422, "body", json=[1, 2]),
    Case("a string", "POST", "/jobs", 422, "body", json="orders.ok"),
    Case("null", "POST", "/jobs", 422, "body", content=b"null"),
    Case(
        "text/plain",
        "POST",
        "/jobs",
        422,
        "body",
        content=json.dumps(body()).encode(),
        headers={"content-type": "text/plain"},
    ),
    Case(
        "oversized, declared",
        "POST",
        "/jobs",
        413,
        "body",
        content=b"x" * (1024 * 1024 + 1),
        problem="body-too-large",
    ),
    # ── members ──
    Case("no type", "POST", "/jobs", 422, "type", json={"payload": {}}),
    Case("empty type", "POST", "/jobs", 422, "type", json=body(type="")),
    Case("type not a string", "POST", "/jobs", 422, "type", json=body(type=5)),
    Case(
        "unknown type",
        "POST",
        "/jobs",
        422,
        "type",
        json=body(type="no.such.type"),
        problem="unknown-job-type",
    ),
    Case("misspelt member", "POST", "/jobs", 422, "idempotencyKey", json=body(idempotencyKey="k")),
    Case(
        "payload field missing",
        "POST",
        "/jobs",
        422,
        "payload",
        json=body(payload={}),
        problem="payload-invalid",
    ),
    Case(
        "payload field wrong type",
        "POST",
        "/jobs",
        422,
        "payload",
        json=body(payload={"order_id": [SECRET]}),
        problem="payload-invalid",
    ),
    Case(
        "payload not an object",
        "POST",
        "/jobs",
        422,
        "payload",
        json=body(payload=SECRET),
        problem="payload-invalid",
    ),
    Case(
        "payload NaN",
        "POST",
        "/jobs",
        422,
        "payload",
        content=b'{"type": "orders.ok", "payload": {"order_id": NaN}}',
    ),
    Case(
        "payload over max_payload_bytes",
        "POST",
        "/jobs",
        413,
        "payload",
        json=body(payload={"order_id": "x" * (MAX_PAYLOAD + 10)}),
        problem="payload-too-large",
    ),
    Case("negative delay", "POST", "/jobs", 422, "delay", json=body(delay=-1)),
    Case("delay as words", "POST", "/jobs", 422, "delay", json=body(delay="soon")),
    Case(
        "delay infinite", "POST", "/jobs", 422, "delay", content=b'{"type": "orders.ok", "delay": Infinity}'
    ),
    Case("delay of centuries", "POST", "/jobs", 422, "delay", json=body(delay=1e20)),
    Case("run_at without zone", "POST", "/jobs", 422, "run_at", json=body(run_at="2030-01-01T00:00:00")),
    Case("run_at not a date", "POST", "/jobs", 422, "run_at", json=body(run_at="tomorrow")),
    Case(
        "delay and run_at", "POST", "/jobs", 422, "run_at", json=body(delay=5, run_at="2030-01-01T00:00:00Z")
    ),
    Case("queue name invalid", "POST", "/jobs", 422, "queue", json=body(queue="no spaces!")),
    Case(
        "queue that does not exist",
        "POST",
        "/jobs",
        422,
        "queue",
        json=body(queue="nosuchqueue"),
        problem="no-such-queue",
    ),
    Case("empty tenant", "POST", "/jobs", 422, "tenant", json=body(tenant="")),
    Case("key too long", "POST", "/jobs", 422, "idempotency_key", json=body(idempotency_key="k" * 600)),
    # ── listing ──
    Case("limit zero", "GET", "/jobs?limit=0", 422, "limit"),
    Case("limit not a number", "GET", "/jobs?limit=ten", 422, "limit"),
    Case("limit too large", "GET", "/jobs?limit=100000", 422, "limit"),
    Case("unknown status", "GET", "/jobs?status=finished", 422, "status"),
    Case("since as words", "GET", "/jobs?since=yesterday", 422, "since"),
    Case("since without zone", "GET", "/jobs?since=2024-01-01T00:00:00", 422, "since"),
    Case("cursor garbage", "GET", "/jobs?cursor=not-a-cursor", 422, "cursor", problem="invalid-cursor"),
    # ── one job ──
    Case("unknown job", "GET", "/jobs/no-such-job", 404, "job_id", problem="job-not-found"),
    Case("job id too long", "GET", "/jobs/" + "j" * 300, 422, "job_id"),
    Case("cancel unknown job", "DELETE", "/jobs/no-such-job", 404, "job_id"),
    Case("retry unknown job", "POST", "/jobs/no-such-job/retry", 404, "job_id"),
    Case("retry, misspelt member", "POST", "/jobs/no-such-job/retry", 422, "payloads", json={"payloads": {}}),
    Case("retry, not json", "POST", "/jobs/no-such-job/retry", 400, "body", content=b"{payload:"),
    # ── queues and DLQ ──
    Case("window as words", "GET", "/queues?window=forever", 422, "window"),
    Case("counts not a boolean", "GET", "/queues?counts=maybe", 422, "counts"),
    Case("dlq limit zero", "GET", "/dlq?limit=0", 422, "limit"),
    Case("dlq queue invalid", "GET", "/dlq?queue=bad!", 422, "queue"),
    Case(
        "dlq queue that does not exist",
        "GET",
        "/dlq?queue=nosuchqueue",
        422,
        "queue",
        problem="no-such-queue",
    ),
    Case("dlq since as words", "GET", "/dlq?since=lately", 422, "since"),
    Case("replay dry_run as a string", "POST", "/dlq/replay", 422, "dry_run", json={"dry_run": "false"}),
    Case("replay limit zero", "POST", "/dlq/replay", 422, "limit", json={"limit": 0}),
    Case("replay negative rate", "POST", "/dlq/replay", 422, "rate", json={"rate": -1}),
    Case("replay payload for everyone", "POST", "/dlq/replay", 422, "payload", json={"payload": {"to": "x"}}),
    Case("replay queue invalid", "POST", "/dlq/replay", 422, "queue", json={"queue": ["bad!"]}),
    Case("replay since as words", "POST", "/dlq/replay", 422, "since", json={"since": "recently"}),
    Case("replay types not a list", "POST", "/dlq/replay", 422, "type", json={"type": 5}),
    Case("replay not json", "POST", "/dlq/replay", 400, "body", content=b"dry_run=false"),
    # ── routes and methods ──
    Case("no such route", "GET", "/nope", 404, None, problem="not-found"),
    Case("method not allowed", "PUT", "/jobs", 405, None, problem="method-not-allowed"),
]


@pytest.fixture(scope="module")
def corpus_api(ministack_url) -> Iterator[httpx.Client]:
    with fake_aws_env():
        app = App(
            f"m{uuid.uuid4().hex[:10]}", endpoint_url=ministack_url, max_payload_bytes=MAX_PAYLOAD, **FAST
        )
        jobs_app.register(app).provision()
    try:
        with serving(app, token=TOKEN) as url, client(url, TOKEN) as http:
            yield http
    finally:
        app.close()


def send(http: httpx.Client, case: Case) -> httpx.Response:
    if case.json is not None:
        return http.request(case.method, case.path, json=case.json, headers=case.headers)
    headers = {"content-type": "application/json", **case.headers}
    return http.request(case.method, case.path, content=case.content, headers=headers)


@pytest.mark.parametrize("case", CORPUS, ids=[c.name for c in CORPUS])
def test_a_malformed_request_gets_a_4xx_problem_naming_the_field(corpus_api, case):
    response = send(corpus_api, case)
    problem = assert_problem(response, case.status, case.field)
    assert response.status_code != 500
    if case.problem:
        assert problem["type"] == f"urn:sqsjobs:problem:{case.problem}"
    assert SECRET not in response.text  # the input is never echoed
    if problem.get("errors"):
        assert all(e["field"] and e["message"] and e["in"] for e in problem["errors"])


def test_an_invalid_payload_lists_each_validation_error_by_field(corpus_api):
    response = corpus_api.post("/jobs", json={"type": "orders.ok", "payload": {"order_id": 5, "extra": 1}})
    problem = assert_problem(response, 422, "payload")
    assert [e["field"] for e in problem["errors"]] == ["payload.order_id"]
    assert problem["errors"][0]["type"] == "string_type" and problem["errors"][0]["in"] == "body"


#: A chunked upload (no Content-Length to refuse it by) sixteen times the API's body limit: all the
#: server reads and drops of a refused upload before it answers (``DRAIN_BYTES``).
STREAMED_BYTES = 16 * DEFAULT_MAX_BODY_BYTES
#: What the server may hold while it refuses that upload: the limit's worth of body it read before it
#: knew, and the transport's buffers (about 2.5 MiB in all, whatever the upload's size); a quarter of
#: the upload.
HELD_AT_MOST = STREAMED_BYTES // 4


def test_an_oversized_body_without_a_length_is_refused_while_it_streams_and_never_held_whole(corpus_api):
    # GIVEN an upload sixteen times the body limit, sent in 64 KiB chunks with no length
    assert STREAMED_BYTES <= DRAIN_BYTES
    chunk = b" " * 65_536
    sent = 0

    def chunks() -> Iterator[bytes]:
        nonlocal sent
        while sent < STREAMED_BYTES:
            sent += len(chunk)
            yield chunk

    # WHEN it is posted to the server (a thread of this process), every Python allocation traced
    tracemalloc.start()
    try:
        response = corpus_api.post("/jobs", content=chunks(), headers={"content-type": "application/json"})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # THEN it is refused naming the body, after the whole upload went out, and the server never held
    # it: it dropped each chunk past the limit as it streamed in
    assert_problem(response, 413, "body")
    assert sent == STREAMED_BYTES
    print(f"\npeak traced while refusing a {STREAMED_BYTES} B upload: {peak} B")
    assert peak < HELD_AT_MOST, peak
