"""A worker and ``doctor`` pointed at moto's own server: its PartiQL ignores conditions, and they find out.

moto is the emulator most Python teams test with. Its server runs a PartiQL UPDATE whose condition
is false as a silent no-op, so a batched claim of a job that already ran "lands" and the job runs
again (issue "No stranded record", finding 6). The worker probes the endpoint at start and turns
batched writes off; ``sqsjobs doctor`` reports the finding. Tried from outside: a plain
``python -m moto.server``, a real ``sqsjobs worker`` process with default settings, and every
job's message copied into the queue, as SQS's at-least-once delivery may do.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from sqsjobs import JobStatus
from sqsjobs.store.probe import PROBE_ID, PartiQL, partiql_flow
from tests.cli.conftest import invoke
from tests.emulators import LOOPBACK, free_port
from tests.integration.helpers import depth, kill_group, queue_url, sqs_call, worker_process

JOBS = 20
#: The copies arrive once the originals have run: a copy then meets a finished record, which a
#: claim that honours its condition refuses.
COPY_DELAY_S = 3


@pytest.fixture(scope="module")
def plain_moto() -> Iterator[str]:
    """moto's own threaded server, as ``moto_server`` starts it (not the embedded, serialised one)."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", LOOPBACK, "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://{LOOPBACK}:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(urllib.error.URLError, ConnectionError):
                urllib.request.urlopen(f"{url}/moto-api/", timeout=1).close()
                break
            assert time.monotonic() < deadline and proc.poll() is None, "moto_server did not start"
            time.sleep(0.1)
        yield url
    finally:
        kill_group(proc)


def _copy_every_message(app) -> int:
    """Send a delayed copy of each message in the queue (body and attributes); the originals stay."""
    url = queue_url(app)
    originals: list[dict] = []
    deadline = time.monotonic() + 30
    while len(originals) < JOBS and time.monotonic() < deadline:
        originals += sqs_call(
            app,
            "receive_message",
            QueueUrl=url,
            MaxNumberOfMessages=10,
            MessageAttributeNames=["All"],
            VisibilityTimeout=60,
        ).get("Messages", [])
    for message in originals:
        attributes = message.get("MessageAttributes", {})
        sqs_call(
            app,
            "send_message",
            QueueUrl=url,
            MessageBody=message["Body"],
            MessageAttributes=attributes,
            DelaySeconds=COPY_DELAY_S,
        )
    for start in range(0, len(originals), 10):
        entries = [
            {"Id": str(n), "ReceiptHandle": m["ReceiptHandle"], "VisibilityTimeout": 0}
            for n, m in enumerate(originals[start : start + 10])
        ]
        sqs_call(app, "change_message_visibility_batch", QueueUrl=url, Entries=entries)
    return len(originals)


def test_the_probe_tells_an_endpoint_that_ignores_conditions(plain_moto, make_app):
    app = make_app(plain_moto)
    app.provision()
    assert app.run(partiql_flow(app.settings.table_name, time.time())) == (PartiQL.IGNORED, "")
    # ... and its item is no job: listings and stats skip it
    assert PROBE_ID.startswith("probe#")


@pytest.mark.slow
def test_a_worker_on_moto_server_runs_every_duplicated_job_exactly_once(plain_moto, make_app, tmp_path: Path):
    # GIVEN an app on moto's own server, provisioned, and 20 jobs whose messages are each in the queue twice
    app = make_app(plain_moto)
    app.provision()
    ids = [
        app.enqueue("count", {"runs_dir": str(tmp_path), "sleep_s": 0.05}, queue="default")
        for _ in range(JOBS)
    ]
    assert _copy_every_message(app) == JOBS

    # WHEN a real worker process with default settings (batched writes on) works the queue
    worker = worker_process(app, "tests.apps.guarantees:app", concurrency=10)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            statuses = {app.get(i).status for i in ids}
            if statuses == {JobStatus.SUCCEEDED} and not any(depth(app).values()):
                break
            time.sleep(0.5)
    finally:
        kill_group(worker)

    # THEN every job succeeded, its handler ran exactly once, and no message is left
    runs = {i: len((tmp_path / i).read_text().splitlines()) if (tmp_path / i).exists() else 0 for i in ids}
    outcome = {i: (str(app.get(i).status), runs[i]) for i in ids}
    assert outcome == dict.fromkeys(ids, ("succeeded", 1))
    assert not any(depth(app).values()), depth(app)


def test_doctor_says_batched_writes_will_be_off_on_moto_server(plain_moto, make_app):
    app = make_app(plain_moto)
    app.provision()

    run = invoke(app, plain_moto, "doctor", "--json")

    [check] = [c for c in run.json["checks"] if c["name"] == "partiql conditions"]
    assert check["level"] == "warn"
    assert (
        "ignores PartiQL conditions" in check["detail"]
        and "workers turn batched writes off" in check["detail"]
    )
    assert "SQSJOBS_BATCH_WRITES=0" in check["fix"]
