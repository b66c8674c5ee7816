"""An App's AWS clients: boto3's and aiobotocore's, each made on first use and again after ``configure``.

The App runs every flow through these (``run``/``arun``); the kernel's ``arun`` is the async set's.
Sync handlers run in threads and may enqueue at once, so the boto3 set is made under a lock: one
set per App, not one per thread.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, TypeVar

from sqsjobs._aws import AsyncClients, SyncClients, run_async, run_sync

if TYPE_CHECKING:
    from collections.abc import Callable

    from sqsjobs._aws import Flow
    from sqsjobs.config import Settings
    from sqsjobs.observability.metrics import RequestCounter
    from sqsjobs.observability.spans import JobTracer

T = TypeVar("T")


class Clients:
    """The two client sets of one App, made from its settings as they are when first used."""

    def __init__(
        self,
        settings: Callable[[], Settings],
        requests: RequestCounter,
        tracer: Callable[[], JobTracer | None],
    ) -> None:
        self._settings = settings
        self._requests = requests
        self._tracer = tracer
        self._sync: SyncClients | None = None
        self._async: AsyncClients | None = None
        self._lock = threading.Lock()

    @property
    def boto3(self) -> SyncClients:
        """boto3 clients: the sync API's."""
        with self._lock:
            if self._sync is None:
                self._sync = SyncClients(self._settings(), self._requests, tracer=self._tracer())
            return self._sync

    @property
    def aiobotocore(self) -> AsyncClients:
        """Aiobotocore clients: the async API's and the worker's (bound to the running loop)."""
        if self._async is None:
            self._async = AsyncClients(self._settings(), self._requests, tracer=self._tracer())
        return self._async

    def run(self, flow: Flow[T]) -> T:
        """Run a sans-I/O flow with boto3."""
        return run_sync(flow, self.boto3)

    async def arun(self, flow: Flow[T]) -> T:
        """Run a sans-I/O flow with aiobotocore."""
        return await run_async(flow, self.aiobotocore)

    def reset(self) -> None:
        """Forget both sets (closing boto3's): the next use makes them from new settings."""
        self.close()
        self._async = None

    def close(self) -> None:
        """Close the boto3 clients (made again if used)."""
        if self._sync is not None:
            self._sync.close()
            self._sync = None

    async def aclose(self) -> None:
        """Close the aiobotocore clients; kept, they open new ones on the next use (the kernel holds them)."""
        if self._async is not None:
            await self._async.aclose()
