"""A retry whose wake time would pass its message's expiry keeps a witness: a held record, not a re-armed message.

SQS deletes a message ``message_retention_s`` after its first send, whatever its visibility; a retry
re-arms the same message. Real worker and sweeper processes on MiniStack, with the retention at
SQS's minimum (60 s) and a retry asked for 70 s later.
"""

from __future__ import annotations

import pytest

from sqsjobs import JobStatus
from tests.apps import retrying
from tests.integration.helpers import depth, kill_group, wait_until, worker_env

pytestmark = pytest.mark.slow

APP = "tests.apps.retrying:app"


def test_a_retry_past_the_message_retention_is_held_and_the_sweeper_brings_it_back(ministack_url, make_app):
    import subprocess
    import sys

    # GIVEN queues that keep a message 60 s, and a handler that asks, once, to run again 70 s later
    app = make_app(ministack_url, lease_s=3.0, visibility_timeout_s=2, message_retention_s=60)
    app.registry.include(retrying.app.registry)
    app.provision()
    env = worker_env(
        app, SQSJOBS_MESSAGE_RETENTION_S="60", SQSJOBS_SWEEP_INTERVAL_S="2", SQSJOBS_STALE_AFTER_S="5"
    )

    def spawn(*argv: str) -> subprocess.Popen[bytes]:
        cmd = [sys.executable, "-m", "sqsjobs", *argv, "--app", APP]
        return subprocess.Popen(
            cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )

    job_id = app.enqueue("later.once", {"retry_after_s": 70})
    worker = spawn("worker", "--concurrency", "2")
    sweeper = None
    try:
        # WHEN the first attempt asks for its retry
        wait_until(lambda: app.get(job_id).status is JobStatus.RETRY_SCHEDULED, 60, "retry scheduled")
        # THEN the record holds the job (an attention entry, its payload), and no message is left for it
        item = app.sync_clients.get("dynamodb").get_item(
            TableName=app.settings.table_name, Key={"id": {"S": job_id}}, ConsistentRead=True
        )["Item"]
        assert item["attempt"]["N"] == "1" and item["attn"]["S"].startswith("held#"), item
        wait_until(lambda: depth(app) == {"visible": 0, "in_flight": 0, "delayed": 0}, 30, "message deleted")
        # AND with a sweeper running, the job runs again when due, and succeeds on attempt 2
        sweeper = spawn("sweep")
        wait_until(lambda: app.get(job_id).status is JobStatus.SUCCEEDED, 150, "succeeded")
        assert app.get(job_id).attempt == 2
    finally:
        kill_group(worker, *([sweeper] if sweeper else []))
