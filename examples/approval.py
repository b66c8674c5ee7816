"""``make approval``: an order that charges, waits for a person's approval, then ships (docs/steps.md).

On the embedded emulator: two orders are charged (a step: once per job), each asks a manager for
approval with a wait token and ends its run while it waits (no slot held, no attempt used). The
script plays the manager: it approves one order (``app.tokens.complete``) and rejects the other
(``app.tokens.fail``). The approved order ships, sleeps a second (``ctx.sleep``: the run ends again)
and asks for a review; the rejected one is refunded. The run ends by printing each order's steps.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from datetime import timedelta
from typing import Any

from rich.console import Console
from rich.table import Table

from sqsjobs import App, JobContext
from sqsjobs.errors import TokenFailed
from sqsjobs.local.dev import DevStack
from sqsjobs.ops.job_views import job_to_dict

console = Console(width=120)
app = App("approval")

#: order id → the token its manager was sent (what an email or a Slack message would carry)
INBOX: dict[str, str] = {}
#: how often each side effect ran, whatever the runs and retries
CALLS: dict[str, int] = {}
_lock = threading.Lock()


def effect(name: str, order: str) -> str:
    """A side effect on the outside world (a charge, a label, an email), counted."""
    with _lock:
        CALLS[f"{name} {order}"] = CALLS.get(f"{name} {order}", 0) + 1
    return f"{name}-{order}"


def ask_manager(order: str, token_id: str) -> str:
    with _lock:
        INBOX[order] = token_id
    return effect("ask", order)


@app.job("orders.fulfil", max_attempts=3, timeout=30)
def fulfil(payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    """Charge, wait for approval, ship (or refund), then a review mail a moment later."""
    order = str(payload["order"])
    charge = ctx.step("charge", effect, "charge", order)
    token = ctx.create_token(timeout=timedelta(minutes=10))
    ctx.step("ask", ask_manager, order, token.id)
    try:
        decision = ctx.wait_for_token(token)
    except TokenFailed as refused:
        ctx.step("refund", effect, "refund", order)
        return {"order": order, "charge": charge, "refunded": str(refused)}
    label = ctx.step("ship", effect, "ship", order)
    ctx.sleep(timedelta(seconds=1))
    ctx.step("review", effect, "review-mail", order)
    return {"order": order, "charge": charge, "approved_by": decision["by"], "label": label}


async def run(stack: DevStack, timeout_s: float = 60) -> list[str]:
    stop = asyncio.Event()
    running = asyncio.create_task(stack.run(stop, concurrency=4))
    ids = [await app.aenqueue("orders.fulfil", {"order": order}) for order in ("A-100", "B-200")]
    deadline = time.monotonic() + timeout_s
    answered: set[str] = set()
    try:
        while time.monotonic() < deadline:
            with _lock:
                inbox = dict(INBOX)
            for order, token in inbox.items():
                if order in answered:
                    continue
                if order == "A-100":
                    console.print(f"  manager approves {order} (token {token})")
                    await app.tokens.acomplete(token, {"by": "grace"})
                else:
                    console.print(f"  manager rejects {order} (token {token})")
                    await app.tokens.afail(token, "over budget")
                answered.add(order)
            jobs = [await app.aget(i) for i in ids]
            if all(job.status.terminal for job in jobs):
                break
            await asyncio.sleep(0.2)
    finally:
        stop.set()
        await running
    return ids


def main() -> None:
    os.environ.setdefault("SQSJOBS_LOG_LEVEL", "WARNING")
    os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
    with DevStack(app, receive_wait_s=1, sweep_interval_s=1) as stack:
        console.print(f"[bold]sqsjobs approval[/bold] — embedded emulator at {stack.endpoint_url}\n")
        ids = asyncio.run(run(stack))
        for job_id in ids:
            data = job_to_dict(app.get(job_id))
            console.print(f"\n[bold]{data['result']['order']}[/bold] {data['status']}: {data['result']}")
            table = Table()
            for col in ("step", "attempt", "duration"):
                table.add_column(col)
            for step in data["steps"]:
                table.add_row(step["name"], str(step["attempt"]), f"{step['duration_s']:g} s")
            console.print(table)
        console.print("side effects: " + ", ".join(f"{k} x{n}" for k, n in sorted(CALLS.items())))


if __name__ == "__main__":
    main()
