"""``sqsjobs dev``: the whole system on one laptop, no AWS account.

Starts moto's server in-process on 127.0.0.1 (requests serialised, see ``sqsjobs.local.emulator``),
points the App at it, provisions the table and queues, and runs a worker, the sweeper, the local
firing loop of the app's schedules (no EventBridge Scheduler needed) and, given one, the HTTP API
(``sqsjobs.api``) on the same event loop, so the API and the worker share the App's clients.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from typing import TYPE_CHECKING, Any

from sqsjobs._aws import Call, one
from sqsjobs.errors import SchedulerError
from sqsjobs.local.emulator import EmbeddedMoto
from sqsjobs.runtime.sweeper import run_sweeper
from sqsjobs.runtime.worker import Worker
from sqsjobs.schedules.local import LocalScheduler

if TYPE_CHECKING:
    import socket
    from types import TracebackType

    from sqsjobs.app import App
    from sqsjobs.deploy.provision import ProvisionReport

#: The role runtime schedules name in moto's Scheduler, which never assumes it (nor fires: the local
#: loop does), when the App names none.
DEV_SCHEDULER_ROLE = "arn:aws:iam::000000000000:role/sqsjobs-dev-scheduler"
#: moto accepts any credentials; set these only when the environment has none.
_FAKE_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "sqsjobs-dev", "AWS_SECRET_ACCESS_KEY": "sqsjobs-dev"}


class DevStack:
    """An embedded emulator with the App provisioned on it; a context manager."""

    def __init__(self, app: App, *, port: int = 0, **settings: Any) -> None:
        self.app = app
        self._server = EmbeddedMoto(port=port)
        self._settings = settings
        self.report: ProvisionReport | None = None

    @property
    def endpoint_url(self) -> str:
        """Where the emulator listens."""
        return self._server.endpoint_url

    def __enter__(self) -> DevStack:
        for key, value in _FAKE_CREDENTIALS.items():
            os.environ.setdefault(key, value)
        url = self._server.start()
        # moto ignores PartiQL conditions, so the embedded emulator refuses PartiQL: single writes.
        # The sweeper relays the change stream to the event bus (an App without ``event_bus`` has none).
        defaults: dict[str, Any] = {"batch_writes": False, "event_relay": True}
        if not self.app.settings.scheduler_role_arn:
            defaults["scheduler_role_arn"] = DEV_SCHEDULER_ROLE
        self.app.configure(endpoint_url=url, **{**defaults, **self._settings})
        self.report = self.app.provision()
        # moto answers CreateSchedule in a missing group with a 500 (KeyError), not the
        # ResourceNotFoundException AWS and MiniStack answer, on which runtime.create_flow makes it.
        with contextlib.suppress(SchedulerError):  # exists already: ConflictException
            self.app.run(
                one(
                    Call(
                        "scheduler",
                        "create_schedule_group",
                        {"Name": self.app.settings.runtime_schedule_group},
                    )
                )
            )
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.app.close()
        self._server.stop()

    async def run(
        self,
        stop: asyncio.Event,
        *,
        concurrency: int | None = None,
        api: tuple[Any, socket.socket] | None = None,
    ) -> Worker:
        """Run a worker, the sweeper, the local firing loop of the app's schedules and the API until ``stop``.

        ``api``: the FastAPI application (``sqsjobs.api.http_app.create_app``) and the socket to serve it on.
        """
        schedules = LocalScheduler(self.app)  # validates the declarations before anything starts
        worker = Worker(self.app, concurrency=concurrency)
        tasks = [worker.run(stop), run_sweeper(self.app, stop), schedules.run(stop)]
        if api is not None:
            from sqsjobs.api.server import serve

            tasks.append(serve(api[0], api[1], stop))
        await asyncio.gather(*tasks)
        return worker
