"""``sqsjobs api``: serve the HTTP API of an App locally (uvicorn), see docs/api.md.

Without a token it listens on a loopback address only, and says so; it refuses any other address
unless a token is set (``--token``, or better ``SQSJOBS_API_TOKEN``: a command line is visible to
every user of the machine). The work is ``sqsjobs.api``; errors go through ``guarded`` as for
every command.
"""

from __future__ import annotations

import asyncio
import signal
from typing import TYPE_CHECKING, Annotated, Any

import typer

from sqsjobs.cli.common import EXIT_ERROR, EXIT_USAGE, AppOpt, EndpointOpt, abort, console, guarded, load_app
from sqsjobs.errors import ConfigurationError

if TYPE_CHECKING:
    import socket

    from sqsjobs.api.principals import Tokens
    from sqsjobs.app import App

INSTALL_HINT = "the API needs FastAPI, uvicorn and Mangum: pip install 'sqsjobs[api]'"


def api(
    app: AppOpt,
    endpoint_url: EndpointOpt = None,
    host: Annotated[
        str, typer.Option(help="Address to listen on; anything but loopback needs a token")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port (0: any free port, printed)")] = 8000,
    token: Annotated[
        str | None,
        typer.Option(
            envvar="SQSJOBS_API_TOKEN",
            help="Bearer token every request must carry [env: SQSJOBS_API_TOKEN]",
            show_default=False,
        ),
    ] = None,
    max_body_bytes: Annotated[
        int | None, typer.Option(help="Refuse larger request bodies with 413 (default 1 MiB)")
    ] = None,
    allowed_host: Annotated[
        list[str] | None,
        typer.Option(
            help="A Host name to answer to without a token (repeatable; default: loopback names only)"
        ),
    ] = None,
    secure_cookies: Annotated[
        bool, typer.Option(help="Mark the console's session cookie Secure (served over HTTPS)")
    ] = False,
) -> None:
    """Serve the HTTP API (enqueue, jobs, queues, DLQ; docs at /docs) until Ctrl-C.

    Named tokens with roles (viewer, operator) come from SQSJOBS_API_TOKENS or SQSJOBS_API_TOKENS_FILE
    (docs/security.md), besides the one operator token of --token / SQSJOBS_API_TOKEN.
    """
    if token is not None and not token.strip():
        raise abort("--token is empty: give a real token, or none to listen on loopback only", EXIT_USAGE)
    try:
        from sqsjobs.api import server
        from sqsjobs.api.principals import Tokens, tokens_from_env
        from sqsjobs.api.security import loopback_hosts
    except ImportError:
        raise abort(INSTALL_HINT, EXIT_ERROR) from None
    try:
        tokens = Tokens([*tokens_from_env(single=False), *Tokens.single(token)])
    except ConfigurationError as exc:
        raise abort(str(exc), EXIT_USAGE) from None
    if not tokens and not server.is_loopback(host):
        raise abort(
            f"refusing to listen on {host} without a token: anyone who reaches it could enqueue, cancel "
            "and replay jobs. Set SQSJOBS_API_TOKEN (or --token), or keep --host 127.0.0.1",
            EXIT_USAGE,
        )
    if max_body_bytes is not None and max_body_bytes < 1:
        raise abort(f"--max-body-bytes must be at least 1, got {max_body_bytes}", EXIT_USAGE)
    loaded = load_app(app, endpoint_url)
    try:
        sock = server.bind(host, port)
    except OSError as exc:
        raise abort(f"cannot listen on {host}:{port}: {exc.strerror or exc}", EXIT_ERROR) from None
    try:
        with guarded(loaded):
            fastapi_app = build(
                loaded,
                tokens,
                max_body_bytes,
                allowed_hosts=[*loopback_hosts(host), *allowed_host] if allowed_host else None,
                secure_cookies=secure_cookies,
            )
            url = server.url_of(sock)
            console.print(
                f"sqsjobs API of App [bold]{loaded.name}[/bold] on [bold]{url}[/bold] (docs: {url}/docs)",
                soft_wrap=True,
            )
            if not tokens:
                console.print(
                    f"no token configured: listening on {host} only, where every local user and process "
                    "may call it; set SQSJOBS_API_TOKEN to require a bearer token",
                    soft_wrap=True,
                )
            asyncio.run(_serve(loaded, fastapi_app, sock))
    finally:
        sock.close()  # uvicorn closes it too when it served; closing twice is harmless


def build(
    app: App,
    tokens: Tokens,
    max_body_bytes: int | None,
    *,
    allowed_hosts: list[str] | None = None,
    secure_cookies: bool = False,
) -> Any:
    """The FastAPI application of ``app`` (``sqsjobs.api.http_app.create_app``)."""
    from sqsjobs.api.http_app import create_app

    options: dict[str, Any] = {"allowed_hosts": allowed_hosts, "secure_cookies": secure_cookies}
    if max_body_bytes is not None:
        options["max_body_bytes"] = max_body_bytes
    return create_app(app, tokens=tokens, **options)


async def _serve(app: App, fastapi_app: Any, sock: socket.socket) -> None:
    """Serve until SIGINT or SIGTERM, let open requests finish, close the App's clients; exit 0."""
    from sqsjobs.api import server

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await server.serve(fastapi_app, sock, stop)
    finally:
        await app.aclose()
