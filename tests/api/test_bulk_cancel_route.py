"""``POST /jobs/bulk-cancel`` on MiniStack: the dry run lists, the confirmation cancels exactly those ids.

A job cancelled on its own between the two steps is skipped with why; a job that began to match
after the dry run, and the other tenant's, stay queued.
"""

from __future__ import annotations

import pytest

from sqsjobs import JobStatus
from tests.api.helpers import assert_problem


def test_a_bulk_cancel_cancels_exactly_the_dry_runs_ids_each_only_while_it_still_matches(fresh_api):
    served = fresh_api(extra=False, mails=0, perm=False)
    app, http = served.world.app, served.http
    acme = [app.enqueue("orders.ok", {"order_id": f"a-{n}"}, tenant="acme") for n in range(3)]
    globex = app.enqueue("orders.ok", {"order_id": "g-1"}, tenant="globex")
    # WHEN the operator asks for a dry run of acme's queued orders
    dry = http.post("/jobs/bulk-cancel", json={"type": "orders.ok", "tenant": "acme"})
    assert dry.status_code == 200, dry.text
    # THEN it lists them and changes nothing
    assert dry.json()["dry_run"] is True and dry.json()["matched"] == 3
    assert sorted(dry.json()["job_ids"]) == sorted(acme)
    assert all(app.get(i).status is JobStatus.QUEUED for i in acme)
    # ... meanwhile one is cancelled on its own, and one more acme order arrives
    assert http.delete(f"/jobs/{acme[0]}").json()["result"] == "cancelled"
    late = app.enqueue("orders.ok", {"order_id": "a-late"}, tenant="acme")
    # WHEN the operator confirms the dry run's ids
    done = http.post(
        "/jobs/bulk-cancel",
        json={"type": "orders.ok", "tenant": "acme", "dry_run": False, "job_ids": dry.json()["job_ids"]},
    )
    assert done.status_code == 200, done.text
    # THEN exactly the two still waiting were cancelled, with the operation's audit entry
    assert sorted(done.json()["cancelled"]) == sorted(acme[1:])
    assert done.json()["skipped"] == {acme[0]: "finished"}
    for job_id in acme[1:]:
        job = http.get(f"/jobs/{job_id}").json()
        assert job["status"] == "cancelled"
        [entry] = [e for e in job["audit"] if e.get("action") == "bulk_cancel"]
        assert entry["by"].startswith("operator@") and entry["from"] == "queued"
    # ... and the late one and the other tenant's are still queued
    assert app.get(late).status is JobStatus.QUEUED and app.get(globex).status is JobStatus.QUEUED
    # ... and ids of another type or tenant are never cancelled by a confirmation naming acme
    other = http.post(
        "/jobs/bulk-cancel",
        json={"type": "orders.ok", "tenant": "acme", "dry_run": False, "job_ids": [globex]},
    ).json()
    assert other == {"dry_run": False, "cancelled": [], "skipped": {globex: "changed"}}
    assert app.get(globex).status is JobStatus.QUEUED


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"type": "orders.ok", "dry_run": False}, "job_ids"),
        ({"type": "orders.ok", "status": "running"}, "status"),
        ({"type": "nope"}, "type"),
        ({"status": "queued"}, "type"),
        ({"type": "orders.ok", "dry_run": "no"}, "dry_run"),
        ({"type": "orders.ok", "job_ids": ["x"] * 201}, "job_ids"),
        ({"type": "orders.ok", "filter": {}}, "filter"),
    ],
)
def test_malformed_bulk_cancels_are_422_problems(served, body, field):
    assert_problem(served.http.post("/jobs/bulk-cancel", json=body), 422, field)
