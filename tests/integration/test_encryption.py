"""Payload encryption (docs/encryption.md): what leaves the producer is sealed, read back raw.

An encrypted App's message (received from the queue), payload object and result object (read from
S3) and record (``GetItem``) are read as AWS holds them, and a marker that the payload and result
carry appears in none of them; the job still runs with its payload, and ``App.get`` decrypts the
result for its caller. A job whose key was disabled ends dead with the reason, and an App that does
not encrypt makes no KMS call at all.
"""

from __future__ import annotations

import json

import pytest

from sqsjobs import JobStatus, PayloadVersion, PermanentError
from sqsjobs._aws import Call, one
from sqsjobs.ops.job_views import ENCRYPTED, job_to_dict
from sqsjobs.store import requests, sealing
from sqsjobs.testing import all_finished, work_until

PAYLOAD_MARKER = "PLAINTEXT-PAYLOAD-7f3a"
RESULT_MARKER = "PLAINTEXT-RESULT-91c2"


def call(app, service, operation, **params):
    return app.run(one(Call(service, operation, params)))


def new_key(app):
    """A KMS key on the emulator: (ARN, bare key id).

    moto 5.2.5's DisableKey fails with a 500 when given the ARN (AWS takes an id or an ARN), so the
    bare id is kept for it.
    """
    meta = call(app, "kms", "create_key", Description="sqsjobs test")["KeyMetadata"]
    return meta["Arn"], meta["KeyId"]


def raw_item(app, job_id):
    return call(app, "dynamodb", "get_item", **requests.get(app.settings.table_name, job_id))["Item"]


def raw_messages(app):
    """Every message on the default queue, as SQS holds it, left visible again."""
    url = call(app, "sqs", "get_queue_url", QueueName=app.settings.queue_name("default"))["QueueUrl"]
    got = call(app, "sqs", "receive_message", QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=0)
    return [m["Body"] for m in got.get("Messages", [])]


def raw_objects(app, prefix):
    bucket = app.settings.payload_bucket
    listed = call(app, "s3", "list_objects_v2", Bucket=bucket, Prefix=prefix).get("Contents", [])
    return [call(app, "s3", "get_object", Bucket=bucket, Key=o["Key"])["Body"] for o in listed]


@pytest.fixture
def sealed_app(backend_url, make_app):
    """An App encrypting every type, with a payload over 2 KB going to S3 and a result over 1 KB too."""
    probe = make_app(backend_url)
    arn, _ = new_key(probe)
    app = make_app(backend_url, encrypt=arn, inline_payload_bytes=2048, inline_result_bytes=1024)
    seen: list[dict[str, object]] = []

    @app.job("enc.echo")
    def echo(payload: dict[str, str], ctx: object) -> dict[str, object]:
        seen.append(payload)
        return {
            "marker": RESULT_MARKER,
            "echo": payload["secret"],
            "filler": "r" * int(payload["result_bytes"]),
        }

    app.provision()
    app.seen = seen
    return app


def test_an_encrypted_jobs_message_object_and_record_carry_no_plaintext_and_it_runs(sealed_app):
    app = sealed_app
    # GIVEN two jobs of an encrypted App: one small (inline in the message), one that goes to S3
    small = {"secret": PAYLOAD_MARKER, "blob": "", "result_bytes": "0"}
    large = {"secret": PAYLOAD_MARKER, "blob": PAYLOAD_MARKER * 300, "result_bytes": "4000"}
    small_id = app.enqueue("enc.echo", small, idempotency_key="small")
    large_id = app.enqueue("enc.echo", large, idempotency_key="large")

    # THEN the messages, the payload object and the records, read raw, hold no plaintext
    bodies = raw_messages(app)
    assert len(bodies) == 2
    payload_objects = raw_objects(app, "payloads/")
    assert len(payload_objects) == 1
    for raw in [*bodies, *(o.decode() for o in payload_objects)]:
        assert PAYLOAD_MARKER not in raw
    # ... the small payload's message and the large one's object carry it sealed
    assert sum('"payload":{"sqsjobs.sealed"' in b for b in bodies) == 1
    assert payload_objects[0].startswith(b'{"sqsjobs.sealed"')
    for job_id in (small_id, large_id):
        item = raw_item(app, job_id)
        assert PAYLOAD_MARKER not in repr(item)
        # ... and the record's hash is the keyed one, not the plain SHA-256 anyone could recompute
        assert item["payload_hash"]["S"].startswith("k")
    # ... and the same key with the same payload is still the same job (the keyed hash is stable)
    assert app.enqueue("enc.echo", small, idempotency_key="small") == small_id

    # WHEN a worker runs them
    work_until(app, all_finished(app, [small_id, large_id]), timeout_s=60)

    # THEN each ran with its decrypted payload
    assert sorted(p["blob"] for p in app.seen) == ["", PAYLOAD_MARKER * 300]
    for job_id in (small_id, large_id):
        assert app.get(job_id).status is JobStatus.SUCCEEDED
        # ... its stored result (in the record, or the result object) is sealed too
        assert RESULT_MARKER not in repr(raw_item(app, job_id))
    result_objects = raw_objects(app, "results/")
    assert len(result_objects) == 1
    assert RESULT_MARKER not in result_objects[0].decode()
    # ... while App.get decrypts it for its caller, and a view shows that it is encrypted
    job = app.get(large_id)
    assert job.result["marker"] == RESULT_MARKER and job.result["echo"] == PAYLOAD_MARKER
    shown = job_to_dict(job)
    assert shown["result"] == ENCRYPTED and shown["encrypted"] is True
    assert RESULT_MARKER not in json.dumps(shown) and PAYLOAD_MARKER not in json.dumps(shown)


def test_a_dead_encrypted_job_is_retried_with_its_own_sealed_payload(backend_url, make_app):
    probe = make_app(backend_url)
    arn, _ = new_key(probe)
    app = make_app(backend_url, encrypt=arn)
    runs: list[str] = []

    @app.job("enc.flaky")
    def flaky(payload: dict[str, str], ctx: object) -> None:
        runs.append(payload["secret"])
        if len(runs) == 1:
            raise PermanentError("the first run fails for good")

    app.provision()
    # GIVEN an encrypted job that died: its record keeps its payload, sealed
    job_id = app.enqueue("enc.flaky", {"secret": PAYLOAD_MARKER})
    work_until(app, all_finished(app, [job_id]), timeout_s=60)
    assert app.get(job_id).status is JobStatus.DEAD
    assert PAYLOAD_MARKER not in repr(raw_item(app, job_id))
    # WHEN it is retried as it is (the operator's process opens nothing)
    app.retry(job_id)
    work_until(app, lambda: app.get(job_id).status.terminal, timeout_s=60)
    # THEN it runs again with its payload, which stayed sealed throughout
    assert app.get(job_id).status is JobStatus.SUCCEEDED
    assert runs == [PAYLOAD_MARKER, PAYLOAD_MARKER]
    assert PAYLOAD_MARKER not in repr(raw_item(app, job_id))


def test_a_job_whose_key_was_disabled_ends_dead_with_the_reason(ministack_url, make_app):
    # MiniStack only: moto 5.2.5 keeps decrypting and generating with a disabled key (AWS answers
    # DisabledException), so there the key would still work.
    app = make_app(ministack_url)
    arn, key_id = new_key(app)

    @app.job("enc.pii", version=PayloadVersion(1, encrypt=arn))
    def pii(payload: dict[str, str], ctx: object) -> None:
        raise AssertionError("must not run")

    app.provision()
    # GIVEN a job sealed under a key that is then disabled, and a worker that never saw the key
    job_id = app.enqueue("enc.pii", {"secret": PAYLOAD_MARKER})
    call(app, "kms", "disable_key", KeyId=key_id)
    sealing.KEYS.forget()
    # WHEN a worker takes it
    work_until(app, all_finished(app, [job_id]), timeout_s=60)
    # THEN it is dead at its first attempt with the reason, not retried in a loop
    job = app.get(job_id)
    assert job.status is JobStatus.DEAD
    assert job.reason == sealing.UNOPENABLE
    assert job.attempt == 1
    assert "DisabledException" in job.last_error.message


def test_an_app_that_does_not_encrypt_makes_no_kms_call(backend_url, make_app):
    app = make_app(backend_url, inline_payload_bytes=2048)

    @app.job("plain.echo")
    def echo(payload: dict[str, str], ctx: object) -> dict[str, str]:
        return payload

    app.provision()
    app.requests.reset()
    ids = [app.enqueue("plain.echo", {"secret": PAYLOAD_MARKER, "blob": "x" * n}) for n in (0, 4000)]
    work_until(app, all_finished(app, ids), timeout_s=60)
    assert app.get(ids[0]).result["secret"] == PAYLOAD_MARKER
    assert not [key for key in app.requests.counts if key[0] == "kms"]
    # ... and its payloads still travel as they did: the plain hash, no sealed value
    assert not raw_item(app, ids[0])["payload_hash"]["S"].startswith("k")
