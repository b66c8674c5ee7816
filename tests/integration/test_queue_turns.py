"""A worker with fewer slots than queues serves every queue in turn (real worker process, MiniStack).

Each queue's receive loop reserves a slot before its long poll and gives it back when the poll
comes back empty. A loop that took its slot back at once, before the loops woken by its release
could run, kept the worker's only slot to itself: ``sqsjobs worker --concurrency 1`` over four
queues never received from three of them.
"""

from __future__ import annotations

import pytest

from sqsjobs import JobStatus
from tests.apps import stranding
from tests.integration.helpers import kill_group, wait_until, worker_process

pytestmark = pytest.mark.slow


def test_one_slot_serves_every_queue_in_turn(ministack_url, make_app, tmp_path):
    # GIVEN a worker with one slot over the app's four queues (polls of 1 s)
    app = make_app(ministack_url)
    app.registry.include(stranding.app.registry)
    app.limits.include(stranding.app.limits)
    app.provision()
    assert len(app.registry.queues()) >= 4
    worker = worker_process(app, "tests.apps.stranding:app", concurrency=1)
    try:
        # WHEN a job arrives on each of two of them
        p = {"runs": str(tmp_path / "runs")}
        jobs = [app.enqueue("long.run", p), app.enqueue("work.run", p)]
        # THEN both run, each within a few rounds of the polls
        wait_until(
            lambda: all(app.get(j, load_result=False).status is JobStatus.SUCCEEDED for j in jobs),
            30,
            "a job on each queue ran",
        )
    finally:
        kill_group(worker)
