"""What a child costs, measured: DynamoDB's own ``ReturnConsumedCapacity`` and the SQS calls (MiniStack).

A map of ``SMALL`` and one of ``LARGE`` children are run by an in-process worker; what the larger one
costs more, divided by the extra children, is the cost of one child (the await's own writes — token,
batch record and shards, seal, completion, wake, the parent's steps and its second run — cancel out).
docs/children.md states these figures; a change that adds a write or a read per child fails here.
"""

from __future__ import annotations

import uuid

from sqsjobs import App, JobStatus
from sqsjobs.testing import all_finished, work_until

SMALL, LARGE = 20, 100


def square(payload: dict, ctx) -> int:
    return int(payload["n"]) ** 2


def parent(payload: dict, ctx) -> int:
    return sum(ctx.children.map("square", [{"n": n} for n in range(payload["count"])]))


def _measure(ministack_url: str, count: int) -> tuple[float, float, int, dict]:
    """Write units, read units and SQS calls of one parent mapping ``count`` children, end to end."""
    name = f"childcost{uuid.uuid4().hex[:8]}"
    app = App(
        name, endpoint_url=ministack_url, measure_capacity=True, receive_wait_s=1, visibility_timeout_s=5
    )
    app.job("square", timeout=30)(square)
    app.job("parent", timeout=60)(parent)
    app.provision()
    app.requests.reset()
    job = app.enqueue("parent", {"count": count})
    ran = work_until(app, all_finished(app, [job]), concurrency=10)
    assert app.get(job).status is JobStatus.SUCCEEDED
    assert app.get(job).result == sum(n * n for n in range(count))
    registry = sum(ran.presence.capacity.values())  # the worker's registry item: a cost per process
    writes = app.requests.units("write") - registry
    reads = app.requests.units("read")
    sqs = app.requests.total("sqs")
    parts = {
        **{f"{k}:{p}": v for (k, p), v in app.requests.capacity.items()},
        **{f"{s}.{o}": n for (s, o), n in app.requests.counts.items()},
    }
    parts["write:table"] = parts.get("write:table", 0) - registry
    app.close()
    return writes, reads, sqs, parts


def test_a_child_costs_a_transactional_add_its_run_and_its_share_of_the_wake(ministack_url):
    small, large = _measure(ministack_url, SMALL), _measure(ministack_url, LARGE)
    extra = LARGE - SMALL
    writes, reads = (large[0] - small[0]) / extra, (large[1] - small[1]) / extra
    sqs = (large[2] - small[2]) / extra
    print(
        f"\nper child: {writes:.2f} write units, {reads:.2f} read units, {sqs:.2f} SQS calls"
        f"\nmap of {SMALL}: {small[0]:.1f} W, {small[1]:.1f} R, {small[2]} SQS; "
        f"map of {LARGE}: {large[0]:.1f} W, {large[1]:.1f} R, {large[2]} SQS"
    )
    for part in sorted(set(small[3]) | set(large[3])):
        print(f"  {part}: {(large[3].get(part, 0) - small[3].get(part, 0)) / extra:.2f} per child")
    assert writes <= 15
    assert reads <= 3
