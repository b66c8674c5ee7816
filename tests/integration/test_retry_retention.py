"""A retry whose wake time would pass its message's expiry keeps a witness: a held record, not a re-armed message.

SQS deletes a message ``message_retention_s`` after its first send, whatever its visibility; a retry
re-arms the same message. Real worker and sweeper processes on MiniStack, with the retention at
SQS's minimum (60 s) and a retry asked for 70 s later.
"""

from __future__ import annotations

import pytest

from sqsjobs import JobStatus
from tests.apps import retrying
from tests.integration.helpers import (
    SHORT_RETENTION,
    held_item,
    kill_group,
    short_retention_app,
    spawn,
    wait_until,
)

pytestmark = pytest.mark.slow

APP = "tests.apps.retrying:app"


def test_a_retry_past_the_message_retention_is_held_and_the_sweeper_brings_it_back(ministack_url, make_app):
    # GIVEN queues that keep a message 60 s, and a handler that asks, once, to run again 70 s later
    app = short_retention_app(ministack_url, make_app, retrying.app)
    job_id = app.enqueue("later.once", {"retry_after_s": 70})
    worker = spawn(app, APP, "worker", "--concurrency", "2", **SHORT_RETENTION)
    sweeper = None
    try:
        # WHEN the first attempt asks for its retry
        wait_until(lambda: app.get(job_id).status is JobStatus.RETRY_SCHEDULED, 60, "retry scheduled")
        # THEN the record holds the job (an attention entry, its payload), and no message is left for it
        item = held_item(app, job_id)
        assert item["attempt"]["N"] == "1" and item["attn"]["S"].startswith("held#"), item
        # AND with a sweeper running, the job runs again when due, and succeeds on attempt 2
        sweeper = spawn(app, APP, "sweep", **SHORT_RETENTION)
        wait_until(lambda: app.get(job_id).status is JobStatus.SUCCEEDED, 150, "succeeded")
        assert app.get(job_id).attempt == 2
    finally:
        kill_group(worker, *([sweeper] if sweeper else []))
