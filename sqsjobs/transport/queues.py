"""Queue URLs: resolved once per process and shared by every flow that sends, receives or inspects.

SQS addresses queues by URL, and the URL comes from one ``GetQueueUrl`` per queue name. A
``QueueUrls`` caches them for the life of its settings, so flows ask it instead of the whole App.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqsjobs._aws import Call, Flow
from sqsjobs.observability.tracing import message_attributes
from sqsjobs.transport import routes, sqs

if TYPE_CHECKING:
    from collections.abc import Iterable

    from sqsjobs.config import Settings

_DLQ = "\0dlq"


class QueueUrls:
    """URLs of an App's queues and their DLQs, by logical queue name or route (``transport.routes``)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._urls: dict[str, str] = {}

    def flow(self, queues: Iterable[str]) -> Flow[dict[str, str]]:
        r"""Resolve what is not cached yet (two GetQueueUrl per new queue: it and its DLQ).

        A route of an extra level (``"reports\\0high"``) resolves that one queue: its DLQ is the
        logical queue's. Returns the cache itself: ``urls[queue]`` for a queue or route,
        ``urls[dlq_key(queue)]`` for a logical queue's DLQ.
        """
        for queue in queues:
            if queue in self._urls:
                continue
            if routes.split(queue)[1] != routes.NORMAL:
                name = routes.queue_name(self.settings, queue)
                self._urls[queue] = (yield Call("sqs", "get_queue_url", {"QueueName": name}))["QueueUrl"]
                continue
            response = yield Call("sqs", "get_queue_url", {"QueueName": self.settings.queue_name(queue)})
            dlq = yield Call("sqs", "get_queue_url", {"QueueName": self.settings.dlq_name(queue)})
            self._urls[queue] = response["QueueUrl"]
            self._urls[dlq_key(queue)] = dlq["QueueUrl"]
        return self._urls

    def send_flow(
        self,
        key: str,
        body: str,
        *,
        delay_s: int = 0,
        tenant: str | None = None,
        serialize_key: str | None = None,
        trace: str | None = None,
    ) -> Flow[None]:
        """Send one message to route ``key`` (the sweeper's and a requeue's hint), with its group fields.

        A FIFO queue takes no per-message delay: its job's claim re-arms the message until due.
        ``trace``: the record's trace context, carried as the first send carried it (both forms).
        """
        urls = yield from self.flow([key])
        params = sqs.send_one(urls[key], body, delay_s=0 if routes.is_fifo(key) else delay_s)
        params |= message_attributes(trace)
        params |= routes.message_fields(
            key, tenant=tenant, serialize_key=serialize_key, fair=self.settings.fair_queues
        )
        yield Call("sqs", "send_message", params)

    def cached(self, queue: str) -> str | None:
        """The URL if it was resolved already (no call)."""
        return self._urls.get(queue)


def dlq_key(queue: str) -> str:
    """The key of ``queue``'s DLQ in the mapping ``QueueUrls.flow`` returns."""
    return queue + _DLQ
