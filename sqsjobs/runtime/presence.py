"""A worker's entry in the worker registry: registered at start, refreshed on an interval, removed at exit.

One write per ``Settings.registry_interval_s`` whatever the worker runs (never per job), one more
when SIGTERM starts the drain (state ``draining``), a delete when it exits; an operator's drain
request written on the item is read back from the next refresh and drains the worker as SIGTERM does; a worker killed outright
goes silent and its item expires by TTL (``sqsjobs.store.workers`` has the costs and the timeline).
Each refresh also writes the ``WorkerHeartbeat`` metric the gap alarm watches.

The registry is for operators: a failed registry write is logged and tried again at the next
interval, it never stops the worker from running jobs. Writes are serialised by a lock and the
delete comes last, so a refresh that was in flight cannot re-create the item after the exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections import defaultdict
from importlib import metadata
from typing import TYPE_CHECKING, Any

from sqsjobs.errors import AwsError
from sqsjobs.observability.metrics import consumed_units
from sqsjobs.store import presence_items
from sqsjobs.store.apply import Landed, Refused, apply

if TYPE_CHECKING:
    from collections.abc import Callable

    from sqsjobs.runtime.kernel import Kernel
    from sqsjobs.store.write import Delete, Put, Write

#: At exit, the draining write and the delete get this long together; a hung call must not hold the
#: exit past the platform's kill (the item then goes silent and expires by TTL).
CLOSE_TIMEOUT_S = 5.0


def sqsjobs_version() -> str:
    """The installed sqsjobs version, or ``unknown`` (a vendored copy without metadata)."""
    try:
        return metadata.version("sqsjobs")
    except metadata.PackageNotFoundError:
        return "unknown"


class Presence:
    """Keeps one worker's registry item current."""

    def __init__(
        self,
        kernel: Kernel,
        *,
        worker_id: str,
        pid: int,
        queues: list[str],
        concurrency: int,
        running: Callable[[], list[str]],
    ) -> None:
        """``running`` returns the ids of the jobs the worker runs now (read at each write)."""
        self.kernel = kernel
        self.entry = presence_items.WorkerEntry(
            worker_id=worker_id,
            host=socket.gethostname(),
            pid=pid,
            version=sqsjobs_version(),
            queues=tuple(queues),
            job_types=tuple(sorted(s.name for s in kernel.registry if s.queue in queues)),
            concurrency=concurrency,
            started_at=kernel.clock.now(),
            interval_s=kernel.settings.registry_interval_s,
        )
        self._running = running
        self._state = presence_items.RUNNING
        self._lock = asyncio.Lock()
        self._closed = False
        self._loop: asyncio.Task[None] | None = None
        self._draining: asyncio.Task[None] | None = None
        #: Called once when a refresh reads back an operator's drain request (the worker stops as on
        #: SIGTERM: no more receives, running jobs finish); None ignores requests.
        self.on_drain: Callable[[], None] | None = None
        #: Write units the registry's writes consumed, by ``table`` / ``index:<name>`` (only with
        #: ``Settings.measure_capacity``).
        self.capacity: defaultdict[str, float] = defaultdict(float)

    async def start(self) -> None:
        """Register, then refresh every interval in a task of its own."""
        await self._write(register=True)
        self._loop = asyncio.create_task(self._refresh_loop())

    async def _refresh_loop(self) -> None:
        while not self._closed:
            await asyncio.sleep(self.entry.interval_s)
            await self._write()

    def draining(self) -> None:
        """SIGTERM: say so in one write, in the background (the drain does not wait for it)."""
        self._state = presence_items.DRAINING
        self._draining = asyncio.create_task(self._write())

    async def close(self) -> None:
        """Stop refreshing and delete the item (bounded by ``CLOSE_TIMEOUT_S``)."""
        try:
            await asyncio.wait_for(self._close(), CLOSE_TIMEOUT_S)
        except TimeoutError:
            self.kernel.logger.warning(
                "worker registry entry not removed before exit; it goes silent, then expires",
                extra={"worker": self.entry.worker_id},
            )
        for task in (self._loop, self._draining):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def _close(self) -> None:
        async with self._lock:  # after any write in flight: nothing re-creates the item once deleted
            self._closed = True
            table = self.kernel.settings.table_name
            await self._apply(presence_items.deregister(table, self.entry.worker_id))

    async def _write(self, *, register: bool = False) -> None:
        """Register or refresh; an item that is gone (expired during a stall) is registered again."""
        table = self.kernel.settings.table_name
        async with self._lock:
            if self._closed:
                return
            now = self.kernel.clock.now()
            running = self._running()
            try:
                if not register:
                    refresh = presence_items.refresh(
                        table, self.entry, now=now, state=self._state, running=running
                    )
                    refreshed = await self._apply(refresh)
                    if isinstance(refreshed, Landed):
                        self._drain_if_asked(dict(refreshed.attributes or {}))
                    register = isinstance(refreshed, Refused)  # the item is gone: register again
                if register:
                    await self._apply(
                        presence_items.register(
                            table, self.entry, now=now, state=self._state, running=running
                        )
                    )
            except AwsError as exc:
                self.kernel.logger.warning(
                    "worker registry write failed; trying again at the next interval",
                    extra={"worker": self.entry.worker_id, "error": str(exc)},
                )
                return
        # Only a write that landed beats: the metric and the listing agree on who is alive.
        self.kernel.metrics.worker_heartbeat()

    def _drain_if_asked(self, item: dict[str, Any]) -> None:
        """An operator asked this worker to drain (``ops.worker_views.drain_flow``): stop as on SIGTERM."""
        if "drain_requested" in item and self._state != presence_items.DRAINING and self.on_drain is not None:
            self.kernel.logger.info(
                "drain requested by an operator",
                extra={"worker": self.entry.worker_id, "by": item.get("drain_by", {}).get("S")},
            )
            self.on_drain()

    async def _apply(self, write: Write | Put | Delete) -> Landed | Refused:
        outcome = await self.kernel.arun(apply(write))
        # With Settings.measure_capacity DynamoDB reports what each write consumed: kept apart, so a
        # cost test can tell the per-worker registry from the per-job path.
        if isinstance(outcome, Landed):
            for part, units in consumed_units(outcome.consumed):
                self.capacity[part] += units
        return outcome
