"""A message stays covered by the worker's heartbeat until its delete has landed, not merely been decided.

Attacked from outside: one real ``sqsjobs worker`` process whose DeleteMessageBatch requests a proxy
holds for longer than the queue's visibility timeout (as a stalled SQS, a throttled and retried
delete, or a worker stalled under load would). The proxy also counts, per message id, the messages
every ReceiveMessage answer hands out. Without the heartbeat extending messages whose delete is in
flight, each finished job's message comes back and is received a second time, and each bad message
is copied to the DLQ twice; at shutdown, a message whose delete the drain is still flushing comes
back to another consumer.

The other side of it: a re-arm must never be overridden by an extension that lands after it (the
retry would wait a whole visibility timeout). The proxy holds one extension of a running job's
message while the job fails and its re-arm is decided, and records the order in which the emulator
answered every visibility change.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import signal
import threading
import time
from collections import Counter
from pathlib import Path

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
VISIBILITY_S = 3
#: Longer than the visibility timeout, shorter than the drain's flush budget (worker.ACK_FLUSH_TIMEOUT_S).
DELETE_DELAY_S = 4.0
GOOD, BAD = 4, 3
#: The retry the gated job asks for: its re-arm's VisibilityTimeout (an extension's is VISIBILITY_S).
RETRY_AFTER_S = 1
#: How long the proxy holds the extension it stages the race with, at most (a re-arm arriving
#: meanwhile is forwarded first); short enough that the message's previous extension still covers it.
EXTENSION_HOLD_S = 1.0
_MESSAGE_ID = re.compile(rb'"MessageId"\s*:\s*"([^"]+)"')


def _visibility_changes(pending: Pending) -> list[tuple[str, int]]:
    """(receipt handle, timeout) of a ChangeMessageVisibilityBatch request (SQS's JSON protocol)."""
    entries = json.loads(pending.message.body).get("Entries", [])
    return [(e["ReceiptHandle"], int(e["VisibilityTimeout"])) for e in entries]


class SlowDeletes(AwsProxy):
    """Holds each DeleteMessageBatch before forwarding it; counts the messages each receive hands out."""

    def __init__(self, upstream: str) -> None:
        super().__init__(upstream)
        self.received: Counter[bytes] = Counter()
        self.deletes_held = 0
        self._seen = threading.Lock()
        #: (the gated handler's start marker, its gate): the next extension once it started is held.
        self.armed: tuple[Path, Path] | None = None
        self.staged = False
        #: Every visibility change, in the order the emulator answered them.
        self.landed: list[tuple[str, int]] = []
        self._rearm_forwarded: asyncio.Event | None = None

    async def _before_forward(self, pending: Pending, writer: asyncio.StreamWriter) -> Step:
        if pending.action == "DeleteMessageBatch":
            with self._seen:
                self.deletes_held += 1
            await asyncio.sleep(DELETE_DELAY_S)
        elif pending.action == "ChangeMessageVisibilityBatch":
            changes = _visibility_changes(pending)
            extension = all(t == VISIBILITY_S for _, t in changes)
            if extension and self.armed is not None and self.armed[0].exists():
                # The job runs and this extension covers its message: let the job fail now, and hold
                # the extension until its re-arm went ahead (or for EXTENSION_HOLD_S, if it waits).
                gate, self.armed, self.staged = self.armed[1], None, True
                self._rearm_forwarded = asyncio.Event()
                gate.touch()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._rearm_forwarded.wait(), EXTENSION_HOLD_S)
            elif not extension and self._rearm_forwarded is not None:
                self._rearm_forwarded.set()
        return "forward"

    async def _before_answer(self, pending: Pending, writer: asyncio.StreamWriter) -> Step:
        if pending.action == "ChangeMessageVisibilityBatch":
            with self._seen:
                self.landed += _visibility_changes(pending)
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

            # WHEN a job fails and asks for a retry while an extension of its message is in flight
            held = proxy.deletes_held
            marker, gate = tmp_path / "gated", tmp_path / "gate"
            proxy.armed = (Path(f"{marker}.1"), gate)
            gated = app.enqueue(
                "sleepy",
                {"marker": str(marker), "sleep_s": 0, "gate": str(gate), "retry_after_s": RETRY_AFTER_S},
            )
            wait_until(lambda: app.get(gated).status is JobStatus.SUCCEEDED, 30, "the retried job")
            # THEN its re-arm landed after that extension, never before it
            assert proxy.staged and app.get(gated).attempt == 2
            [rearm] = [change for change in proxy.landed if change[1] == RETRY_AFTER_S]
            later = proxy.landed[proxy.landed.index(rearm) + 1 :]
            assert (rearm[0], VISIBILITY_S) not in later, proxy.landed

            # WHEN the worker is stopped while that finished job's delete is still held
            wait_until(lambda: proxy.deletes_held > held, 30, "the retried job's delete")
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
            # ... and every message was received once, the retried job's twice
            assert sorted(proxy.received.values()) == [1] * (GOOD + BAD) + [2], proxy.received
        finally:
            kill_group(worker)
