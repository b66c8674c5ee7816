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
