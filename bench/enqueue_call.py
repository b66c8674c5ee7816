"""What one ``enqueue`` call costs the producer: its latency and its CPU, one job per call.

A MiniStack and the bench's proxy (``bench/proxy.py``, ``--latency-ms`` added to each request, as
``make bench`` does) run in this process; the producer runs in a child process, so the CPU it
reports (``time.process_time()``, every thread of the child, the pool thread of a parallel
enqueue included) is the producer's alone. The producer is thin (no handler code: ``queue=`` named),
enqueues ``--warmup`` jobs, then ``--n`` jobs of a ``--payload-bytes`` payload one call at a time.

``--split`` (sync only) also times each botocore client call from the inside (``time.process_time()``
around the client's method, after the warmup): the CPU of the two requests against the rest,
sqsjobs' own code (docs/bench.md, "Producer CPU per enqueue").

Usage: ``python bench/enqueue_call.py [--n 300] [--latency-ms 10] [--payload-bytes 1000] [--api sync] [--split]``.
Run it with ``PYTHONPATH=<another checkout>`` to measure that checkout's sqsjobs (A/B), from a
directory that is not a checkout (see ``bench/request_cpu.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def _split(app: Any) -> list[float]:
    """Wrap the sync clients' methods so each call adds its CPU to the returned one-item list."""
    inside = [0.0]
    for service in ("sqs", "dynamodb"):
        client = app.clients.boto3.get(service)
        for operation in ("send_message_batch", "put_item", "batch_execute_statement"):
            method = getattr(client, operation, None)
            if method is None:
                continue

            def timed(*args: Any, _method: Any = method, **kwargs: Any) -> Any:
                cpu = time.process_time()
                try:
                    return _method(*args, **kwargs)
                finally:
                    inside[0] += time.process_time() - cpu

            setattr(client, operation, timed)
    return inside


def _child(endpoint: str, name: str, n: int, warmup: int, size: int, api: str, split: bool) -> None:
    from sqsjobs import App

    app = App(name, endpoint_url=endpoint)
    payload = {"blob": "x" * max(0, size - 12)}
    latencies: list[float] = []

    def one() -> None:
        app.enqueue("bench.noop", payload, queue="default")

    async def aone() -> None:
        await app.aenqueue("bench.noop", payload, queue="default")

    async def arun() -> float:
        for _ in range(warmup):
            await aone()
        cpu = time.process_time()
        for _ in range(n):
            start = time.perf_counter()
            await aone()
            latencies.append(time.perf_counter() - start)
        used = time.process_time() - cpu
        await app.clients.aiobotocore.aclose()
        return used

    botocore_s: float | None = None
    if api == "async":
        used = asyncio.run(arun())
    else:
        for _ in range(warmup):
            one()
        inside = _split(app) if split else None
        cpu = time.process_time()
        for _ in range(n):
            start = time.perf_counter()
            one()
            latencies.append(time.perf_counter() - start)
        used = time.process_time() - cpu
        botocore_s = inside[0] / n if inside is not None else None
    print(
        json.dumps(
            {
                "cpu_s": used / n,
                "p50_s": statistics.median(latencies),
                "requests": app.requests.snapshot(),
                "botocore_cpu_s": botocore_s,
            }
        )
    )


def main(argv: list[str] | None = None) -> int:
    """Measure and print the enqueue call's p50 and CPU."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--latency-ms", type=float, default=10.0)
    parser.add_argument("--payload-bytes", type=int, default=1000)
    parser.add_argument("--api", choices=["sync", "async"], default="sync")
    parser.add_argument("--split", action="store_true", help="also time the botocore calls (sync)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--app-name", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    os.environ.update(CREDENTIALS)
    sys.path.append(str(Path(__file__).resolve().parent.parent))  # last: PYTHONPATH picks the sqsjobs
    if args.child:
        _child(args.child, args.app_name, args.n, args.warmup, args.payload_bytes, args.api, args.split)
        return 0
    from bench.proxy import AwsProxy
    from sqsjobs import App
    from tests.emulators import MiniStack

    with MiniStack() as server, AwsProxy(server.endpoint_url, latency_s=args.latency_ms / 1000) as proxy:
        name = f"enq{os.getpid()}"
        App(name, endpoint_url=server.endpoint_url).provision()
        done = subprocess.run(
            [
                sys.executable,
                __file__,
                "--child",
                proxy.url,
                "--app-name",
                name,
                "--n",
                str(args.n),
                "--warmup",
                str(args.warmup),
                "--payload-bytes",
                str(args.payload_bytes),
                "--api",
                args.api,
                *(["--split"] if args.split else []),
            ],
            capture_output=True,
            text=True,
            check=True,
        )
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    import sqsjobs

    print(
        f"sqsjobs from {Path(sqsjobs.__file__).parent.parent}; {args.api} enqueue, {args.n} calls, "
        f"+{args.latency_ms:g} ms per request, {args.payload_bytes} B payload:\n"
        f"  call p50 {1000 * figures['p50_s']:.2f} ms, producer CPU {1000 * figures['cpu_s']:.3f} ms per enqueue\n"
        f"  requests {figures['requests']}"
    )
    if figures.get("botocore_cpu_s") is not None:
        inside = figures["botocore_cpu_s"]
        print(
            f"  of which in botocore's calls {1000 * inside:.3f} ms, "
            f"the rest (sqsjobs) {1000 * (figures['cpu_s'] - inside):.3f} ms"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
