"""``make flow-demo``: a paused type and a limited dependency on the embedded emulator, then a summary.

Eight ``geo.lookup`` jobs share the ``geo-api`` limit (2 at a time, 4 starts per second, fleet-wide)
and three ``newsletter.send`` jobs wait while their type is paused; after a few seconds the type is
resumed and they run. The run log shows the most lookups that ever ran at once and when each
newsletter started relative to the resume.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time

from rich.console import Console
from rich.table import Table

from sqsjobs import App, JobContext
from sqsjobs.cli.limits import flow_view
from sqsjobs.limits.namespace import state_flow
from sqsjobs.local.dev import DevStack

console = Console(width=120)
app = App("flowdemo")
app.limit("geo-api", concurrency=2, rate="4/s")
RUNS: list[tuple[str, float, float]] = []
_lock = threading.Lock()


@app.job("geo.lookup", limits=["geo-api"])
def geo_lookup(payload: dict[str, str], ctx: JobContext) -> str:
    """Calls a rate-limited dependency (here: sleeps as long as a call would take)."""
    begun = time.time()
    time.sleep(0.4)
    with _lock:
        RUNS.append(("geo.lookup", begun, time.time()))
    return f"{payload['address']} → 52.5, 13.4"


@app.job("newsletter.send", pausable=True)
def newsletter(payload: dict[str, str], ctx: JobContext) -> None:
    """A type an operator may pause (say, while the mail provider is being changed)."""
    with _lock:
        RUNS.append(("newsletter.send", time.time(), time.time()))


def max_overlap(runs: list[tuple[str, float, float]]) -> int:
    events = sorted([(b, 1) for _, b, _ in runs] + [(e, -1) for _, _, e in runs])
    running = peak = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    return peak


async def run(stack: DevStack, ids: list[str]) -> float:
    stop = asyncio.Event()
    worker = asyncio.create_task(stack.run(stop, concurrency=8))
    await asyncio.sleep(4)
    waiting = [(await app.aget(i)).status for i in ids if (await app.aget(i)).type == "newsletter.send"]
    console.print(f"after 4 s, the paused newsletters are: {', '.join(map(str, waiting))}")
    resumed = time.time()
    await app.limits.aresume("newsletter.send")
    console.print("resumed newsletter.send")
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        jobs = [await app.aget(i) for i in ids]
        if all(j.status.terminal for j in jobs):
            break
        await asyncio.sleep(0.3)
    stop.set()
    await worker
    return resumed


def main() -> None:
    os.environ.setdefault("SQSJOBS_LOG_LEVEL", "WARNING")
    os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
    with DevStack(app, receive_wait_s=1) as stack:
        console.print(f"[bold]sqsjobs flow control[/bold] — embedded emulator at {stack.endpoint_url}\n")
        started = time.monotonic()
        app.limits.pause("newsletter.send", reason="switching mail provider")
        console.print("paused newsletter.send (switching mail provider)")
        ids = app.enqueue_many(
            [{"type": "geo.lookup", "payload": {"address": f"street {n}"}} for n in range(8)]
        )
        ids += app.enqueue_many([{"type": "newsletter.send", "payload": {"to": f"u{n}"}} for n in range(3)])
        console.print("enqueued 8 geo.lookup (limit geo-api: 2 at once, 4/s) and 3 newsletter.send")
        resumed = asyncio.run(run(stack, ids))

        table = Table(title="Final state of each job")
        for column in ("type", "status", "attempts", "started (s after the first)"):
            table.add_column(column)
        jobs = [app.get(i) for i in ids]
        first = min(j.started_at.timestamp() for j in jobs if j.started_at)
        for job in jobs:
            start = job.started_at.timestamp() - first if job.started_at else float("nan")
            table.add_row(job.type, str(job.status), str(job.attempt), f"{start:.1f}")
        console.print(table)
        lookups = [r for r in RUNS if r[0] == "geo.lookup"]
        sends = [b for kind, b, _ in RUNS if kind == "newsletter.send"]
        console.print(f"most geo.lookup runs at once: {max_overlap(lookups)} (limit 2)")
        console.print(
            f"newsletters started {min(sends) - resumed:.1f}-{max(sends) - resumed:.1f} s after the resume"
        )
        console.print(
            flow_view(
                app.run(state_flow(app.settings.table_name, app.registry, app.limits, now=time.time())),
                time.time(),
            )
        )
        console.print(f"done in {time.monotonic() - started:.1f} s")
        assert all(j.status == "succeeded" for j in jobs), "every job succeeds"
        assert max_overlap(lookups) <= 2 and min(sends) >= resumed


if __name__ == "__main__":
    main()
