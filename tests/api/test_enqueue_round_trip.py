"""``POST /jobs`` answers in the enqueue's round trip: its queue-depth read travels with the enqueue.

With ``Settings.enqueue_together`` (on here) that is one round trip in all.

Through a loopback proxy in front of MiniStack that holds each of the three requests until all are
in flight (had one waited for another, it would wait alone), counting what the route asks.
"""

from __future__ import annotations

import pytest

from tests.api.helpers import client, serving
from tests.integration.test_enqueue_together import Meeting

pytestmark = pytest.mark.slow

TOKEN = "test-token-rt"
CALLS = frozenset({"PutItem", "SendMessageBatch", "GetQueueAttributes"})


def test_a_post_without_a_key_is_three_requests_in_flight_at_once_and_no_read(
    ministack_url, make_app, monkeypatch
):
    monkeypatch.setenv("SQSJOBS_ENQUEUE_TOGETHER", "1")
    with Meeting(ministack_url, CALLS) as proxy:
        app = make_app(proxy.url)

        @app.job("notes.keep")
        def keep(payload: dict, ctx) -> None:
            return None

        app.provision()
        with serving(app, token=TOKEN) as url, client(url, TOKEN) as http:
            assert http.post("/jobs", json={"type": "notes.keep", "payload": {"n": 0}}).status_code == 202
            proxy.reset_counts()
            proxy.most = 0
            # WHEN a job due now is posted without an idempotency key
            r = http.post("/jobs", json={"type": "notes.keep", "payload": {"n": 1}})
            assert r.status_code == 202, r.text
            # THEN the record, the message and the depth read were all in flight together; no GetItem
            assert proxy.most == 3
            assert proxy.counts == {
                ("sqs", "SendMessageBatch"): 1,
                ("dynamodb", "PutItem"): 1,
                ("sqs", "GetQueueAttributes"): 1,
            }
            body = r.json()
            assert (body["status"], body["queue"]) == ("queued", "default")
            assert body["queue_depth"] is not None
            # AND the record it names is there
            assert app.get(body["id"]).status.value == "queued"
