"""The table's change stream, relayed to the bus: the Lambda entry point in AWS, a sweep pass locally.

Why the stream, and not the worker (docs/events.md has the whole comparison): a terminal transition
is one conditional write, and DynamoDB Streams records every write that landed, exactly once per
shard, in order per item, for 24 hours — whoever wrote it (worker, Lambda, sweeper, an operator's
cancel) and whatever happened to that process after the write. A worker SIGKILLed right after its
finish landed cannot lose the event, because the worker was never the one to send it; a worker
would have needed a second write (an outbox mark) per job to be as safe. The relay costs no worker
time and no write.

- In AWS a Lambda function reads the stream (event source mapping, infra/): ``handle_stream_event``
  publishes a batch's events and raises if any could not be, so the mapping retries the batch.
- Locally (``sqsjobs dev``, tests; ``Settings.event_relay``) the sweeper's pass reads the stream
  itself (``StreamRelay``), from where it last published; a restarted relay starts from the
  stream's start (24 h) and publishes those events again, with the same ``event_id``.
"""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from sqsjobs._aws import Call
from sqsjobs.events.catalogue import Choice, Event, choice_of, events_of
from sqsjobs.events.publish import publish_flow
from sqsjobs.runtime.kernel import locate

if TYPE_CHECKING:
    from collections.abc import Mapping

    from sqsjobs._aws import AsyncRunner, Flow
    from sqsjobs.config import Settings

#: Records per ``GetRecords`` (the API's most).
MAX_RECORDS = 1000
T = TypeVar("T")


def stream_arn_flow(table: str) -> Flow[str | None]:
    """The table's change stream, or None when it has none (the App was provisioned without events)."""
    described = yield Call("dynamodb", "describe_table", {"TableName": table})
    arn = described["Table"].get("LatestStreamArn")
    return None if arn is None else str(arn)


class StreamRelay:
    """Reads the change stream from where it last published, and publishes what it finds (a ``SweepPass``)."""

    def __init__(self, settings: Settings, choice: Choice, arun: AsyncRunner, logger: Any = None) -> None:
        self._settings = settings
        self._logger = logger
        self._choice = choice
        self._arun = arun
        #: Shard id → the sequence number of the last record whose events were published.
        self.positions: dict[str, str] = {}
        self._lock = asyncio.Lock()

    async def sweep(self, now: float) -> list[str]:
        """Relay what the stream holds now; the ids of the events published."""
        async with self._lock:  # one pass at a time: two would publish the same records twice
            published: list[Event] = await self._arun(self.pump_flow())
        if self._logger is not None:  # ``sqsjobs dev`` shows each event it published
            for event in published:
                self._logger.info(
                    "event published",
                    extra={"event": event.name, "event_id": event.event_id, "bus": self._settings.event_bus},
                )
        return [e.event_id for e in published]

    def pump_flow(self) -> Flow[list[Event]]:
        """Read every shard past its position, publish, and only then move the position."""
        return read_flow(self._settings.table_name, self.positions, self._publish_flow)

    def _publish_flow(self, records: list[Mapping[str, Any]]) -> Flow[list[Event]]:
        events = [e for r in records for e in events_of(r, self._choice)]
        yield from publish_flow(self._settings.event_bus, events)
        return events


#: What a reader of the stream does with a page of records (publish their events, archive their
#: records); it returns what it made of them, and the page is consumed once it returned.
Consume = Callable[[list["Mapping[str, Any]"]], "Flow[list[T]]"]


def read_flow(table: str, positions: dict[str, str], consume: Consume[T]) -> Flow[list[T]]:
    """Read every shard of ``table``'s stream past ``positions``, page by page through ``consume``.

    A shard's position moves past a page only once ``consume`` returned: a reader that fails (or a
    process that dies) reads the page again, so a consumer must be idempotent (an event id, an
    archive object's key). ``positions`` is the reader's own: two readers of one stream (events and
    the archive) each read every record.
    """
    arn = yield from stream_arn_flow(table)
    if arn is None:
        return []
    made: list[T] = []
    for shard in (yield from _shards_flow(arn)):
        made += yield from _shard_flow(arn, shard, positions, consume)
    return made


def _shard_flow(arn: str, shard: str, positions: dict[str, str], consume: Consume[T]) -> Flow[list[T]]:
    position = positions.get(shard)
    start = (
        {"ShardIteratorType": "AFTER_SEQUENCE_NUMBER", "SequenceNumber": position}
        if position
        else {"ShardIteratorType": "TRIM_HORIZON"}
    )
    answer = yield Call(
        "dynamodbstreams", "get_shard_iterator", {"StreamArn": arn, "ShardId": shard, **start}
    )
    iterator = answer.get("ShardIterator")
    made: list[T] = []
    while iterator:
        page = yield Call("dynamodbstreams", "get_records", {"ShardIterator": iterator, "Limit": MAX_RECORDS})
        records = page.get("Records", [])
        if not records:
            break  # caught up (an open shard answers empty pages with a next iterator forever)
        made += yield from consume(records)
        positions[shard] = records[-1]["dynamodb"]["SequenceNumber"]
        iterator = page.get("NextShardIterator")
    return made


def _shards_flow(arn: str) -> Flow[list[str]]:
    shards: list[str] = []
    params: dict[str, Any] = {"StreamArn": arn}
    while True:
        answer = yield Call("dynamodbstreams", "describe_stream", params)
        description = answer["StreamDescription"]
        shards += [s["ShardId"] for s in description.get("Shards", [])]
        last = description.get("LastEvaluatedShardId")
        if not last:
            return shards
        params = {"StreamArn": arn, "ExclusiveStartShardId": last}


def stream_event_flow(settings: Settings, choice: Choice, event: Mapping[str, Any]) -> Flow[list[str]]:
    """The Lambda entry's work: a DynamoDB stream batch's events, published; their ids."""
    events = [e for r in event.get("Records", []) for e in events_of(r, choice)]
    yield from publish_flow(settings.event_bus, events)
    return [e.event_id for e in events]


def handler(event: Mapping[str, Any], context: Any = None) -> dict[str, int]:
    """The stream Lambda's entry point (``sqsjobs.events.stream_relay.handler``): the App is ``SQSJOBS_APP``.

    Raises when an event could not be published: the event source mapping then retries the batch
    (bisecting it), so nothing is skipped; the events already sent are sent again, same ids.
    """
    app = _app()
    choice = choice_of(app.settings, app.registry)
    published = app.run(stream_event_flow(app.settings, choice, event))
    return {"published": len(published)}


@functools.cache
def _app() -> Any:
    """The App the function serves, loaded once per container (like the worker's entry point)."""
    return locate(os.environ.get("SQSJOBS_APP"))
