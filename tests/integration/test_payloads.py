"""The S3 claim-check (docs/payloads.md): payloads and results too large for a message or a record.

Attacked from outside where it matters: a worker process runs what a thin producer process (no
handler code) enqueued; the producer is killed between its S3 write and its record; objects are
deleted or replaced under a queued job; the Lambda adapter gets the same messages as the worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import subprocess
import sys
import time

import pytest

from sqsjobs import JobNotFound, JobStatus, PayloadTooLarge
from sqsjobs._aws import Call, one
from sqsjobs.envelope import DLQ_REASON
from sqsjobs.runtime.lambda_sqs import LambdaWorker
from sqsjobs.store import codec, requests
from sqsjobs.testing import all_finished, awork_until, work_until
from tests.apps import large
from tests.integration.helpers import attr, depth, job_write_units, receive_dlq, worker_env
from tests.integration.lambda_events import FakeContext, event_from, failed_ids, receive

pytestmark = pytest.mark.slow

MB = 1_000_000
ECHO = "large.echo"
#: The claim-check threshold of these tests: the 256 KiB-message era's, so their 300-400 KB payloads
#: (small enough to be quick) still take the S3 path; the 1 MiB default is tested in test_message_size.py.
INLINE = 248 * 1024


@pytest.fixture
def large_app(ministack_url, make_app):
    app = make_app(ministack_url, inline_payload_bytes=INLINE)
    app.registry.include(large.app.registry)
    app.provision()
    return app


def s3(app, operation, **params):
    return app.run(one(Call("s3", operation, params)))


def stored_item(app, job_id):
    """The record as DynamoDB holds it (attribute names and sizes), not as sqsjobs decodes it."""
    return app.run(one(Call("dynamodb", "get_item", requests.get(app.settings.table_name, job_id))))["Item"]


def object_keys(app, prefix=""):
    listed = s3(app, "list_objects_v2", Bucket=app.settings.payload_bucket, Prefix=prefix)
    return [o["Key"] for o in listed.get("Contents", [])]


def produce(app, size, *, key, die_before=None, die_after=None, hold=None):
    """Enqueue from a thin producer process; returns its exit code and the job id its key names."""
    argv = [sys.executable, "-m", "tests.apps.producer_script", str(size), "--key", key]
    for flag, call in (("--die-before", die_before), ("--die-after", die_after), ("--hold", hold)):
        if call:
            argv += [flag, call]
    done = subprocess.run(
        argv,
        env=worker_env(app, SQSJOBS_INLINE_PAYLOAD_BYTES=str(INLINE)),
        capture_output=True,
        timeout=60,
        check=False,
    )
    return done.returncode, codec.idempotent_job_id(ECHO, key)


def run_worker_until(app, done, timeout_s=60.0):
    """A worker process (``sqsjobs worker``) runs until ``done()``; never one in this process."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "sqsjobs", "worker", "--app", "tests.apps.large:app", "--concurrency", "2"],
        env=worker_env(app, SQSJOBS_INLINE_PAYLOAD_BYTES=str(INLINE)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + timeout_s
        while not done():
            assert proc.poll() is None, "the worker exited"
            assert time.monotonic() < deadline, "the jobs did not finish"
            time.sleep(0.2)
    finally:
        proc.terminate()
        proc.wait(30)


def test_a_5_mb_payload_from_a_thin_producer_runs_on_a_worker_process_and_its_1_mb_result_is_kept_in_s3(
    large_app, tmp_path
):
    app = large_app
    # GIVEN a thin producer process (no handler code) that enqueued a 5 MB payload and a small one
    code, big = produce(app, 5 * MB, key="big")
    assert code == 0
    small = app.enqueue(ECHO, {"blob": "tiny", "result_bytes": 10})
    # ... the big payload is an object; the record keeps its reference and hash, never the data
    item = stored_item(app, big)
    assert "payload" not in item
    assert item["payload_ref"]["S"].startswith(f"s3://{app.settings.payload_bucket}/payloads/{big}/")
    assert int(item["payload_size"]["N"]) > 5 * MB
    assert len(json.dumps(item)) < 1024, "the record of a 5 MB job stays one write unit"
    assert "payload_ref" not in stored_item(app, small)

    # WHEN a worker process runs them (the 1 MB result: a second job, enqueued here with the handler)
    with_result = app.enqueue(ECHO, {"blob": "y" * 300_000, "result_bytes": MB})
    run_worker_until(app, all_finished(app, [big, small, with_result]))

    # THEN the handler saw the whole payload, checked against its hash
    job = app.get(big)
    assert job.status is JobStatus.SUCCEEDED
    assert job.result["blob_bytes"] == 5 * MB
    assert job.result["blob_sha256"] == hashlib.sha256(b"x" * (5 * MB)).hexdigest()
    # ... the 1 MB result is an object named by the record, which app.get reads back
    done = app.get(with_result)
    assert done.result_ref and done.result_ref.startswith(f"s3://{app.settings.payload_bucket}/results/")
    assert len(done.result["filler"]) == MB
    assert "result" not in stored_item(app, with_result)
    assert app.get(with_result, load_result=False).result is None
    # ... and `sqsjobs jobs get --output FILE` writes it whole, showing only its reference
    result_file = tmp_path / "result.json"
    shown = subprocess.run(
        [
            sys.executable,
            "-m",
            "sqsjobs",
            "jobs",
            "get",
            with_result,
            "--app",
            "tests.apps.large:app",
            "--output",
            str(result_file),
            "--json",
        ],
        env=worker_env(app, SQSJOBS_INLINE_PAYLOAD_BYTES=str(INLINE)),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    printed = json.loads(shown.stdout)
    assert (printed["result"], printed["result_ref"]) == (None, done.result_ref)
    assert printed["result_written_to"] == str(result_file)
    assert json.loads(result_file.read_text()) == done.result
    # ... and the small job used no object at all
    assert app.get(small).result == {
        "blob_bytes": 4,
        "blob_sha256": hashlib.sha256(b"tiny").hexdigest(),
        "filler": "r" * 10,
    }
    assert app.get(small).result_ref is None


def test_the_lambda_adapter_reads_and_writes_the_same_objects(large_app):
    app = large_app
    # GIVEN a 5 MB payload and a job with a 1 MB result, received as the event source mapping would
    big = app.enqueue(ECHO, {"blob": "z" * (5 * MB)})
    with_result = app.enqueue(ECHO, {"blob": "small", "result_bytes": MB})
    worker = LambdaWorker(app)
    try:
        # WHEN the Lambda entry point handles the batch
        response = worker(event_from(app, receive(app, 2)), FakeContext())
    finally:
        worker.close()
    # THEN both ran: the payload came from S3, the result went there
    assert failed_ids(response) == set()
    assert app.get(big).result["blob_bytes"] == 5 * MB
    assert len(app.get(with_result).result["filler"]) == MB
    assert app.get(with_result).result_ref is not None


def test_a_producer_killed_between_its_s3_write_and_its_message_leaves_only_an_object_that_expires(
    large_app,
):
    app = large_app
    # WHEN a thin producer dies after writing the payload object, before its message or record
    code, job_id = produce(app, 400_000, key="orphan", die_before="SendMessageBatch", hold="PutItem")
    assert code == -9
    # THEN the object is there, orphaned: no record, no message, nothing runs
    assert object_keys(app, f"payloads/{job_id}/")
    with pytest.raises(JobNotFound):
        app.get(job_id)
    assert depth(app) == {"visible": 0, "in_flight": 0, "delayed": 0}
    # ... and it is harmless: the bucket's lifecycle expires every payload object on its own
    rules = s3(app, "get_bucket_lifecycle_configuration", Bucket=app.settings.payload_bucket)["Rules"]
    expiring = {r["Filter"]["Prefix"]: r["Expiration"]["Days"] for r in rules if r["Status"] == "Enabled"}
    assert expiring == {
        "payloads/": app.settings.payload_object_days,
        "results/": app.settings.payload_object_days,
    }


def test_a_producer_killed_after_its_message_before_its_record_still_gets_its_job_run(large_app):
    app = large_app
    # WHEN a thin producer dies once SQS took the message that names the object, its record's put
    # not sent yet (held back too, so the crash falls between them with ``enqueue_together`` on)
    code, job_id = produce(app, 400_000, key="no-record", die_after="SendMessageBatch", hold="PutItem")
    assert code == -9
    with pytest.raises(JobNotFound):
        app.get(job_id)

    # THEN a worker's claim creates the record from the message, object reference included, and runs it
    def recorded_and_finished():
        with contextlib.suppress(JobNotFound):
            return app.get(job_id, load_result=False).status.terminal
        return False

    run_worker_until(app, recorded_and_finished)
    job = app.get(job_id)
    assert (job.status, job.result["blob_bytes"]) == (JobStatus.SUCCEEDED, 400_000)
    assert job.payload_ref is not None


@pytest.mark.parametrize("damage", ["deleted", "replaced"])
def test_a_job_whose_payload_object_is_gone_or_altered_dies_with_the_reason_and_the_worker_goes_on(
    large_app, damage
):
    app = large_app
    # GIVEN a queued job whose payload object was deleted, or overwritten with other bytes
    broken = app.enqueue(ECHO, {"blob": "q" * 300_000})
    bucket, key = app.get(broken).payload_ref.removeprefix("s3://").split("/", 1)
    if damage == "deleted":
        s3(app, "delete_object", Bucket=bucket, Key=key)
    else:
        s3(app, "put_object", Bucket=bucket, Key=key, Body=json.dumps({"blob": "forged"}).encode())
    fine = app.enqueue(ECHO, {"blob": "ok"})
    # WHEN a worker process meets it
    run_worker_until(app, all_finished(app, [broken, fine]))
    # THEN the job is dead (never run with bytes it was not enqueued with), the DLQ says why
    job = app.get(broken)
    assert (job.status, job.reason, job.attempt) == (JobStatus.DEAD, "payload object missing", 1)
    assert job.last_error and job.last_error.error_class == "PayloadMissing"
    assert [attr(m, DLQ_REASON) for m in receive_dlq(app)] == ["payload object missing"]
    # ... and the worker went on to the next job
    assert app.get(fine).status is JobStatus.SUCCEEDED


def test_dead_jobs_with_their_payload_in_s3_are_retried_from_the_record_and_replayed_from_the_dlq(
    large_app, tmp_path
):
    app = large_app
    # GIVEN two jobs with large payloads that died (their handler refused while a marker file existed)
    marker = tmp_path / "fail"
    marker.write_text("")
    retried, replayed = (
        app.enqueue(ECHO, {"blob": "w" * size, "fail_marker": str(marker)}) for size in (300_000, 400_000)
    )
    run_worker_until(app, all_finished(app, [retried, replayed]))
    assert {app.get(j).status for j in (retried, replayed)} == {JobStatus.DEAD}
    assert "payload" not in stored_item(app, retried), "a dead job keeps the reference, not the data"
    # WHEN the cause is fixed, an operator retries one and replays the other's DLQ copy with the CLI
    marker.unlink()
    app.retry(retried)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "sqsjobs",
            "dlq",
            "replay",
            "--app",
            "tests.apps.large:app",
            "--job-id",
            replayed,
        ],
        env=worker_env(app, SQSJOBS_INLINE_PAYLOAD_BYTES=str(INLINE)),
        capture_output=True,
        timeout=60,
        check=True,
    )
    both_succeeded = lambda: all(  # noqa: E731
        app.get(j, load_result=False).status is JobStatus.SUCCEEDED for j in (retried, replayed)
    )
    run_worker_until(app, both_succeeded)
    # THEN each ran with its own payload, read again from S3
    assert [app.get(j).result["blob_bytes"] for j in (retried, replayed)] == [300_000, 400_000]


def test_the_async_producer_writes_the_object_and_reads_the_result_back(large_app):
    app = large_app

    async def scenario():
        try:
            job_id = await app.aenqueue(ECHO, {"blob": "a" * 300_000, "result_bytes": 20_000})
            await awork_until(app, lambda: app.get(job_id, load_result=False).status.terminal)
            return job_id, await app.aget(job_id)
        finally:
            await app.aclose()

    job_id, job = asyncio.run(scenario())
    assert app.get(job_id, load_result=False).payload_ref is not None
    assert (job.result["blob_bytes"], len(job.result["filler"])) == (300_000, 20_000)
    assert job.result_ref is not None


def test_a_held_job_keeps_a_reference_in_its_record_not_a_payload_billed_at_every_write(large_app):
    app = large_app
    # GIVEN a job due in two days (the record holds it: SQS delays stop at 15 minutes), payload 3 KB
    job_id = app.enqueue(ECHO, {"blob": "h" * 3000}, delay=2 * 86_400)
    # THEN its record stays under 1 KB: the payload is an object above held_inline_payload_bytes
    item = stored_item(app, job_id)
    assert "payload" not in item and "payload_ref" in item
    assert len(json.dumps(item)) < 1024
    # ... while a small held payload stays in the record (no object for 100 bytes)
    small = app.enqueue(ECHO, {"blob": "h" * 100}, delay=2 * 86_400)
    assert "payload" in stored_item(app, small) and "payload_ref" not in stored_item(app, small)


def test_payloads_over_the_maximum_or_due_after_their_object_expires_are_refused_at_enqueue(
    ministack_url, make_app
):
    app = make_app(ministack_url, max_payload_bytes=2 * MB, inline_payload_bytes=INLINE)
    app.registry.include(large.app.registry)
    app.provision()
    with pytest.raises(PayloadTooLarge, match="max_payload_bytes"):
        app.enqueue(ECHO, {"blob": "x" * (3 * MB)})
    with pytest.raises(PayloadTooLarge, match="must start within 16 days"):
        app.enqueue(ECHO, {"blob": "x" * 300_000}, delay=20 * 86_400)
    # ... and nothing was written for either
    assert object_keys(app) == []
    assert depth(app) == {"visible": 0, "in_flight": 0, "delayed": 0}


def test_a_large_payload_costs_the_record_no_more_write_units_than_a_small_one(ministack_url, make_app):
    # A lease and a visibility timeout longer than the test (the suite's are 5 s): on a loaded machine
    # a lease renewal, or a second receive of the message and its refused claim, consumed a 4th unit
    # that is the cost of a slow run, not of a large payload.
    app = make_app(
        ministack_url,
        measure_capacity=True,
        inline_payload_bytes=INLINE,
        lease_s=60.0,
        visibility_timeout_s=30,
    )
    app.registry.include(large.app.registry)
    app.provision()
    app.requests.reset()
    # WHEN a 5 MB job is enqueued and run to the end
    job_id = app.enqueue(ECHO, {"blob": "x" * (5 * MB)})
    worker = work_until(app, all_finished(app, [job_id]))
    # THEN DynamoDB itself counted 3 write units (put, claim, finish) and the payload cost S3 one PUT
    # and one GET (the all_finished polls read records, never objects)
    assert job_write_units(app, worker) == 3
    assert app.requests.snapshot().get("s3.PutObject") == 1
    assert app.requests.snapshot().get("s3.GetObject") == 1


def test_a_retry_with_a_corrected_payload_too_large_for_the_record_writes_it_to_s3(large_app, tmp_path):
    app = large_app
    # GIVEN a dead job whose small payload lives in its record
    marker = tmp_path / "fail"
    marker.write_text("")
    job_id = app.enqueue(ECHO, {"blob": "small", "fail_marker": str(marker)})
    work_until(app, all_finished(app, [job_id]))
    assert "payload" in stored_item(app, job_id)
    marker.unlink()
    # WHEN an operator retries it with a corrected payload of 300 KB
    app.retry(job_id, payload={"blob": "c" * 300_000})
    # THEN the record names the new object (no payload of 300 KB billed at each write) and it runs from it
    item = stored_item(app, job_id)
    assert "payload" not in item and item["payload_ref"]["S"].endswith(item["payload_hash"]["S"])
    work_until(app, lambda: app.get(job_id, load_result=False).status.terminal)
    assert app.get(job_id).result["blob_bytes"] == 300_000
