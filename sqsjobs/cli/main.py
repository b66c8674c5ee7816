"""The ``sqsjobs`` command: provision, worker, sweep, dev, enqueue, api.

Every command takes ``--app`` (``SQSJOBS_APP``) and ``--endpoint-url`` (``SQSJOBS_ENDPOINT_URL``),
and turns errors into one actionable line and an exit code, never a traceback: ``guarded`` in
``sqsjobs.cli.common``, whose docstring (and ``sqsjobs --help``) lists the codes.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from sqsjobs.cli.api import api as api_command
from sqsjobs.cli.archive_command import archive_ddl
from sqsjobs.cli.batch_commands import batches_cli
from sqsjobs.cli.chain_commands import chains_cli
from sqsjobs.cli.common import (
    EXIT_CODES_HELP,
    EXIT_ERROR,
    EXIT_USAGE,
    AppOpt,
    EndpointOpt,
    JsonOpt,
    abort,
    console,
    guarded,
    load_app,
    out,
)
from sqsjobs.cli.digest_command import digest
from sqsjobs.cli.dlq_commands import dlq_cli
from sqsjobs.cli.health_commands import doctor, stats
from sqsjobs.cli.job_commands import jobs_cli
from sqsjobs.cli.limits import limits, pause, resume
from sqsjobs.cli.outbox_commands import outbox_cli
from sqsjobs.cli.package import package_cli
from sqsjobs.cli.priority_command import priority
from sqsjobs.cli.render import print_json
from sqsjobs.cli.schedules import schedules_cli
from sqsjobs.cli.worker_commands import workers
from sqsjobs.envelope import read_json
from sqsjobs.errors import ConfigurationError

if TYPE_CHECKING:
    import socket

    from sqsjobs.app import App

cli = typer.Typer(
    no_args_is_help=True,
    add_completion=True,
    help="Durable background jobs on DynamoDB + SQS.",
    epilog=EXIT_CODES_HELP,
)

# Each command group lives in a module of its own (cli/<group>.py) and is added here, one line each.
cli.add_typer(package_cli, name="package")
cli.add_typer(schedules_cli, name="schedules")
cli.add_typer(jobs_cli, name="jobs")
cli.add_typer(dlq_cli, name="dlq")
cli.add_typer(chains_cli, name="chains")
cli.add_typer(batches_cli, name="batches")
cli.add_typer(outbox_cli, name="outbox")
cli.command()(stats)
cli.command()(doctor)
cli.command()(digest)
cli.command("archive-ddl")(archive_ddl)
cli.command()(workers)
cli.command("api")(api_command)
cli.command()(pause)
cli.command()(resume)
cli.command()(limits)
cli.command()(priority)


@cli.command()
def provision(app: AppOpt, endpoint_url: EndpointOpt = None, json_out: JsonOpt = False) -> None:
    """Create the table, queues and DLQs the app needs (safe to repeat)."""
    loaded = load_app(app, endpoint_url)
    with guarded(loaded):
        report = loaded.provision()
    if json_out:
        queues = {q: {"url": url, "dlq_url": report.dlq_urls[q]} for q, url in report.queue_urls.items()}
        routes = {key.replace("\0", ":"): url for key, url in report.route_urls.items()}
        print_json(
            {
                "table": report.table,
                "queues": queues,
                "routes": routes,
                "max_receive_count": report.max_receive_count,
                "bucket": report.bucket,
                "created": report.created,
            }
        )
        return
    out.print(f"table [bold]{report.table}[/bold] (indexes, TTL on expires_at)")
    for queue, url in report.queue_urls.items():
        out.print(
            f"queue [bold]{queue}[/bold]: {url} → DLQ {report.dlq_urls[queue]} after {report.max_receive_count} receives"
        )
    for key, url in report.route_urls.items():
        queue, level = key.split("\0")
        out.print(f"queue [bold]{queue}[/bold] {level}: {url}")


async def _ignores_conditions(app: App) -> bool:
    """The PartiQL probe with the worker's own clients, closed after it: they belong to this loop."""
    from sqsjobs.store import probe

    try:
        return await probe.ignores_conditions(app.arun, app.settings.table_name)
    finally:
        await app.aclose()


@cli.command()
def worker(
    app: AppOpt,
    endpoint_url: EndpointOpt = None,
    queues: Annotated[
        str | None, typer.Option(help="Comma-separated logical queues (default: all of the app's)")
    ] = None,
    concurrency: Annotated[int | None, typer.Option(help="Jobs at once [env: SQSJOBS_CONCURRENCY]")] = None,
) -> None:
    """Run jobs until SIGTERM/SIGINT, then drain.

    Draining lets the running jobs finish until the drain timeout, releases the rest (back to queued,
    no attempt used up) and exits before the platform's kill.
    """
    from sqsjobs.runtime.worker import Worker
    from sqsjobs.store import probe

    loaded = load_app(app, endpoint_url)
    if concurrency is not None:  # the setting, not only the worker's: the connection pools follow it
        loaded.configure(concurrency=concurrency)
    settings = loaded.settings
    if settings.batch_writes and asyncio.run(_ignores_conditions(loaded)):
        # An endpoint that ignores PartiQL conditions (moto's own server) would let a batched claim
        # or finish land where it must be refused: single writes only, said once.
        loaded.telemetry.logger.warning(probe.BATCH_WRITES_OFF, extra={"endpoint": settings.endpoint_url})
        loaded.configure(batch_writes=False)  # before the worker's kernel is built from it
    with guarded(loaded):
        w = Worker(loaded, queues=queues.split(",") if queues else None, concurrency=concurrency)
        w.run_forever()
    if w.abandoned_threads:
        # A sync handler outlived its release; its writes are fenced. Do not wait for the thread.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


@cli.command()
def sweep(
    app: AppOpt,
    endpoint_url: EndpointOpt = None,
    once: Annotated[bool, typer.Option(help="One pass, then exit")] = False,
    json_out: Annotated[
        bool, typer.Option("--json", help="With --once: the pass's report on stdout")
    ] = False,
) -> None:
    """Dispatch records no message will bring to a worker (lost sends, far-future jobs, dead workers)."""
    from sqsjobs.runtime.sweeper import run_sweeper, sweep_once

    if json_out and not once:
        raise abort("--json needs --once (a running sweeper prints no result)", EXIT_USAGE)
    loaded = load_app(app, endpoint_url)
    with guarded(loaded):
        if once:
            report = asyncio.run(sweep_once(loaded))
            if json_out:
                print_json(
                    {
                        "dispatched_held": report.dispatched_held,
                        "redispatched": report.redispatched,
                        "expired": report.expired,
                        "repaired": report.repaired,
                    }
                )
                return
            out.print(
                f"dispatched {len(report.dispatched_held)} held, re-dispatched {len(report.redispatched)} pending, "
                f"expired {len(report.expired)}"
            )
            return

        async def main() -> None:
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, stop.set)
            await run_sweeper(loaded, stop)

        asyncio.run(main())


@cli.command()
def dev(
    app: AppOpt,
    port: Annotated[int, typer.Option(help="Port for the embedded emulator (0 = any free port)")] = 0,
    concurrency: Annotated[int | None, typer.Option(help="Jobs at once")] = None,
    api: Annotated[
        bool, typer.Option("--api/--no-api", help="Serve the HTTP API too (needs the api extra)")
    ] = True,
    api_port: Annotated[int, typer.Option(help="Port for the HTTP API on 127.0.0.1 (0 = any free port)")] = 0,
) -> None:
    """Run everything locally: embedded emulator (moto, on 127.0.0.1), provisioning, worker, sweeper and the HTTP API."""
    loaded = load_app(app, None)
    api_socket = _api_socket(api_port) if api else None
    try:
        with guarded(loaded):
            try:
                _run_dev(loaded, port, concurrency, api_socket)
            except ImportError as exc:  # the embedded emulator (moto) is imported when it starts
                raise ConfigurationError(
                    f"{exc}; install the local extra: pip install 'sqsjobs[local]'"
                ) from None
    finally:
        if api_socket is not None:
            api_socket.close()  # uvicorn closes it too when it served; closing twice is harmless


def _api_socket(port: int) -> socket.socket | None:
    """The API's socket on 127.0.0.1, or None (and why) when the api extra is missing."""
    try:
        from sqsjobs.api import server
    except ImportError:
        console.print("[yellow]no HTTP API:[/yellow] pip install 'sqsjobs[api]' to serve it too")
        return None
    try:
        return server.bind(server.DEFAULT_HOST, port)
    except OSError as exc:
        raise abort(
            f"cannot listen on {server.DEFAULT_HOST}:{port}: {exc.strerror or exc}", EXIT_ERROR
        ) from None


def _run_dev(app: App, port: int, concurrency: int | None, api_socket: socket.socket | None) -> None:
    from sqsjobs.local.dev import DevStack

    with DevStack(app, port=port) as stack:
        console.print(
            f"emulator listening on [bold]{stack.endpoint_url}[/bold]; SQSJOBS_ENDPOINT_URL={stack.endpoint_url}"
        )
        api = None
        if api_socket is not None:
            from sqsjobs.api import server
            from sqsjobs.api.http_app import create_app
            from sqsjobs.api.principals import tokens_from_env

            api = (create_app(app, tokens=tokens_from_env()), api_socket)
            url = server.url_of(api_socket)
            console.print(f"HTTP API on [bold]{url}[/bold] (docs: {url}/docs)", soft_wrap=True)

        async def main() -> None:
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, stop.set)
            await stack.run(stop, concurrency=concurrency, api=api)

        asyncio.run(main())


@cli.command()
def enqueue(
    job_type: Annotated[str, typer.Argument(help="Registered job type")],
    app: AppOpt,
    endpoint_url: EndpointOpt = None,
    payload: Annotated[str, typer.Option(help="JSON, or @file with JSON")] = "null",
    idempotency_key: Annotated[str | None, typer.Option(help="Same key, same job")] = None,
    delay: Annotated[float | None, typer.Option(help="Seconds before it may run")] = None,
    json_out: Annotated[
        bool, typer.Option("--json", help='Print {"id": ...} instead of the bare id')
    ] = False,
) -> None:
    """Enqueue one job and print its id."""
    try:
        raw = Path(payload[1:]).read_text() if payload.startswith("@") else payload
        data: Any = read_json(raw, max_bytes=None)
    except (OSError, ValueError) as exc:
        raise abort(f"--payload is not valid JSON: {exc}", EXIT_USAGE) from None
    loaded = load_app(app, endpoint_url)
    with guarded(loaded):  # bad type or payload: 2, conflict: 4
        job_id = loaded.enqueue(job_type, data, idempotency_key=idempotency_key, delay=delay)
    typer.echo(json.dumps({"id": job_id}) if json_out else job_id)


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="sqsjobs")


if __name__ == "__main__":
    main()
