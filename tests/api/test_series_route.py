"""``GET /series`` over HTTP: the counts of the populated app's worker run, and its refusals."""

from __future__ import annotations

import pytest

from tests.api.helpers import assert_problem


def test_series_counts_what_the_worker_did(fresh_api):
    # GIVEN populate's run: 3 ok + flaky (1 failed, then ok) + 3 mails (2 dead after a retry, 1 dead at once)
    served = fresh_api()
    body = served.http.get("/series").json()
    totals = {k: sum(v) for k, v in body["counts"].items()}
    assert totals == {"started": 10, "succeeded": 4, "failed": 3, "dead": 3}, body
    assert body["buckets"] == 60 and body["bucket_s"] == 60 and body["truncated"] is False
    assert body["waiting"][-1] >= 1  # the delayed job waits
    only = served.http.get("/series", params={"type": "mail.send"}).json()
    assert {k: sum(v) for k, v in only["counts"].items()} == {
        "started": 5,
        "succeeded": 0,
        "failed": 2,
        "dead": 3,
    }


@pytest.mark.parametrize(
    ("query", "status", "field"),
    [
        ({"window": "2h"}, 422, "window"),
        ({"type": "nope"}, 422, "type"),
        ({"type": ""}, 422, "type"),
        ({"max_entries": 0}, 422, "max_entries"),
        ({"max_entries": "x"}, 422, "max_entries"),
    ],
)
def test_malformed_series_queries_are_problems(served, query, status, field):
    assert_problem(served.http.get("/series", params=query), status, field)


@pytest.mark.parametrize(
    ("path", "status", "field"),
    [("/workers/nope/drain", 404, "worker_id"), ("/workers/" + "w" * 257 + "/drain", 422, "worker_id")],
)
def test_draining_a_worker_that_is_not_registered_is_a_problem(served, path, status, field):
    problem = assert_problem(served.http.post(path), status, field)
    if status == 404:
        assert problem["type"].endswith(":worker-not-found")
    assert served.http.get("/workers").json()["workers"] == []
