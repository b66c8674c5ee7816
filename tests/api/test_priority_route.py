"""``POST /jobs/priority`` and ``/ui/priority``: malformed input, jobs that are not waiting, other sites.

The moves themselves, with a real worker process, are in tests/integration/test_reprioritize.py.
"""

from __future__ import annotations

import httpx
import pytest

from tests.api.helpers import assert_problem


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "to"),
        ({"to": "urgent", "type": "orders.ok"}, "to"),
        ({"to": "high"}, "type"),
        ({"to": "high", "type": "nope"}, "type"),
        ({"to": "high", "dry_run": False}, "job_ids"),
        ({"to": "high", "type": "orders.ok", "dry_run": False}, "job_ids"),
        ({"to": "high", "type": "orders.ok", "dry_run": "no"}, "dry_run"),
        ({"to": "high", "job_ids": ["x"] * 201}, "job_ids"),
        ({"to": "high", "job_ids": [""]}, "job_ids.0"),
        ({"to": "high", "job_ids": "abc"}, "job_ids"),
        ({"to": "high", "type": "orders.ok", "tenant": ""}, "tenant"),
        ({"to": "high", "type": "orders.ok", "level": "x"}, "level"),
    ],
)
def test_malformed_priority_changes_are_422_problems(served, body, field):
    assert_problem(served.http.post("/jobs/priority", json=body), 422, field)


def test_a_body_that_is_not_json_is_a_400_problem(served):
    response = served.http.post(
        "/jobs/priority", content=b'{"to": "high",', headers={"content-type": "application/json"}
    )
    assert response.status_code == 400, response.text


@pytest.mark.parametrize("dry_run", [True, False])
def test_a_job_that_is_not_waiting_is_refused_with_a_409_naming_it_and_nothing_moves(served, dry_run):
    world = served.world
    finished, dead = world.ok[0], world.dead_value[0]
    response = served.http.post(
        "/jobs/priority", json={"to": "high", "job_ids": [finished, dead], "dry_run": dry_run}
    )
    problem = assert_problem(response, 409, "job_ids")
    assert f"{finished} is succeeded" in problem["detail"] and f"{dead} is dead" in problem["detail"]
    assert world.app.get(finished).priority is None
    assert not [e for e in served.http.get(f"/jobs/{dead}").json()["audit"] if e.get("action") == "priority"]


def test_an_unknown_id_is_a_404_problem(served):
    response = served.http.post("/jobs/priority", json={"to": "low", "job_ids": ["0" * 32], "dry_run": False})
    assert_problem(response, 404, "job_ids")


def test_the_page_refuses_other_sites_jobs_that_are_not_waiting_and_a_confirmation_without_ids(served):
    http, world = served.http, served.world
    assert 'action="/ui/priority/dry-run"' in http.get("/ui/priority").text
    with httpx.Client(base_url=served.url, trust_env=False, verify=False) as another_site:
        forged = another_site.post(
            "/ui/priority",
            data={"to": "high", "job_id": world.waiting},
            headers={"Origin": "https://evil.example"},
        )
    assert forged.status_code == 403
    busy = http.post("/ui/priority/dry-run", data={"to": "high", "ids": world.ok[0]})
    assert busy.status_code == 409 and f"{world.ok[0]} is succeeded" in busy.text
    assert http.post("/ui/priority", data={"to": "high"}).status_code == 400
    assert http.post("/ui/priority", data={"to": "urgent", "job_id": world.waiting}).status_code == 400
