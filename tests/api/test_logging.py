"""Payloads are not logged: not by the routes, the problem handlers, uvicorn's access log or the App."""

from __future__ import annotations

import logging

from tests.api.conftest import TOKEN
from tests.api.helpers import assert_problem, client, serving
from tests.cli.conftest import new_app, populate

SECRET = "card-4111-1111-1111-1111"


def test_no_payload_reaches_a_log_line_whatever_the_request_and_its_outcome(ministack_url, caplog, capfd):
    # INFO everywhere, as a deployment runs (botocore's DEBUG lines dump whole requests by design),
    # and DEBUG for the API's own loggers and the servers'.
    caplog.set_level(logging.INFO)
    for name in ("sqsjobs", "uvicorn", "uvicorn.error", "uvicorn.access", "fastapi", "mangum"):
        caplog.set_level(logging.DEBUG, logger=name)
    world = populate(ministack_url, mails=1, perm=False, extra=False)
    unprovisioned = new_app(ministack_url)  # its table and queues do not exist: AWS refuses every call
    try:
        with serving(world.app, token=TOKEN) as url, client(url, TOKEN) as http:
            # accepted, with and without a key, delayed
            for extra in ({}, {"idempotency_key": "key-1"}, {"delay": 600, "tenant": "t"}):
                r = http.post("/jobs", json={"type": "orders.ok", "payload": {"order_id": SECRET}, **extra})
                assert r.status_code == 202, r.text
            # refused: invalid payload, idempotency conflict, malformed JSON, oversized body
            bad = http.post("/jobs", json={"type": "orders.ok", "payload": {"order_id": [SECRET]}})
            assert_problem(bad, 422, "payload")
            conflict = http.post(
                "/jobs",
                json={"type": "orders.ok", "payload": {"order_id": SECRET + "2"}, "idempotency_key": "key-1"},
            )
            assert_problem(conflict, 409, "idempotency_key")
            as_json = {"content-type": "application/json"}
            malformed = http.post("/jobs", content=f'{{"payload": "{SECRET}"'.encode(), headers=as_json)
            assert_problem(malformed, 400, "body")
            big = http.post("/jobs", content=f'{{"payload": "{SECRET * 50_000}"}}'.encode(), headers=as_json)
            assert_problem(big, 413, "body")
            # a retry with a corrected payload, refused and accepted
            [dead] = world.dead_value
            assert_problem(
                http.post(f"/jobs/{dead}/retry", json={"payload": {"to": [SECRET]}}), 422, "payload"
            )
            assert http.post(f"/jobs/{dead}/retry", json={"payload": {"to": SECRET}}).status_code == 200
            # a replay with one
            assert (
                http.post("/dlq/replay", json={"type": ["mail.send"], "payload": {"to": SECRET}}).status_code
                == 200
            )
        # an AWS failure (503), logged as such
        with serving(unprovisioned, token=TOKEN) as url, client(url, TOKEN) as http:
            failed = http.post("/jobs", json={"type": "orders.ok", "payload": {"order_id": SECRET}})
            assert_problem(failed, 503, None)
    finally:
        world.app.close()
        unprovisioned.close()
    out, err = capfd.readouterr()
    logged = caplog.text + out + err
    # THEN the log saw the requests (the capture works) ...
    assert "POST /jobs" in logged and "AWS call failed" in logged
    # ... and none of the payloads
    assert SECRET not in logged
