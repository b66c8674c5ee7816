"""Writes whose answer was lost: the first try landed, botocore retried, and the retry was refused.

Found by the chaos soak (issue 8, tests/soak/driver.py): a connection reset *after* DynamoDB applied a
write makes botocore send the identical request again, and its condition then fails against the
write's own result. The fault proxy (tests/soak/faults.py) reproduces exactly that on real HTTP: it
forwards the first UpdateItem, drops its answer, and lets the retry through.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sqsjobs import JobStatus
from sqsjobs.testing import all_finished, work_until
from tests.integration.helpers import depth
from tests.soak.faults import FaultPlan, FaultProxy

#: Drop the answer of the next DynamoDB UpdateItem (the write itself happens), once.
LOSE_ONE_UPDATE_ANSWER = FaultPlan(reset_after=1.0, only_actions=frozenset({"UpdateItem"}), max_faults=1)


@pytest.fixture
def proxy(ministack_url: str) -> Iterator[FaultProxy]:
    with FaultProxy(ministack_url) as p:
        yield p


def _apps(make_app, ministack_url, proxy, handler):
    """The same app twice: direct (to enqueue and inspect) and through the proxy (the worker)."""
    direct = make_app(ministack_url)
    via_proxy = make_app(proxy.url, name=direct.name)
    for app in (direct, via_proxy):
        app.job("work", max_attempts=3)(handler)
    direct.provision()
    return direct, via_proxy


def test_a_claim_whose_answer_was_lost_runs_the_job_at_once(ministack_url, make_app, proxy):
    runs = []
    direct, worker_app = _apps(make_app, ministack_url, proxy, lambda payload, ctx: runs.append(ctx.attempt))
    job_id = direct.enqueue("work", {})

    # GIVEN the claim's answer is lost after the claim was written
    proxy.faults = LOSE_ONE_UPDATE_ANSWER
    # WHEN a worker (no sweeper) handles the message
    work_until(worker_app, all_finished(direct, [job_id]), timeout_s=15)

    # THEN the retried claim, refused by our own lease, still runs the job: once, on the first claim
    # (before the fix the message was deleted as "held elsewhere" and the job sat running until the
    # lease expired and a sweeper rescued it).
    job = direct.get(job_id)
    assert proxy.faults_injected == {"reset_after": 1}
    assert (job.status, job.attempt, job.lease_epoch, runs) == (JobStatus.SUCCEEDED, 1, 1, [1])


def test_a_completion_whose_answer_was_lost_deletes_the_message(ministack_url, make_app, proxy):
    def handler(payload, ctx):
        proxy.faults = LOSE_ONE_UPDATE_ANSWER  # the next UpdateItem is this job's completion
        return "done"

    direct, worker_app = _apps(make_app, ministack_url, proxy, handler)
    job_id = direct.enqueue("work", {})

    work_until(worker_app, all_finished(direct, [job_id]), timeout_s=15)

    # THEN the completion stands, and the refused retry is recognised as our own write: the message
    # is deleted (before the fix it was left for redelivery as if the lease had been lost).
    job = direct.get(job_id)
    assert proxy.faults_injected == {"reset_after": 1}
    assert (job.status, job.attempt, job.result) == (JobStatus.SUCCEEDED, 1, "done")
    assert depth(direct) == {"visible": 0, "in_flight": 0, "delayed": 0}


def test_a_sweep_whose_mark_answer_was_lost_still_sends_the_hint(ministack_url, make_app, proxy):
    import time

    from sqsjobs.runtime.sweeper import sweep_flow

    direct, sweeper_app = _apps(make_app, ministack_url, proxy, lambda payload, ctx: None)
    job_id = direct.enqueue("work", {}, delay=3600)  # held by the record: no message yet

    # GIVEN the answer to the sweeper's conditional mark is lost after the mark was written
    proxy.faults = LOSE_ONE_UPDATE_ANSWER
    report = sweeper_app.run(
        sweep_flow(sweeper_app.settings, sweeper_app.queue_urls, time.time() + 3600 - 600)
    )

    # THEN the refused retry is recognised as the sweeper's own write and the hint goes out now
    # (before, the hint waited for the next stale period).
    assert proxy.faults_injected == {"reset_after": 1}
    assert report.dispatched_held == [job_id]
    assert depth(direct)["delayed"] == 1
