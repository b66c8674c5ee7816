"""``GET /jobs/{id}?wait=N``: a long poll that answers as soon as the job ends (MiniStack, a real worker process)."""

from __future__ import annotations

import time

import pytest

from sqsjobs import JobStatus
from sqsjobs.store.waiting import MAX_HTTP_WAIT_S
from tests.api.helpers import assert_problem, client, serving
from tests.integration.helpers import kill_group, wait_until, worker_process

pytestmark = pytest.mark.slow

TOKEN = "wait-token-1c2d"


@pytest.fixture
def app(results_app):
    return results_app


def test_a_wait_is_answered_when_the_job_ends_and_a_job_still_waiting_is_answered_as_it_is(app):
    waiting = app.enqueue("add", {"a": 1, "b": 2})
    with serving(app, token=TOKEN) as url, client(url, TOKEN) as http:
        # GIVEN no worker yet: a short wait answers 200 with the record as it is
        answer = http.get(f"/jobs/{waiting}", params={"wait": 1})
        assert answer.status_code == 200, answer.text
        assert answer.json()["status"] == "queued"
        # WHEN a worker runs a job that naps 2 s, while a request waits up to 20 s for it (timed from
        # the job's start: a worker process starting on a loaded machine is not what is measured)
        napping = app.enqueue("nap", {"sleep_s": 2.0})
        worker = worker_process(app, "tests.apps.results:app", concurrency=2)
        try:
            wait_until(lambda: app.get(napping).status is not JobStatus.QUEUED, 60, "the nap to start")
            start = time.monotonic()
            answer = http.get(
                f"/jobs/{napping}", params={"wait": MAX_HTTP_WAIT_S}, timeout=MAX_HTTP_WAIT_S + 10
            )
            held_s = time.monotonic() - start
        finally:
            kill_group(worker)
        # THEN the answer is the finished record, given before the wait ran out
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert (body["status"], body["result"]) == ("succeeded", "rested")
        assert held_s < MAX_HTTP_WAIT_S


def test_a_wait_longer_than_the_limit_or_negative_is_refused(app):
    job_id = app.enqueue("add", {"a": 1, "b": 2})
    with serving(app, token=TOKEN) as url, client(url, TOKEN) as http:
        for wait in (MAX_HTTP_WAIT_S + 1, -1, "soon"):
            assert_problem(http.get(f"/jobs/{job_id}", params={"wait": wait}), 422, "wait")
