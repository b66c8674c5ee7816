"""Serving the API locally with uvicorn: ``sqsjobs api`` on its own, ``sqsjobs dev`` beside the worker.

The socket is bound before the server starts, so the port is known (and printed) even when the OS
picked it (``--port 0``), and a port that is taken fails the command at once with its reason.

In ``sqsjobs dev`` the server shares the worker's event loop, so the App's async clients serve
both. uvicorn leaves the process's signals to its host either way (``EmbeddedServer``): ``dev`` stops
it with the worker, ``sqsjobs api`` closes the App's clients after it and exits 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
from typing import TYPE_CHECKING, Any

import uvicorn

if TYPE_CHECKING:
    from collections.abc import Iterator

    from fastapi import FastAPI

#: The address ``sqsjobs api`` listens on unless told otherwise.
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
#: Seconds open requests get to finish when the server stops.
GRACEFUL_S = 5


def is_loopback(host: str) -> bool:
    """True when only this machine can reach ``host`` (``127.0.0.0/8``, ``::1``, ``localhost``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name: it may resolve to anything


def bind(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` (port 0: one the OS picks); ``OSError`` when it cannot be."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host.strip("[]"), port))
    except OSError:
        sock.close()
        raise
    return sock


def url_of(sock: socket.socket) -> str:
    """``http://host:port`` of a bound socket."""
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class EmbeddedServer(uvicorn.Server):
    """A uvicorn server that leaves SIGINT and SIGTERM to its host, stopped by ``should_exit``."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """Capture nothing: the host's handlers stay in place."""
        yield


def config(api: FastAPI, *, log_config: Any = uvicorn.config.LOGGING_CONFIG) -> uvicorn.Config:
    """How the API is served: no lifespan (the App's clients are closed by whoever made them), no server header."""
    return uvicorn.Config(
        api,
        lifespan="off",
        server_header=False,
        proxy_headers=False,
        timeout_graceful_shutdown=GRACEFUL_S,
        log_config=log_config,
    )


async def serve(
    api: FastAPI,
    sock: socket.socket,
    stop: asyncio.Event,
    *,
    log_config: Any = uvicorn.config.LOGGING_CONFIG,
) -> None:
    """Serve ``api`` on ``sock`` until ``stop`` is set, then give open requests ``GRACEFUL_S`` to finish.

    The caller owns the signals (``sqsjobs api`` and ``sqsjobs dev`` set ``stop`` on SIGINT and
    SIGTERM). ``log_config`` is uvicorn's (None: leave logging as it is, e.g. to a test's capture).
    """
    server = EmbeddedServer(config(api, log_config=log_config))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    stopped = asyncio.create_task(stop.wait())
    await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
    server.should_exit = True
    stopped.cancel()
    await task
