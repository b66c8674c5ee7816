"""The API served for real: uvicorn on 127.0.0.1 in a thread of the test process, called with httpx."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from sqsjobs import App
from sqsjobs.api import server
from sqsjobs.api.http_app import create_app

PROBLEM = "application/problem+json"
#: How long a server may take to start answering (a loaded 2-core machine runs 8 test workers).
START_TIMEOUT_S = 30.0


@contextlib.contextmanager
def serving(app: App, *, token: str | None = None, **options: Any) -> Iterator[str]:
    """Serve ``create_app(app, token=...)`` on a free loopback port until the block ends; yields its URL.

    uvicorn gets no logging config of its own, so its lines (access log included) reach the root
    logger, where pytest's capture sees them. The thread runs its own event loop: the App's async
    clients are opened on it and closed when it stops.
    """
    api = create_app(app, token=token, **options)
    sock = server.bind("127.0.0.1", 0)
    url = server.url_of(sock)
    ready = threading.Event()
    state: dict[str, Any] = {}

    def run() -> None:
        async def main() -> None:
            stop = asyncio.Event()
            state["loop"], state["stop"] = asyncio.get_running_loop(), stop
            ready.set()
            try:
                await server.serve(api, sock, stop, log_config=None)
            finally:
                await app.aclose()

        asyncio.run(main())

    thread = threading.Thread(target=run, name=f"api-{app.name}", daemon=True)
    thread.start()
    assert ready.wait(START_TIMEOUT_S), "the API thread did not start"
    _wait_until_listening(url, token)
    try:
        yield url
    finally:
        state["loop"].call_soon_threadsafe(state["stop"].set)
        thread.join(server.GRACEFUL_S + 10)
        assert not thread.is_alive(), "the API server did not stop"


def _wait_until_listening(url: str, token: str | None) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            # The sign-in page: always served, outside the guard, and cheap (the OpenAPI document is
            # built on its first request, which takes seconds on a loaded machine).
            httpx.get(f"{url}/ui/login", headers=auth(token), timeout=5, trust_env=False, verify=False)
            return
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def auth(token: str | None) -> dict[str, str]:
    """The Authorization header for ``token`` (none for None)."""
    return {"Authorization": f"Bearer {token}"} if token else {}


def client(url: str, token: str | None = None) -> httpx.Client:
    """An httpx client for the API at ``url``, sending ``token``.

    ``verify=False`` on every client of these plain-HTTP loopback servers: no TLS is spoken, and a
    client that verifies parses the CA bundle when it is made (80 ms of CPU, each one).
    """
    return httpx.Client(base_url=url, headers=auth(token), timeout=30, trust_env=False, verify=False)


def assert_problem(response: httpx.Response, status: int, field: str | None) -> dict[str, Any]:
    """``response`` is a problem body with ``status`` naming ``field``, and no trace of a traceback."""
    text = response.text
    assert response.status_code == status, (response.status_code, text)
    assert response.headers["content-type"] == PROBLEM, response.headers
    assert "Traceback" not in text and 'File "' not in text, text
    body = response.json()
    assert body["status"] == status and body["type"].startswith("urn:sqsjobs:problem:"), body
    assert body["title"] and body["detail"], body
    assert body.get("field") == field, body
    return dict(body)


@contextlib.contextmanager
def api_process(
    app: App, log: Path, *, app_path: str = "tests.cli.jobs_app:app", **env: str
) -> Iterator[str]:
    """A real ``sqsjobs api`` process serving ``app``'s table and queues on a free loopback port.

    ``app_path`` is loaded in the process and pointed at ``app``'s table and queue prefix; ``env``
    adds to the environment (tokens, log level). Its stderr (uvicorn's lines, the JSON log with the
    audit trail) goes to ``log``. Yields the URL; the process is stopped with SIGTERM after the block.
    """
    from tests.emulators import REPO_ROOT
    from tests.integration.helpers import worker_env

    settings = app.settings
    environment = worker_env(
        app, SQSJOBS_TABLE=settings.table_name, SQSJOBS_QUEUE_PREFIX=settings.queue_prefix, **env
    )
    with log.open("w") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "sqsjobs", "api", "--app", app_path, "--port", "0"],
            cwd=REPO_ROOT,
            env=environment,
            stdout=subprocess.DEVNULL,
            stderr=sink,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + 60
            while (found := re.search(r"on (http://127\.0\.0\.1:\d+)", log.read_text())) is None:
                assert proc.poll() is None, log.read_text()
                assert time.monotonic() < deadline, f"sqsjobs api did not start: {log.read_text()}"
                time.sleep(0.1)
            url = found.group(1)
            _wait_until_listening(url, None)
            yield url
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(10)


def flat_routes(routes: Any) -> Iterator[Any]:
    """Every route, with the routers included into the app opened up (FastAPI keeps them nested)."""
    for route in routes:
        if hasattr(route, "original_router"):
            yield from flat_routes(route.original_router.routes)
        elif hasattr(route, "path"):
            yield route


def sse_events(response: httpx.Response) -> Iterator[tuple[str, Any]]:
    """The Server-Sent Events of a streamed answer, as (event name, JSON data)."""
    name, data = "message", []
    for line in response.iter_lines():
        if line == "":
            if data:
                yield name, json.loads("\n".join(data))
            name, data = "message", []
        elif line.startswith("event:"):
            name = line.partition(":")[2].strip()
        elif line.startswith("data:"):
            data.append(line.partition(":")[2].strip())


@contextlib.contextmanager
def following(url: str, path: str, token: str | None) -> Iterator[list[tuple[str, Any]]]:
    """Follow ``path``'s event stream in a thread while the block runs; the events seen, up to ``end``.

    The block should make the stream end (the job or workflow ends); leaving it waits for that.
    """
    seen: list[tuple[str, Any]] = []
    opened = threading.Event()

    def follow() -> None:
        with client(url, token) as http, http.stream("GET", path, timeout=120) as stream:
            assert stream.status_code == 200, stream.read()
            opened.set()
            for event in sse_events(stream):
                seen.append(event)
                if event[0] in ("end", "gone"):
                    return

    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    assert opened.wait(30), "the event stream did not open"
    yield seen
    thread.join(120)
    assert not thread.is_alive(), seen
