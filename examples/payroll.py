"""``make payroll``: a payroll run as a tree of batches, and a chain, on the embedded emulator.

The seed's payroll: a root batch of ``payroll.calc`` items, one per employee, each of which streams a
``checks.send`` item into a child batch created up front. The child is sealed by its parent once every
calculation is done; its callback (``checks.done``, a final stage) gets the sent checks' results; the
root's callback (``payroll.report``) runs last, once the child completed. One employee has no bank
account: that check dies and is counted as failed. Meanwhile a three-step chain closes the ledger,
each step reading the result of the one before. The run ends by printing the tree and the chain.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.tree import Tree

from sqsjobs import App, BatchStatus, JobContext, PermanentError
from sqsjobs.batches.namespace import env_of
from sqsjobs.local.dev import DevStack
from sqsjobs.ops.batch_views import BatchNode, tree_flow

console = Console(width=120)
app = App("payroll")

#: employee id → (name, monthly gross in cents, bank account)
EMPLOYEES = {
    1: ("Ada", 520_000, "DE02 1001"),
    2: ("Grace", 610_000, "DE02 1002"),
    3: ("Edsger", 480_000, "DE02 1003"),
    4: ("Barbara", 555_000, "DE02 1004"),
    5: ("Alan", 499_000, None),  # no bank account on file: the check cannot be sent
}


@app.job("payroll.calc")
def calc(payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    """Net pay of one employee; streams the check to send into the checks batch."""
    name, gross, _ = EMPLOYEES[payload["employee"]]
    net = round(gross * 0.71)
    ctx.add_to_batch(payload["checks"], "checks.send", {"employee": payload["employee"], "net": net})
    return {"employee": name, "net": net}


@app.job("checks.send")
def send_check(payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    name, _, account = EMPLOYEES[payload["employee"]]
    if account is None:
        raise PermanentError(f"{name} has no bank account on file")
    return {"employee": name, "net": payload["net"], "check": f"CHK-{payload['employee']:04d}"}


@app.job("checks.done")
def checks_done(payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    """The checks batch's callback (final stage): it sees every sent check's result."""
    sent = [item["result"] for item in payload["items"]]
    return {"sent": len(sent), "failed": payload["counts"]["failed"], "total": sum(c["net"] for c in sent)}


@app.job("payroll.report")
def report(payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    """The root's callback: runs once, last, after the checks batch completed."""
    return {"calculated": payload["counts"]["succeeded"], "failed": payload["counts"]["failed"]}


@app.job("ledger.open")
def ledger_open(payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    return {"period": payload["period"], "entries": 0}


@app.job("ledger.post")
def ledger_post(payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    return {**ctx.previous_result, "entries": ctx.previous_result["entries"] + len(EMPLOYEES)}


@app.job("ledger.close")
def ledger_close(payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    return {**ctx.previous_result, "closed": True}


def line(st: BatchStatus) -> str:
    counts = st.counts
    text = (
        f"[bold]{escape(st.id[:8])}[/bold] {st.status}{' (failed)' if st.failed else ''}: "
        f"{counts['succeeded']} succeeded, {counts['failed']} failed, {counts['pending']} pending"
    )
    if st.callback_id:
        callback = app.get(st.callback_id)
        text += f" → {st.on_complete} {callback.status}: {callback.result}"
    return text


def draw(tree: Tree, node: BatchNode) -> None:
    for child in node.children:
        draw(tree.add(line(child.status)), child)


async def run_until_done(stack: DevStack, root_id: str, chain_id: str, timeout_s: float = 90) -> None:
    stop = asyncio.Event()
    running = asyncio.create_task(stack.run(stop, concurrency=4))
    deadline = time.monotonic() + timeout_s
    seen: dict[str, str] = {}
    while time.monotonic() < deadline:
        node = await asyncio.to_thread(app.run, tree_flow(env_of(app.kernel), root_id))
        for st in (node.status, *(c.status for c in node.children)):
            if seen.get(st.id) != st.status:
                console.print(f"  batch {st.id[:8]} → [bold]{st.status}[/bold]  {st.counts}")
                seen[st.id] = st.status
        callback = node.status.callback_id and await app.aget(node.status.callback_id)
        chain = await app.chains.aget(chain_id)
        if callback and callback.status.terminal and chain.status != "running":
            break
        await asyncio.sleep(0.2)
    stop.set()
    await running


def main() -> None:
    os.environ.setdefault("SQSJOBS_LOG_LEVEL", "WARNING")
    os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
    with DevStack(app, receive_wait_s=1) as stack:
        console.print(f"[bold]sqsjobs payroll[/bold] — embedded emulator at {stack.endpoint_url}\n")
        started = time.monotonic()
        root = app.batches.create("payroll.report")
        checks = app.batches.create("checks.done", parent=root.id, final_stage=True)
        items = [
            root.add("payroll.calc", {"employee": e, "checks": checks.id}, dedupe_key=f"emp-{e}")
            for e in EMPLOYEES
        ]
        again = root.add("payroll.calc", {"employee": 1, "checks": checks.id}, dedupe_key="emp-1")
        root.seal()
        chain_id = app.chains.start(
            [("ledger.open", {"period": "2026-11"}), ("ledger.post", {}), ("ledger.close", {})]
        )
        console.print(
            f"root batch {root.id[:8]}: {len(items)} calculations, sealed (adding employee 1 again with its "
            f"dedupe key returned the same item: {again == items[0]}); checks batch {checks.id[:8]}, "
            f"sealed by its parent; ledger chain {chain_id[:8]}\n"
        )
        asyncio.run(run_until_done(stack, root.id, chain_id))

        node = app.run(tree_flow(env_of(app.kernel), root.id))
        tree = Tree(line(node.status))
        draw(tree, node)
        console.print("\n[bold]The tree[/bold]")
        console.print(tree)
        order = sorted(
            (s.completed_at or 0, s.on_complete) for s in (node.status, *(c.status for c in node.children))
        )
        console.print("completed in this order: " + " → ".join(name for _, name in order))
        chain = app.chains.get(chain_id)
        console.print(f"\n[bold]The chain[/bold] {chain_id[:8]}: {chain.status}")
        for step in chain.steps:
            job = app.get(step.job_id)
            console.print(f"  {step.position}. {step.type:<13} {job.status:<9} {job.result}")
        console.print(f"done in {time.monotonic() - started:.1f} s")


if __name__ == "__main__":
    main()
