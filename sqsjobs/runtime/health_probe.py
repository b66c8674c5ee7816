"""The worker's health probe: ``/live`` and ``/ready`` over HTTP on 127.0.0.1, from a thread of its own.

``/live`` answers 200 while the event loop runs: a task in the loop ticks every fraction of
``Settings.health_stall_s``, and a loop stalled past that bound (an async handler that blocks it, a
deadlock) fails it. The server runs in a thread precisely so that it can still answer then. A
container health check on ``/live`` lets ECS replace such a task: its heartbeats have stopped, so
its leases and messages are lapsing anyway.

``/ready`` answers 200 only while the worker can do its work: not draining (SIGTERM fails it at
once, before anything else of the drain), the event loop live, every receive loop still running,
and DynamoDB and SQS each answered the probe's own calls within ``health_stall_s``: a ``GetItem``
of the worker's registry item and a ``GetQueueUrl`` of its first queue's DLQ, every third of the
bound (both in the worker's IAM already; a few reads a minute). Readiness is for what routes work
or reports on workers; it is not the container health check, because a DynamoDB outage would then
make ECS replace every task at once.

Both answer a small JSON body naming each check. The probe is off unless ``Settings.health_port``
(``SQSJOBS_HEALTH_PORT``) is set; infra/ sets it for the ECS worker and checks ``/live``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from sqsjobs._aws import Call, one
from sqsjobs.store import presence_items
from sqsjobs.store.codec import av_s

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from sqsjobs.runtime.kernel import Kernel

#: Loopback only: the container's health check runs inside the container.
HOST = "127.0.0.1"
LIVE_PATH, READY_PATH = "/live", "/ready"


def live_check_command(port: int) -> list[str]:
    """A container health check (exec form) that fails unless ``/live`` answers 200: stdlib only."""
    script = (
        "import sys, urllib.request; "
        f"sys.exit(urllib.request.urlopen('http://{HOST}:{port}{LIVE_PATH}', timeout=4).status != 200)"
    )
    return ["python", "-c", script]


class HealthProbe:
    """Serves ``/live`` and ``/ready`` for one worker while it runs (inert without a port)."""

    def __init__(
        self,
        kernel: Kernel,
        *,
        port: int | None,
        stall_s: float,
        checks: Sequence[Call],
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        """``checks``: one cheap call per service whose answers readiness requires."""
        self.port = port
        self.stall_s = stall_s
        self._kernel = kernel
        self._checks = list(checks)
        self._monotonic = monotonic
        self._tick = monotonic()
        #: When each service last answered a check (monotonic), by service name.
        self._answered: dict[str, float] = {}
        self._receivers: list[asyncio.Task[Any]] = []
        self._draining = False
        self._tasks: list[asyncio.Task[None]] = []
        self._server: ThreadingHTTPServer | None = None

    @classmethod
    def for_worker(cls, kernel: Kernel, worker_id: str, queue: str) -> HealthProbe:
        """The worker's probe: its registry item (DynamoDB) and ``queue``'s DLQ URL (SQS)."""
        settings = kernel.settings
        item = {"id": av_s(presence_items.item_id(worker_id))}
        checks = [
            Call("dynamodb", "get_item", {"TableName": settings.table_name, "Key": item}),
            Call("sqs", "get_queue_url", {"QueueName": settings.dlq_name(queue)}),
        ]
        return cls(kernel, port=settings.health_port, stall_s=settings.health_stall_s, checks=checks)

    # ── the worker's side ──────────────────────────────────────────────────────────────────
    def start(self, receivers: Sequence[asyncio.Task[Any]]) -> None:
        """Serve, watching these receive loops; the ticks and checks run in the caller's loop."""
        if self.port is None:
            return
        self._receivers = list(receivers)
        self._tick = self._monotonic()
        self._tasks = [asyncio.create_task(self._ticks()), asyncio.create_task(self._check_loop())]
        self._server = ThreadingHTTPServer((HOST, self.port), _handler(self))
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="sqsjobs-health", daemon=True).start()
        self._kernel.logger.info("health probe listening", extra={"port": self._server.server_address[1]})

    def draining(self) -> None:
        """SIGTERM: not ready from now on."""
        self._draining = True

    async def close(self) -> None:
        """Stop serving (the process is about to exit)."""
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._server is not None:
            await asyncio.to_thread(self._server.shutdown)
            self._server.server_close()

    async def _ticks(self) -> None:
        while True:
            self._tick = self._monotonic()
            await asyncio.sleep(min(1.0, self.stall_s / 4))

    async def _check_loop(self) -> None:
        while True:
            await asyncio.gather(*(self._check(c) for c in self._checks))
            await asyncio.sleep(self.stall_s / 3)

    async def _check(self, call: Call) -> None:
        try:
            await asyncio.wait_for(self._kernel.arun(one(call)), self.stall_s)
        except Exception as exc:  # any failure is the readiness answer; the worker goes on
            self._kernel.logger.debug(
                "health check failed", extra={"service": call.service, "error": repr(exc)}
            )
            return
        self._answered[call.service] = self._monotonic()

    # ── the server's side (another thread: reads only) ─────────────────────────────────────
    def live(self) -> dict[str, bool]:
        """The liveness checks, by name."""
        return {"event_loop": self._monotonic() - self._tick <= self.stall_s}

    def ready(self) -> dict[str, bool]:
        """The readiness checks, by name."""
        now = self._monotonic()
        checks = {
            "not_draining": not self._draining,
            **self.live(),
            "receive_loops": bool(self._receivers) and not any(t.done() for t in self._receivers),
        }
        for call in self._checks:
            checks[call.service] = now - self._answered.get(call.service, -float("inf")) <= self.stall_s
        return checks


def _handler(probe: HealthProbe) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == LIVE_PATH:
                checks = probe.live()
            elif self.path == READY_PATH:
                checks = probe.ready()
            else:
                self.send_error(404)
                return
            ok = all(checks.values())
            body = json.dumps({"status": "ok" if ok else "failing", "checks": checks}).encode()
            self.send_response(200 if ok else 503)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # probes every few seconds: no access log
            pass

    return Handler
