"""The API's Lambda handler, given API Gateway events of both shapes (REST v1, HTTP API v2), against MiniStack.

The events are what API Gateway delivers to a proxy integration; the handler is called in this
process, the App it loads (``SQSJOBS_APP``) pointed at MiniStack.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from typing import Any
from urllib.parse import urlencode

import pytest

from sqsjobs import JobStatus
from sqsjobs.api import lambda_handler
from sqsjobs.api.principals import TOKEN_ENV
from tests.api import lambda_app

TOKEN = "lambda-token-91"


def rest_event(
    method: str,
    path: str,
    *,
    body: Any = None,
    query: dict[str, str] | None = None,
    headers: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A REST API (payload 1.0) proxy event, as a ``{proxy+}`` resource on stage ``prod`` delivers it."""
    headers = {"Host": "abc123.execute-api.eu-west-1.amazonaws.com", **(headers or {})}
    return {
        "resource": "/{proxy+}",
        "path": path,
        "httpMethod": method,
        "headers": headers,
        "multiValueHeaders": {k: [v] for k, v in headers.items()},
        "queryStringParameters": query,
        "multiValueQueryStringParameters": {k: [v] for k, v in query.items()} if query else None,
        "pathParameters": {"proxy": path.lstrip("/")},
        "stageVariables": None,
        "requestContext": {
            "resourcePath": "/{proxy+}",
            "httpMethod": method,
            "path": f"/prod{path}",
            "stage": "prod",
            "requestId": "req-rest",
            "accountId": "123456789012",
            "apiId": "abc123",
            "identity": {"sourceIp": "192.0.2.10", "userArn": "arn:aws:iam::123456789012:user/ops"},
        },
        "body": body,
        "isBase64Encoded": False,
    }


def http_event(
    method: str,
    path: str,
    *,
    body: Any = None,
    query: dict[str, str] | None = None,
    headers: dict[str, str] | None = None,
) -> dict[str, Any]:
    """An HTTP API (payload 2.0) event on the ``$default`` route and stage, IAM-authorised."""
    return {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": path,
        "rawQueryString": urlencode(query or {}),
        "headers": {
            "host": "abc123.execute-api.eu-west-1.amazonaws.com",
            **{k.lower(): v for k, v in (headers or {}).items()},
        },
        "queryStringParameters": query,
        "requestContext": {
            "accountId": "123456789012",
            "apiId": "abc123",
            "domainName": "abc123.execute-api.eu-west-1.amazonaws.com",
            "http": {
                "method": method,
                "path": path,
                "protocol": "HTTP/1.1",
                "sourceIp": "192.0.2.10",
                "userAgent": "test",
            },
            "requestId": "req-http",
            "routeKey": "$default",
            "stage": "$default",
            "time": "01/Jan/2030:00:00:00 +0000",
            "timeEpoch": 1893456000000,
            "authorizer": {
                "iam": {"accountId": "123456789012", "userArn": "arn:aws:iam::123456789012:user/ops"}
            },
        },
        "body": body,
        "isBase64Encoded": False,
    }


SHAPES = {"rest": rest_event, "http": http_event}


@pytest.fixture
def handler(ministack_url, monkeypatch):
    monkeypatch.setenv("SQSJOBS_APP", "tests.api.lambda_app:app")
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    lambda_app.app.configure(endpoint_url=ministack_url)
    lambda_app.app.provision()
    lambda_handler._adapter.cache_clear()
    yield lambda_handler.handler
    loop = lambda_handler._loop()
    loop.run_until_complete(lambda_app.app.aclose())
    loop.close()
    asyncio.set_event_loop(None)
    lambda_handler._loop.cache_clear()
    lambda_handler._adapter.cache_clear()
    lambda_app.app.close()


def call(handler, event: dict[str, Any]) -> tuple[int, dict[str, str], Any]:
    response = handler(event, None)
    body = response.get("body") or ""
    if response.get("isBase64Encoded"):
        body = base64.b64decode(body).decode()
    headers = {k.lower(): v for k, v in (response.get("headers") or {}).items()}
    return response["statusCode"], headers, json.loads(body) if body else None


@pytest.mark.parametrize("shape", SHAPES)
def test_the_handler_serves_enqueue_get_list_and_cancel_from_api_gateway_events(handler, shape):
    event = SHAPES[shape]
    auth = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    # POST /jobs
    payload = json.dumps({"type": "orders.ok", "payload": {"order_id": f"lambda-{shape}"}, "delay": 600})
    status, headers, body = call(handler, event("POST", "/jobs", body=payload, headers=auth))
    assert status == 202, body
    job_id = body["id"]
    assert headers["location"] == f"/jobs/{job_id}"
    # GET /jobs/{id}: the record
    status, _, got = call(handler, event("GET", f"/jobs/{job_id}", headers=auth))
    assert status == 200 and got["id"] == job_id and got["status"] == "queued"
    # GET /jobs with a query string
    status, _, page = call(
        handler, event("GET", "/jobs", query={"type": "orders.ok", "limit": "100"}, headers=auth)
    )
    assert status == 200 and job_id in {r["id"] for r in page["jobs"]}
    # DELETE /jobs/{id}
    status, _, cancelled = call(handler, event("DELETE", f"/jobs/{job_id}", headers=auth))
    assert (status, cancelled) == (200, {"id": job_id, "result": "cancelled"})
    assert lambda_app.app.get(job_id).status is JobStatus.CANCELLED


@pytest.mark.parametrize("shape", SHAPES)
def test_errors_are_problem_bodies_in_plain_text_and_the_token_is_checked(handler, shape):
    event = SHAPES[shape]
    auth = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    response = handler(event("POST", "/jobs", body='{"type": ', headers=auth), None)
    assert response["statusCode"] == 400 and not response.get("isBase64Encoded")
    problem = json.loads(response["body"])
    assert problem["field"] == "body" and "Traceback" not in response["body"]
    status, headers, body = call(
        handler, event("POST", "/jobs", body=json.dumps({"type": "nope"}), headers=auth)
    )
    assert (status, body["field"], headers["content-type"]) == (422, "type", "application/problem+json")
    status, _, body = call(handler, event("GET", "/jobs", headers={"Authorization": "Bearer wrong"}))
    assert (status, body["field"]) == (401, "Authorization")


@pytest.mark.parametrize("shape", SHAPES)
def test_an_event_stream_ends_within_the_gateways_time_and_arrives_whole(handler, shape, monkeypatch):
    # API Gateway buffers an answer and cuts it at 29 s: the Lambda API caps a stream (25 s; 1 s here)
    monkeypatch.setenv(lambda_handler.STREAM_CAP_ENV, "1")
    lambda_handler._adapter.cache_clear()
    event = SHAPES[shape]
    auth = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    payload = json.dumps({"type": "orders.ok", "payload": {"order_id": f"stream-{shape}"}, "delay": 600})
    _, _, body = call(handler, event("POST", "/jobs", body=payload, headers=auth))
    started = time.monotonic()
    response = handler(event("GET", f"/jobs/{body['id']}/events", query={"max_s": "900"}, headers=auth), None)
    assert time.monotonic() - started < 10  # not the 900 s asked for
    assert response["statusCode"] == 200 and not response.get("isBase64Encoded")
    headers = {k.lower(): v for k, v in (response.get("headers") or {}).items()}
    assert headers["content-type"].startswith("text/event-stream")
    # the whole stream, as the browser's EventSource reads it before asking again
    assert response["body"].startswith("retry: 2000")
    assert 'event: status\ndata: {"status":"queued","attempt":0,"reason":null}' in response["body"]


def test_the_handler_string_infra_configures_names_this_handler():
    module, _, attribute = lambda_handler.HANDLER.rpartition(".")
    assert (module, attribute) == (lambda_handler.__name__, "handler")
    assert lambda_handler.handler is __import__("lambda_handlers.api", fromlist=["handler"]).handler
