"""Dead jobs grouped by error signature over HTTP, and retry-the-group: the dry run's ids, exactly.

The jobs died in a worker (``populate``: two ``smtp refused <address>`` ValueErrors and one
``mailbox perm@... is gone`` PermanentError); a third dies in the first group after the dry run and
must not be swept in by the confirmation.
"""

from __future__ import annotations

import pytest

from sqsjobs import JobStatus
from sqsjobs.testing import all_finished, work_until
from tests.api.helpers import assert_problem
from tests.cli.conftest import new_app

SMTP = "ValueError: smtp refused <email>"
GONE = "PermanentError: mailbox <email> is gone"


def test_dead_jobs_are_grouped_and_a_group_retry_requeues_exactly_the_dry_runs_ids(fresh_api):
    served = fresh_api(extra=False)
    world, http = served.world, served.http
    # GIVEN the groups: each with its count, ids, types, times and an example message
    body = http.get("/dead/groups").json()
    groups = {g["signature"]: g for g in body["groups"]}
    assert body["jobs"] == 3 and body["truncated"] is False and set(groups) == {SMTP, GONE}
    assert groups[SMTP]["count"] == 2 and set(groups[SMTP]["job_ids"]) == set(world.dead_value)
    assert groups[GONE]["job_ids"] == [world.dead_perm] and groups[GONE]["types"] == ["mail.send"]
    assert (
        groups[SMTP]["example"].startswith("smtp refused user")
        and groups[SMTP]["error_class"] == "ValueError"
    )
    assert groups[SMTP]["first_seen"] <= groups[SMTP]["last_seen"]
    # WHEN the operator asks for a dry run of the smtp group: its ids, nothing changed
    dry = http.post("/dead/groups/retry", json={"signature": SMTP}).json()
    assert dry["dry_run"] is True and set(dry["job_ids"]) == set(world.dead_value)
    assert all(world.app.get(i).status is JobStatus.DEAD for i in dry["job_ids"])
    # ... and then one more job dies with the same signature
    twin = new_app(world.endpoint, world.app.name)
    try:
        late = twin.enqueue("mail.send", {"to": "late@example.com"})
        work_until(twin, all_finished(twin, [late]), timeout_s=30)
    finally:
        twin.close()
    assert http.get("/dead/groups").json()["groups"][0]["count"] == 3
    # WHEN the confirmation names the dry run's ids
    done = http.post(
        "/dead/groups/retry", json={"signature": SMTP, "dry_run": False, "job_ids": dry["job_ids"]}
    )
    assert done.status_code == 200, done.text
    # THEN exactly those were retried; the late one and the other group are still dead
    assert sorted(done.json()["retried"]) == sorted(dry["job_ids"]) and done.json()["skipped"] == {}
    assert all(world.app.get(i).status is JobStatus.QUEUED for i in dry["job_ids"])
    assert world.app.get(late).status is JobStatus.DEAD
    assert world.app.get(world.dead_perm).status is JobStatus.DEAD
    assert any(e.get("action") == "retry" for e in http.get(f"/jobs/{dry['job_ids'][0]}").json()["audit"])
    # ... and confirming again skips them, saying why; an id of another group is skipped too
    again = http.post(
        "/dead/groups/retry",
        json={"signature": SMTP, "dry_run": False, "job_ids": [*dry["job_ids"], world.dead_perm, "nope"]},
    ).json()
    assert again["retried"] == []
    assert all(again["skipped"][i] == "no longer dead: queued" for i in dry["job_ids"])
    assert again["skipped"][world.dead_perm] == f"now in another group: {GONE}"
    assert again["skipped"]["nope"] == "no such job"
    assert world.app.get(world.dead_perm).status is JobStatus.DEAD


@pytest.mark.parametrize(
    ("method", "path", "body", "field"),
    [
        ("POST", "/dead/groups/retry", {"signature": "x", "dry_run": False}, "job_ids"),
        ("POST", "/dead/groups/retry", {"signature": "x", "dry_run": False, "job_ids": []}, "job_ids"),
        ("POST", "/dead/groups/retry", {"dry_run": True}, "signature"),
        ("POST", "/dead/groups/retry", {"signature": ""}, "signature"),
        ("POST", "/dead/groups/retry", {"signature": "x", "dry_run": "false"}, "dry_run"),
        ("POST", "/dead/groups/retry", {"signature": "x", "job_ids": ["a"] * 201}, "job_ids"),
        ("POST", "/dead/groups/retry", {"signature": "x", "job_ids": [""]}, "job_ids.0"),
        ("POST", "/dead/groups/retry", {"signature": "x", "ids": []}, "ids"),
        ("GET", "/dead/groups?max_jobs=0", None, "max_jobs"),
        ("GET", "/dead/groups?max_jobs=many", None, "max_jobs"),
    ],
)
def test_malformed_group_requests_are_422_problems_and_change_nothing(served, method, path, body, field):
    assert_problem(served.http.request(method, path, json=body), 422, field)
    assert all(served.world.app.get(i).status is JobStatus.DEAD for i in served.world.dead)
