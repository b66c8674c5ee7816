"""A message stays covered by the worker's heartbeat until its delete has landed, not merely been decided.

Attacked from outside: one real ``sqsjobs worker`` process whose DeleteMessageBatch requests a proxy
holds for longer than the queue's visibility timeout (as a stalled SQS, a throttled and retried
delete, or a worker stalled under load would). The proxy also counts, per message id, the messages
every ReceiveMessage answer hands out. Without the heartbeat extending messages whose delete is in
flight, each finished job's message comes back and is received a second time, and each bad message
is copied to the DLQ twice; at shutdown, a message whose delete the drain is still flushing comes
back to another consumer.
"""

from __future__ import annotations

import asyncio
import re
import signal
import threading
import time
from collections import Counter

import pytest

from bench.proxy import AwsProxy, Message, Pending, Step
from sqsjobs import JobStatus
from tests.integration.helpers import (
    depth,
    kill_group,
    queue_url,
    send_raw,
    sqs_call,
    wait_until,
    worker_process,
)

pytestmark = pytest.mark.slow

APP = "tests.apps.sleepy:app"
VISIBILITY_S = 2
#: Longer than the visibility timeout, shorter than the drain's flush budget (worker.ACK_FLUSH_TIMEOUT_S).
DELETE_DELAY_S = 3.5
GOOD, BAD = 4, 3
_MESSAGE_ID = re.compile(rb'"MessageId"\s*:\s*"([^"]+)"')


class SlowDeletes(AwsProxy):
    """Holds each DeleteMessageBatch before forwarding it; counts the messages each receive hands out."""

    def __init__(self, upstream: str) -> None:
        super().__init__(upstream)
        self.received: Counter[bytes] = Counter()
        self.deletes_held = 0
        self._seen = threading.Lock()

    async def _before_forward(self, pending: Pending, writer: asyncio.StreamWriter) -> Step:
        if pending.action == "DeleteMessageBatch":
            with self._seen:
                self.deletes_held += 1
            await asyncio.sleep(DELETE_DELAY_S)
        return "forward"

    async def _exchange(
        self, upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None, request: Message
    ) -> tuple[bytes, bool, tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
        response, keep, upstream = await super()._exchange(upstream, request)
        if b'"ReceiptHandle"' in response:  # a ReceiveMessage answer that delivered messages
            with self._seen:
                self.received.update(_MESSAGE_ID.findall(response))
        return response, keep, upstream


def test_a_message_is_extended_until_its_slow_delete_lands_and_received_once(
    ministack_url, make_app, tmp_path
):
    app = make_app(ministack_url, visibility_timeout_s=VISIBILITY_S, lease_s=6.0)
    app.job("sleepy", max_attempts=3, timeout=120)(lambda payload, ctx: None)
    app.provision()
    with SlowDeletes(ministack_url) as proxy:
        worker = worker_process(app, APP, SQSJOBS_ENDPOINT_URL=proxy.url, SQSJOBS_DRAIN_TIMEOUT_S="1")
        try:
            # GIVEN jobs that finish at once and bad messages the worker dead-letters, all acked by
            # deletes that take longer than the visibility timeout to land
            ids = [
                app.enqueue("sleepy", {"marker": str(tmp_path / f"j{i}"), "sleep_s": 0}) for i in range(GOOD)
            ]
            for _ in range(BAD):
                send_raw(app, "this is not json")
            wait_until(lambda: all(app.get(i).status is JobStatus.SUCCEEDED for i in ids), 30, "the jobs")
            wait_until(lambda: sum(depth(app).values()) == 0, 30, "every delete landed")
            # THEN each message was received exactly once, and each bad one copied to the DLQ once
            assert proxy.deletes_held >= 1
            assert len(proxy.received) == GOOD + BAD, proxy.received
            assert set(proxy.received.values()) == {1}, proxy.received
            assert depth(app, dlq=True)["visible"] == BAD

            # WHEN the worker is stopped while a finished job's delete is still held
            held = proxy.deletes_held
            last = app.enqueue("sleepy", {"marker": str(tmp_path / "last"), "sleep_s": 0})
            wait_until(lambda: proxy.deletes_held > held, 30, "the last job's delete")
            assert app.get(last).status is JobStatus.SUCCEEDED
            worker.send_signal(signal.SIGTERM)
            # THEN while the drain flushes that delete, its message never comes back to anyone else
            url = queue_url(app)
            back = []
            stopped_by = time.monotonic() + 20
            while worker.poll() is None:
                assert time.monotonic() < stopped_by, "the worker did not exit after its drain"
                got = sqs_call(app, "receive_message", QueueUrl=url, WaitTimeSeconds=1, VisibilityTimeout=30)
                back += got.get("Messages", [])
            assert back == []
            assert worker.returncode == 0
            assert sum(depth(app).values()) == 0
            assert len(proxy.received) == GOOD + BAD + 1 and set(proxy.received.values()) == {1}
        finally:
            kill_group(worker)
