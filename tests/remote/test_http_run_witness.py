"""An HTTP worker's run that outlives its message keeps a witness, as a Python worker's does.

SQS deletes a message ``message_retention_s`` after its first send, even while a lease keeps it
hidden. The lease server's heartbeat writes the run's witness (an attention entry and the payload,
``runtime/outliving.py``) before that, so when the HTTP worker then dies, the sweeper brings the job
back and another worker leases it. Raw HTTP as the worker, a real sweeper process, MiniStack (which
drops a message at its retention, hidden or not), queues keeping a message 60 s (SQS's least).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import httpx
import pytest

from sqsjobs import JobStatus
from tests.api.helpers import serving
from tests.apps import polyglot
from tests.integration.helpers import depth, kill_group, wait_until, worker_env

pytestmark = pytest.mark.slow

RETENTION_S = 60
TOKEN = "test-token-http-run-witness"
GONE = {"visible": 0, "in_flight": 0, "delayed": 0}


def record(app, job_id: str) -> dict:
    return app.clients.boto3.get("dynamodb").get_item(
        TableName=app.settings.table_name, Key={"id": {"S": job_id}}, ConsistentRead=True
    )["Item"]


def lease(api, worker_id: str, wait_s: float) -> list[dict]:
    body = {"worker_id": worker_id, "types": ["render.thumbnail"], "wait_s": wait_s}
    answer = api.post("/leases", json=body)
    assert answer.status_code == 200, answer.text
    return answer.json()["leases"]


@pytest.mark.timeout(300)
def test_a_leased_run_past_its_messages_retention_keeps_a_witness_and_comes_back_when_its_worker_dies(
    ministack_url, make_app, tmp_path
):
    app = make_app(ministack_url, lease_s=3.0, visibility_timeout_s=2, message_retention_s=RETENTION_S)
    app.registry.include(polyglot.app.registry)
    app.limits.include(polyglot.app.limits)
    app.provision()
    env = {
        "SQSJOBS_MESSAGE_RETENTION_S": str(RETENTION_S),
        "SQSJOBS_SWEEP_INTERVAL_S": "5",
        "SQSJOBS_STALE_AFTER_S": "5",
    }
    with (tmp_path / "sweeper.log").open("ab") as out:
        sweeper = subprocess.Popen(
            [sys.executable, "-m", "sqsjobs", "sweep", "--app", "tests.apps.polyglot:app"],
            env=worker_env(app, SQSJOBS_LOG_LEVEL="INFO", **env),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        with (
            serving(app, token=TOKEN, lease_key="w" * 32) as url,
            httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30) as api,
        ):
            # GIVEN a job leased over HTTP whose worker heartbeats until SQS dropped its message
            job_id = app.enqueue("render.thumbnail", {"url": "s3://in/a.png", "width": 64})
            [first] = lease(api, "doomed", wait_s=5)
            deadline = time.monotonic() + RETENTION_S + 40
            while depth(app, "render") != GONE:
                assert time.monotonic() < deadline, "SQS never dropped the message"
                beat = api.post("/leases/heartbeat", json={"lease": first["lease"]})
                assert beat.status_code == 200, beat.text
                time.sleep(1)
            assert app.get(job_id, load_result=False).status is JobStatus.RUNNING
            witness = record(app, job_id)  # written by a heartbeat before the message went: the payload too
            assert witness["attn"]["S"].startswith("pending#"), witness
            assert json.loads(witness["payload"]["S"]) == first["payload"], witness
            # WHEN that worker dies (no more heartbeats), THEN the sweeper sends a hint once the lease
            # lapses, and another worker leases the job, runs it and completes it
            again: list[dict] = []
            wait_until(lambda: again.extend(lease(api, "rescuer", wait_s=5)) or again, 90, "leased again")
            assert (again[0]["job_id"], again[0]["attempt"]) == (job_id, 2)
            assert again[0]["payload"] == first["payload"]
            done = api.post("/leases/complete", json={"lease": again[0]["lease"], "result": {"ok": True}})
            assert done.status_code == 200, done.text
            # the dead worker's lease can never land
            assert api.post("/leases/complete", json={"lease": first["lease"]}).status_code == 409
            wait_until(lambda: "attn" not in record(app, job_id), 30, "its attention entry removed")
            wait_until(lambda: depth(app, "render") == GONE, 30, "the hint's message deleted")
    finally:
        kill_group(sweeper)
    final = app.get(job_id)
    assert (final.status, final.attempt, final.result) == (JobStatus.SUCCEEDED, 2, {"ok": True})
