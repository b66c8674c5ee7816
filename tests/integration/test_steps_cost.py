"""What steps and sleeps cost, measured: DynamoDB's own ``ReturnConsumedCapacity`` summed per job (MiniStack).

docs/steps.md states these figures; a change that adds a write or a read per step fails here.
"""

from __future__ import annotations

import uuid

from sqsjobs import App, JobStatus
from sqsjobs.testing import all_finished, work_until

JOBS = 10


def _measure(ministack_url: str, handler, payload):
    """Write and read units per job: the producer's enqueues and the worker's run, not the test's polling."""
    name = f"stepcost{uuid.uuid4().hex[:8]}"
    producer = App(name, endpoint_url=ministack_url, measure_capacity=True)
    producer.job("stepped", timeout=30)(handler)
    producer.provision()
    worker = App(
        name, endpoint_url=ministack_url, measure_capacity=True, receive_wait_s=1, visibility_timeout_s=5
    )
    worker.registry.include(producer.registry)
    producer.requests.reset()
    ids = [producer.enqueue("stepped", payload) for _ in range(JOBS)]
    enqueued = producer.requests.units("write")
    ran = work_until(worker, all_finished(producer, ids), concurrency=10)
    assert all(producer.get(i).status is JobStatus.SUCCEEDED for i in ids)
    registry = sum(ran.presence.capacity.values())  # the worker's registry item: a cost per process
    writes = (enqueued + worker.requests.units("write") - registry) / JOBS
    reads = worker.requests.units("read") / JOBS
    producer.close()
    worker.close()
    return writes, reads


def five_steps(payload, ctx):
    return [ctx.step(f"s{n}", lambda n=n: {"n": n, "note": "x" * 40}) for n in range(5)]


def step_sleep_step(payload, ctx):
    ctx.step("a", lambda: 1)
    ctx.sleep(0.5)
    return ctx.step("b", lambda: 2)


def test_a_step_costs_one_write_unit_and_a_stepped_run_one_read(ministack_url):
    writes, reads = _measure(ministack_url, five_steps, {})
    print(f"\nfive small steps: {writes:.2f} write units, {reads:.2f} read units per job")
    # enqueue + claim + 5 steps + finish: one unit each while the record stays under 1 KB (these
    # records cross it near their end: a write past it costs 2); one strongly consistent read (the
    # run's first step learns what earlier runs recorded)
    assert 8 <= writes <= 9
    assert reads == 1


def test_a_sleep_costs_one_write_and_a_second_run_claim_and_read(ministack_url):
    writes, reads = _measure(ministack_url, step_sleep_step, {})
    print(f"\nstep, sleep, step: {writes:.2f} write units, {reads:.2f} read units per job")
    # enqueue + claim + step + sleep | claim + step + finish; each run reads once
    assert writes == 7
    assert reads == 2
