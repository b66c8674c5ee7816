"""What a signal wait and a signal cost, measured: DynamoDB's ``ReturnConsumedCapacity`` summed (MiniStack).

docs/signals.md states these figures; a change that adds a write or a read per wait or per signal
fails here.
"""

from __future__ import annotations

import uuid

from sqsjobs import App, JobStatus
from sqsjobs.testing import all_finished, work_until

JOBS = 10


def waiter(payload, ctx):
    return ctx.signals.wait("paid", match={"order_id": payload["order_id"]}, timeout=120)


def _apps(ministack_url: str) -> tuple[App, App, App]:
    name = f"sigcost{uuid.uuid4().hex[:8]}"
    producer, worker, sender = (
        App(name, endpoint_url=ministack_url, measure_capacity=True, receive_wait_s=1, visibility_timeout_s=5)
        for _ in range(3)
    )
    producer.job("waiter", timeout=30)(waiter)
    for app in (producer, worker, sender):
        app.signals.declare("paid", keys=["order_id"])
    worker.registry.include(producer.registry)
    producer.provision()
    producer.requests.reset()
    return producer, worker, sender


def test_a_wait_and_a_signal_cost_what_the_docs_say(ministack_url):
    producer, worker, sender = _apps(ministack_url)
    observer = App(producer.name, endpoint_url=ministack_url)
    ids = [producer.enqueue("waiter", {"order_id": n}) for n in range(JOBS)]
    enqueued = producer.requests.units("write")

    # the jobs run to their waits and end there (queued, held on their tokens)
    def waiting() -> bool:
        return all(
            (job := observer.get(i, load_result=False)).status is JobStatus.QUEUED
            and job.attempt == 0
            and job.run_at is not None
            and job.run_at.timestamp() > job.created_at.timestamp() + 60
            for i in ids
        )

    first = work_until(worker, waiting, concurrency=10)
    registry = sum(first.presence.capacity.values())
    to_wait = (enqueued + worker.requests.units("write") - registry) / JOBS
    wait_reads = worker.requests.units("read") / JOBS

    # a signal nobody waits for, then one per waiting job
    sender.signals.send("paid", {"order_id": -1})
    alone = sender.requests.units("write"), sender.requests.units("read")
    sender.requests.reset()
    for n in range(JOBS):
        assert len(sender.signals.send("paid", {"order_id": n}).answered) == 1
    per_signal = sender.requests.units("write") / JOBS, sender.requests.units("read") / JOBS

    worker.requests.reset()
    second = work_until(worker, all_finished(observer, ids), concurrency=10)
    registry = sum(second.presence.capacity.values())
    woken = (worker.requests.units("write") - registry) / JOBS, worker.requests.units("read") / JOBS
    assert all(observer.get(i).result == {"order_id": n} for n, i in enumerate(ids))
    print(
        f"\nto the wait (enqueue included): {to_wait:.2f} write units, {wait_reads:.2f} read units per job"
        f"\nsignal, no waiter: {alone[0]:.2f} write, {alone[1]:.2f} read"
        f"\nsignal answering one waiter: {per_signal[0]:.2f} write, {per_signal[1]:.2f} read"
        f"\nwoken run to the finish: {woken[0]:.2f} write, {woken[1]:.2f} read per job"
    )
    # enqueue + claim + token step + waiter + signal step + sleep; one read of the steps, one of the answer
    assert 6 <= to_wait <= 8 and wait_reads == 2
    # the signal's own write
    assert alone == (1, 0)
    # the signal's write, the answer and the wake (the record), the waiter forgotten; the record read once
    assert 5 <= per_signal[0] <= 7 and per_signal[1] == 1
    # claim + finish; the steps and the answer read
    assert 3 <= woken[0] <= 5 and woken[1] == 2
    for app in (producer, worker, sender, observer):
        app.close()
