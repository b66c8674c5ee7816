"""Every wait outlives its message's expiry with a witness: jobs that only wait are never lost to SQS's retention.

SQS deletes a message ``message_retention_s`` after its first send, whatever its delay or its
re-arms. Real worker and sweeper processes on MiniStack (which drops a message at its retention,
delayed or hidden), queues keeping a message 60 s (SQS's minimum), and a redrive limit too high
for the gate's own re-send near it to renew a message by chance. Three jobs wait past 60 s at once:
one due 90 s after its enqueue, one of a type paused 75 s, one behind a limit held 75 s. Each
must run once the wait ends (transport/lifespan.py: the rule).
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter
from datetime import timedelta

import pytest

from sqsjobs import JobStatus
from tests.apps import stranding
from tests.integration.helpers import kill_group, wait_until, worker_env, worker_process

pytestmark = pytest.mark.slow

APP = "tests.apps.stranding:app"
RETENTION_S = 60
ENV = {
    "SQSJOBS_MESSAGE_RETENTION_S": str(RETENTION_S),
    "SQSJOBS_MAX_RECEIVE_COUNT": "1000",
    # a pass every 5 s, not 2: each costs ~0.3 s of CPU (client and emulator: its features' sweeps and
    # the DLQs of every queue) and the scenario waits past a 60 s retention; stale after 5 s either way
    "SQSJOBS_SWEEP_INTERVAL_S": "5",
    "SQSJOBS_STALE_AFTER_S": "5",
}


def runs(path) -> Counter[str]:
    lines = path.read_text().splitlines() if path.exists() else []
    return Counter(line.split()[0] for line in lines)


@pytest.mark.timeout(300)
def test_jobs_that_wait_past_the_message_retention_keep_a_witness_and_run(ministack_url, make_app, tmp_path):
    # GIVEN queues that keep a message 60 s, two workers and a sweeper
    app = make_app(
        ministack_url,
        lease_s=3.0,
        visibility_timeout_s=2,
        message_retention_s=RETENTION_S,
        max_receive_count=1000,
    )
    app.registry.include(stranding.app.registry)
    app.provision()
    log = tmp_path / "runs"
    p = {"runs": str(log)}
    sweeper = subprocess.Popen(
        [sys.executable, "-m", "sqsjobs", "sweep", "--app", APP],
        env=worker_env(app, **ENV),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    workers = [worker_process(app, APP, concurrency=4, **ENV) for _ in range(2)]
    try:
        # a limit's only slot taken for 90 s by a long job: past the check below (at 75 s from when
        # the test saw it start) by a margin, or the limited job may start as the check reads
        holder = app.enqueue("hold", {**p, "sleep_s": 90})
        wait_until(lambda: runs(log)[holder] == 1, 60, "the limit's holder started")
        started = time.monotonic()
        # WHEN a job is enqueued due 90 s later, one of a paused type, and one behind the held limit
        app.limits.pause("plain")
        jobs = {
            "due later": app.enqueue("limited.run", p, delay=timedelta(seconds=90)),
            "paused": app.enqueue("plain", p),
            "limited": app.enqueue("hold", {**p, "sleep_s": 0}),
        }
        # ...and the pause outlasts every message the paused job was first sent with
        wait_until(lambda: time.monotonic() - started > RETENTION_S + 15, 120, "the pause outlived a message")
        assert [runs(log)[j] for j in jobs.values()] == [0, 0, 0]
        app.limits.resume("plain")

        # THEN each job runs once its wait ends, and succeeds
        def statuses() -> dict[str, JobStatus]:
            return {f: app.get(j, load_result=False).status for f, j in jobs.items()}

        try:
            wait_until(lambda: set(statuses().values()) == {JobStatus.SUCCEEDED}, 120, "every job succeeded")
        except AssertionError as exc:
            raise AssertionError(f"{exc}: {statuses()}") from None
    finally:
        kill_group(*workers, sweeper)
    assert {f: runs(log)[j] for f, j in jobs.items()} == dict.fromkeys(jobs, 1)
    assert app.get(holder, load_result=False).status is JobStatus.SUCCEEDED
