"""Queue URLs: resolved once per process and shared by every flow that sends, receives or inspects.

SQS addresses queues by URL, and the URL comes from one ``GetQueueUrl`` per queue name. A
``QueueUrls`` caches them for the life of its settings, so flows ask it instead of the whole App.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqsjobs._aws import Call, Flow

if TYPE_CHECKING:
    from collections.abc import Iterable

    from sqsjobs.config import Settings

_DLQ = "\0dlq"


class QueueUrls:
    """URLs of an App's queues and their DLQs, by logical queue name."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._urls: dict[str, str] = {}

    def flow(self, queues: Iterable[str]) -> Flow[dict[str, str]]:
        """Resolve what is not cached yet (two GetQueueUrl per new queue: it and its DLQ).

        Returns the cache itself: ``urls[queue]`` for a queue, ``urls[dlq_key(queue)]`` for its DLQ.
        """
        for queue in queues:
            if queue not in self._urls:
                response = yield Call("sqs", "get_queue_url", {"QueueName": self.settings.queue_name(queue)})
                dlq = yield Call("sqs", "get_queue_url", {"QueueName": self.settings.dlq_name(queue)})
                self._urls[queue] = response["QueueUrl"]
                self._urls[dlq_key(queue)] = dlq["QueueUrl"]
        return self._urls

    def cached(self, queue: str) -> str | None:
        """The URL if it was resolved already (no call)."""
        return self._urls.get(queue)


def dlq_key(queue: str) -> str:
    """The key of ``queue``'s DLQ in the mapping ``QueueUrls.flow`` returns."""
    return queue + _DLQ
