"""The archive as the kernel sees it: a reader of the table's change stream (a sweep pass locally, a Lambda in AWS).

Every job that enters an end state is in the stream once (DynamoDB Streams keeps each write 24 h,
in order per item), whoever wrote it: the archive is written from there, as the job events are,
and well before the table's TTL removes the record (days later, ``retention``). For each page of
records: one S3 PUT per (finish date, type) the page holds, then the pointers, 25 to a
BatchWriteItem; the page counts as read only once both landed (``events.stream_relay.read_flow``),
so a relay that dies writes the same objects again (same keys, same bytes) and the same pointers.
"""

from __future__ import annotations

import asyncio
import functools
import os
from typing import TYPE_CHECKING, Any

from sqsjobs.archive import records
from sqsjobs.events.stream_relay import read_flow
from sqsjobs.runtime.kernel import locate
from sqsjobs.runtime.seams import Plugin
from sqsjobs.store import batched
from sqsjobs.transport import objects

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from sqsjobs._aws import AsyncRunner, Flow
    from sqsjobs.config import Settings
    from sqsjobs.runtime.kernel import Kernel


def archive_plugin(kernel: Kernel) -> Plugin:
    """The sweeper's stream reader when the App archives and relays the stream itself; nothing else."""
    settings = kernel.settings
    reader = (
        ArchiveReader(settings, kernel.arun) if settings.archive_days > 0 and settings.event_relay else None
    )
    # ``fields=()``/``types=frozenset()``: no job is this feature's, so the kernel never calls it for one.
    return Plugin("archive", sweep=reader, fields=(), types=frozenset())


class ArchiveReader:
    """Reads the stream from where it last archived, and archives what it finds (a ``SweepPass``)."""

    def __init__(self, settings: Settings, arun: AsyncRunner) -> None:
        self._settings = settings
        self._arun = arun
        #: Shard id → the sequence number of the last record archived (this reader's own).
        self.positions: dict[str, str] = {}
        self._lock = asyncio.Lock()

    async def sweep(self, now: float) -> list[str]:
        """Archive what the stream holds now; the ids of the jobs archived."""
        async with self._lock:  # one pass at a time
            return await self._arun(
                read_flow(
                    self._settings.table_name,
                    self.positions,
                    functools.partial(archive_flow, self._settings, now=now),
                )
            )


def archive_flow(settings: Settings, page: Sequence[Mapping[str, Any]], *, now: float) -> Flow[list[str]]:
    """Archive the jobs a page of stream records ends: their objects, then their pointers; their ids."""
    by_partition: dict[tuple[str, str], list[tuple[str, dict[str, Any]]]] = {}
    for record in page:
        item = records.ended(record)
        if item is not None:
            sequence = str(record["dynamodb"]["SequenceNumber"])
            by_partition.setdefault(records.partition_of(item), []).append((sequence, item))
    pointers = []
    for (date, job_type), ended in by_partition.items():
        key = records.object_key(date, job_type, ended[0][0])
        reference = objects.ref(settings.payload_bucket, key)
        yield from objects.put_flow(reference, records.body([item for _, item in ended]))
        pointers += [
            records.pointer(
                str(item["id"]["S"]), reference, item, now=now, archive_days=settings.archive_days
            )
            for _, item in ended
        ]
    yield from batched.put_items(settings.table_name, pointers)
    return [str(p["id"]["S"]).removeprefix(records.POINTER_PREFIX) for p in pointers]


def handler(event: Mapping[str, Any], context: Any = None) -> dict[str, int]:
    """The archive's stream Lambda (``sqsjobs.archive.plugin.handler``): the App is ``SQSJOBS_APP``.

    Raises when a write fails: the event source mapping then retries the batch, which writes the
    same objects and pointers again.
    """
    app = _app()
    archived = app.run(archive_flow(app.settings, event.get("Records", []), now=app.clock.now()))
    return {"archived": len(archived)}


@functools.cache
def _app() -> Any:
    """The App the function serves, loaded once per container."""
    return locate(os.environ.get("SQSJOBS_APP"))
