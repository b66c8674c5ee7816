"""Following a job live: progress rides on the lease renewal, and a browser follows it over SSE with a scoped token.

From outside, with real processes on MiniStack: a worker process runs a handler that reports
progress ten times (``tests/apps/progressing.py``), its DynamoDB requests pass through a proxy
that keeps every write's body, and a ``sqsjobs api`` process with named tokens serves the job's
event stream to a client that holds only a watch token, as a browser's ``EventSource`` would.
"""

from __future__ import annotations

import json
import threading
import time
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from bench.proxy import AwsProxy, Pending
from sqsjobs import JobStatus
from sqsjobs.api.principals import ApiToken, Role
from sqsjobs.api.watch import WatchTokens
from tests.api.helpers import api_process
from tests.api.helpers import sse_events as events
from tests.integration.helpers import kill_group, worker_process

if TYPE_CHECKING:
    import asyncio

pytestmark = pytest.mark.slow

APP = "tests.apps.progressing:app"
OPERATOR = ApiToken(name="olga", role=Role.OPERATOR, token="olga-operator-token-0123456789")
TOKENS_JSON = json.dumps([OPERATOR.model_dump(mode="json")])
REPORTS = 10
#: Short leases: a renewal at most every 2 s (half the lease, plus a beat of a third of the visibility).
TIMINGS = {"lease_s": 2.0, "visibility_timeout_s": 3}
DYNAMODB_WRITES = {"UpdateItem", "PutItem", "DeleteItem", "TransactWriteItems", "ExecuteStatement"}
DYNAMODB_WRITES |= {"BatchExecuteStatement", "BatchWriteItem", "ExecuteTransaction"}


class WriteLog(AwsProxy):
    """The counting proxy, keeping the body of every DynamoDB write that passes."""

    def __init__(self, upstream: str) -> None:
        super().__init__(upstream)
        self.writes: list[tuple[str, dict[str, Any]]] = []

    async def _before_forward(self, pending: Pending, writer: asyncio.StreamWriter) -> Any:
        if pending.service == "dynamodb" and pending.action in DYNAMODB_WRITES:
            with self._lock:
                self.writes.append((pending.action, json.loads(pending.message.body or b"{}")))
        return await super()._before_forward(pending, writer)

    def of_job(self, job_id: str) -> list[tuple[str, dict[str, Any]]]:
        with self._lock:
            return [(action, body) for action, body in self.writes if job_id in json.dumps(body)]


@pytest.fixture
def proxied(ministack_url, make_app):
    with WriteLog(ministack_url) as proxy:
        app = make_app(proxy.url, **TIMINGS)
        from tests.apps import progressing

        app.registry = progressing.app.registry
        app.provision()
        yield app, proxy


def test_ten_reports_ride_on_the_renewals_and_a_watch_token_follows_each_one_and_the_end(proxied, tmp_path):
    app, proxy = proxied
    job_id = app.enqueue("report.build", {"reports": REPORTS})
    with api_process(app, tmp_path / "api.log", app_path=APP, SQSJOBS_API_TOKENS=TOKENS_JSON) as url:
        # GIVEN a backend with an operator token asks for a token that reads this one job
        with httpx.Client(base_url=url, trust_env=False) as backend:
            answer = backend.get(
                f"/jobs/{job_id}/watch-token", headers={"Authorization": f"Bearer {OPERATOR.token}"}
            )
        assert answer.status_code == 200, answer.text
        grant = answer.json()
        seen: list[tuple[str, Any]] = []
        origin_allowed: list[str | None] = []

        def follow() -> None:  # a browser's EventSource: no header, the token in the URL
            with (
                httpx.Client(base_url=url, trust_env=False, timeout=60) as browser,
                browser.stream("GET", grant["events"], headers={"Origin": "https://shop.example"}) as stream,
            ):
                assert stream.status_code == 200, stream.read()
                origin_allowed.append(stream.headers.get("access-control-allow-origin"))
                for event in events(stream):
                    seen.append(event)
                    if event[0] == "end":
                        return

        follower = threading.Thread(target=follow)
        follower.start()
        worker = worker_process(app, APP, concurrency=1)
        try:
            follower.join(90)
            assert not follower.is_alive(), seen
        finally:
            kill_group(worker)

    # THEN the client saw the job start, each report once and in order, and its end with the result
    statuses = [data["status"] for name, data in seen if name == "status"]
    assert statuses[0] == "queued" and "running" in statuses
    reports = [data for name, data in seen if name == "progress"]
    assert [r["report"] for r in reports] == list(range(1, REPORTS + 1))
    assert [r["fraction"] for r in reports] == [i / REPORTS for i in range(1, REPORTS + 1)]
    assert reports[-1]["message"] == f"page {REPORTS} of {REPORTS}" and reports[-1]["data"] == {
        "pages": REPORTS
    }
    name, end = seen[-1]
    assert (
        name == "end" and end["status"] == JobStatus.SUCCEEDED.value and end["result"] == {"pages": REPORTS}
    )
    assert end["progress"]["report"] == REPORTS  # the record keeps the last report after the end
    assert origin_allowed == ["*"]  # a page of another origin may read what the token reads

    # AND every report rode on a lease renewal: no write of the job exists for a report alone
    writes = proxy.of_job(job_id)
    carrying = [body for action, body in writes if ":progress" in body.get("ExpressionAttributeValues", {})]
    renewals = [body for action, body in writes if _is_renewal(action, body)]
    assert len(carrying) == REPORTS and all(_is_renewal("UpdateItem", body) for body in carrying)
    assert renewals, writes
    # the rest is what any job writes: the enqueue's put, the claim and the finish
    others = [action for action, body in writes if not _is_renewal(action, body)]
    assert len(others) == 3, others


def _is_renewal(action: str, body: dict[str, Any]) -> bool:
    """A lease renewal: an UpdateItem that moves ``lease_expires`` and sets no status."""
    values = body.get("ExpressionAttributeValues", {})
    return (
        action == "UpdateItem" and ":expires" in values and "status" not in body.get("UpdateExpression", "")
    )


def test_a_watch_token_reads_its_own_job_and_nothing_else(proxied, tmp_path):
    app, _ = proxied
    watched = app.enqueue("report.build", {"reports": 1}, delay=600)
    other = app.enqueue("report.build", {"reports": 2}, delay=600)
    with api_process(app, tmp_path / "api.log", app_path=APP, SQSJOBS_API_TOKENS=TOKENS_JSON) as url:
        bearer = {"Authorization": f"Bearer {OPERATOR.token}"}
        with httpx.Client(base_url=url, trust_env=False) as http:
            grant = http.get(f"/jobs/{watched}/watch-token", params={"ttl_s": 60}, headers=bearer).json()
            token = {"watch": grant["token"]}
            # it reads its job's record, and the events URL it was given answers
            own = http.get(f"/jobs/{watched}", params=token)
            assert own.status_code == 200 and own.json()["id"] == watched
            assert own.headers["access-control-allow-origin"] == "*"
            slow_polls = {**token, "max_s": 1, "poll_s": 30}
            opened = time.monotonic()
            with http.stream("GET", f"/jobs/{watched}/events", params=slow_polls) as stream:
                assert stream.status_code == 200
                assert list(events(stream)) == [
                    ("status", {"status": "queued", "attempt": 0, "reason": None})
                ]
            assert time.monotonic() - opened < 10  # the stream ended at max_s, not after a 30 s poll
            # nothing else: another job, a list, another route, a write
            for method, path in [
                ("GET", f"/jobs/{other}"),
                ("GET", f"/jobs/{other}/events"),
                ("GET", "/jobs"),
                ("GET", "/workers"),
                ("GET", f"/jobs/{watched}/watch-token"),
                ("DELETE", f"/jobs/{watched}"),
                ("POST", f"/jobs/{watched}/retry"),
            ]:
                refused = http.request(method, path, params=token, headers={"Origin": url})
                assert refused.status_code == 403, (method, path, refused.text)
                assert "access-control-allow-origin" not in refused.headers
            # an altered token, or one of another key, reads nothing
            assert (
                http.get(f"/jobs/{watched}", params={"watch": grant["token"][:-2] + "xx"}).status_code == 401
            )
            assert app.get(watched).status is JobStatus.QUEUED and app.get(other).status is JobStatus.QUEUED
            # a job that does not exist gets no token
            assert http.get("/jobs/" + "0" * 32 + "/watch-token", headers=bearer).status_code == 404


def test_a_watch_token_names_one_job_until_it_expires_and_no_other_key_opens_it():
    tokens, stranger = WatchTokens("the-lease-key"), WatchTokens("another-key")
    token, expires = tokens.issue("job-1", 600, now=1_000.0)
    assert expires == 1_600.0
    assert tokens.job_of(token, now=1_599.0) == "job-1"
    assert tokens.job_of(token, now=1_600.0) is None  # expired
    assert stranger.job_of(token, now=1_000.0) is None  # signed by another server's key
    assert tokens.job_of(token[:-1] + ("A" if token[-1] != "A" else "B"), now=1_000.0) is None  # altered
