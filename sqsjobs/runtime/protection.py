"""ECS task scale-in protection while the worker holds jobs: a scale-in must not kill a running job.

The service scales on the visible backlog, so scale-in comes exactly when the remaining tasks are
busy with the messages that left the queue; Fargate's ``stopTimeout`` (at most 120 s) would then
release and re-run every job longer than that. Through the ECS agent's endpoint
(``$ECS_AGENT_URI/task-protection/v1/state``, which ECS sets in every task's containers), the
worker marks its task protected as soon as it receives a message, renews the protection from the
heartbeat once half of it has passed, and clears it when it has held nothing for one heartbeat
interval (so a trickle of jobs does not cost two calls each).

The protection always carries an expiry (``Settings.task_protection_minutes``): a worker that
hangs or loses the agent is protected that long at most. The agent calls ECS's
``UpdateTaskProtection`` with the task role, which therefore needs that action (infra/ grants it).
A failing endpoint never stops the worker: the failure is logged and counted
(``TaskProtectionErrors``), and the next beat tries again.

Outside ECS (no ``ECS_AGENT_URI``), or with ``task_protection_minutes=0``, it does nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
import urllib.error
import urllib.request
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

    from sqsjobs.runtime.kernel import Kernel

#: Set by the ECS agent in every container of a task (Fargate platform 1.4+, EC2 agent 1.65+).
AGENT_URI_ENV = "ECS_AGENT_URI"
STATE_PATH = "/task-protection/v1/state"
#: The agent answers from the task's own host; a slow answer is a failed one, tried again next beat.
REQUEST_TIMEOUT_S = 5.0
#: ECS accepts 1..2880 minutes.
MAX_EXPIRY_MIN = 2880
#: The EMF count of failed calls to the endpoint (dimension ``service``).
ERRORS_METRIC = "TaskProtectionErrors"


class TaskProtection:
    """Keeps the task protected while ``busy()`` holds, through the agent at ``url`` (None: inert)."""

    def __init__(
        self,
        url: str | None,
        *,
        busy: Callable[[], bool],
        expires_min: int,
        kernel: Kernel,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        """``busy``: whether the worker holds a message now; read at each step, never stored."""
        self.url = url if expires_min > 0 else None
        self._busy = busy
        self._expires_min = min(max(expires_min, 1), MAX_EXPIRY_MIN)
        self._kernel = kernel
        self._monotonic = monotonic
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        #: What the agent last confirmed, and when the worker renews or clears it.
        self.protected = False
        self._renew_at = 0.0
        self._idle_since: float | None = None
        self._idle_grace_s = 0.0
        #: Failed calls since the last metrics flush.
        self._errors = 0
        if self.url is not None:
            kernel.metrics.add_source(self._metric_lines)

    @classmethod
    def for_worker(cls, kernel: Kernel, busy: Callable[[], bool]) -> TaskProtection:
        """From the environment ECS gives a task; inert anywhere else."""
        agent = os.environ.get(AGENT_URI_ENV)
        url = agent.rstrip("/") + STATE_PATH if agent else None
        return cls(url, busy=busy, expires_min=kernel.settings.task_protection_minutes, kernel=kernel)

    def start(self, interval_s: float) -> None:
        """Begin following ``busy()``: at once on ``notify``, and every ``interval_s`` (the heartbeat)."""
        if self.url is not None and self._task is None:
            self._idle_grace_s = interval_s
            self._task = asyncio.create_task(self._follow(interval_s))

    def notify(self) -> None:
        """The worker's holdings changed (a receive, an ack): act on it now rather than at the next beat."""
        self._wake.set()

    async def close(self) -> None:
        """Stop following, and clear the protection (the drain is over: nothing is held any more)."""
        if self._task is None:
            return
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._task = None
        if self.protected:
            await self._set(False)

    async def _follow(self, interval_s: float) -> None:
        while True:
            self._wake.clear()
            await self.step()
            timeout = interval_s
            if self.protected and self._idle_since is not None:
                timeout = min(timeout, max(self._idle_since + self._idle_grace_s - self._monotonic(), 0.0))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)

    async def step(self) -> None:
        """Protect (or renew) while busy; clear once idle for the grace; otherwise nothing."""
        now = self._monotonic()
        if self._busy():
            self._idle_since = None
            if (not self.protected or now >= self._renew_at) and await self._set(True):
                # Renewed from the heartbeat once half of it has passed: never close to lapsing.
                self._renew_at = now + self._expires_min * 60.0 / 2.0
            return
        if not self.protected:
            return
        if self._idle_since is None:
            self._idle_since = now
        if now - self._idle_since >= self._idle_grace_s:
            await self._set(False)

    async def _set(self, enabled: bool) -> bool:
        """One PUT to the agent; True when it confirmed ``enabled``. Failures are logged and counted."""
        body: dict[str, Any] = {"ProtectionEnabled": enabled}
        if enabled:
            body["ExpiresInMinutes"] = self._expires_min
        try:
            status, answer = await asyncio.to_thread(self._put, body)
        except (OSError, ValueError) as exc:  # URLError and timeouts are OSErrors
            return self._failed(enabled, repr(exc))
        confirmed = answer.get("protection") if isinstance(answer, dict) else None
        if (
            status != 200
            or not isinstance(confirmed, dict)
            or confirmed.get("ProtectionEnabled") is not enabled
        ):
            return self._failed(enabled, f"HTTP {status}: {json.dumps(answer)[:500]}")
        self.protected = enabled
        self._kernel.logger.info(
            "task protection set" if enabled else "task protection cleared",
            extra={"expires_in_minutes": self._expires_min} if enabled else None,
        )
        return True

    def _put(self, body: dict[str, Any]) -> tuple[int, Any]:
        assert self.url is not None
        request = urllib.request.Request(
            self.url,
            data=json.dumps(body).encode(),
            method="PUT",
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S) as response:
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:  # the agent's 4xx/5xx carry a JSON error or failure
            raw = exc.read()
            try:
                return exc.code, json.loads(raw)
            except ValueError:
                return exc.code, raw.decode(errors="replace")

    def _failed(self, enabled: bool, detail: str) -> bool:
        self._errors += 1
        self._kernel.logger.warning(
            "task protection not updated; the worker goes on, the next heartbeat tries again",
            extra={"protection_enabled": enabled, "error": detail},
        )
        return False

    def _metric_lines(self) -> list[tuple[dict[str, str], dict[str, float]]]:
        errors, self._errors = self._errors, 0
        return [({}, {ERRORS_METRIC: float(errors)})] if errors else []  # dimension: ``service`` alone
