"""`sqsjobs doctor`: passes on what `provision` made, fails with the fix on a misconfigured queue or table."""

from __future__ import annotations

import json
import time

from sqsjobs import JobStatus, RetryPolicy
from sqsjobs._aws import Call, one
from sqsjobs.cli.common import EXIT_ERROR
from sqsjobs.store.schema import LISTED
from tests.cli.conftest import invoke, new_app, settle
from tests.integration.helpers import queue_url, sqs_call


def test_doctor_passes_on_a_provisioned_app(ministack_url):
    app = new_app(ministack_url)
    app.provision()

    run = invoke(app, ministack_url, "doctor", "--json")

    assert run.code == 0, run.out
    assert run.json["ok"] is True
    names = {c["name"].split()[0] for c in run.json["checks"]}
    assert {"table", "index", "ttl", "queue", "dlq", "redrive", "visibility", "bucket"} <= names
    [bucket] = [c for c in run.json["checks"] if c["name"].startswith("bucket")]
    assert bucket["level"] == "ok"
    assert bucket["detail"] == "objects expire after 30 d (payloads/), 30 d (results/)"
    indexes = {c["name"]: c["detail"] for c in run.json["checks"] if c["name"].startswith("index")}
    assert indexes == {
        "index attention": "attn (S, hash), due (N, range), projection INCLUDE",
        "index batch_items": "batch_key (S, hash), projection KEYS_ONLY",
        "index tags": "tag (S, hash), tagged_at (N, range), projection KEYS_ONLY",
    }
    assert "table layout" not in {c["name"] for c in run.json["checks"]}
    human = invoke(app, ministack_url, "doctor")
    assert human.code == 0 and "all checks passed" in human.out
    app.close()


def _create_table(app, indexes: list[dict], attributes: dict[str, str]) -> None:
    """A table made by hand under the app's table name, before ``provision`` (which then keeps it)."""
    app.run(
        one(
            Call(
                "dynamodb",
                "create_table",
                {
                    "TableName": app.settings.table_name,
                    "BillingMode": "PAY_PER_REQUEST",
                    "KeySchema": [{"AttributeName": "id", "KeyType": "HASH"}],
                    "AttributeDefinitions": [
                        {"AttributeName": a, "AttributeType": t} for a, t in {"id": "S", **attributes}.items()
                    ],
                    "GlobalSecondaryIndexes": indexes,
                },
            )
        )
    )
    app.provision()


def _gsi(name: str, hash_key: str, range_key: str, projection: str = "ALL") -> dict:
    return {
        "IndexName": name,
        "KeySchema": [
            {"AttributeName": hash_key, "KeyType": "HASH"},
            {"AttributeName": range_key, "KeyType": "RANGE"},
        ],
        "Projection": {"ProjectionType": projection},
    }


def test_doctor_recognises_a_table_of_sqsjobs_0_1_and_says_to_start_a_new_one(ministack_url):
    # GIVEN a table of the first layout: indexes by status and by type that every job wrote
    app = new_app(ministack_url)
    _create_table(
        app,
        [_gsi("by_status", "st", "due"), _gsi("by_type", "type", "created_at", "KEYS_ONLY")],
        {"st": "S", "due": "N", "type": "S", "created_at": "N"},
    )

    # WHEN the doctor checks the deployment
    run = invoke(app, ministack_url, "doctor", "--json")

    # THEN it fails on the layout, says there is no migration, and how to move to a new table
    assert run.code == EXIT_ERROR
    failed = {c["name"]: c for c in run.json["checks"] if c["level"] == "fail"}
    layout = failed["table layout"]
    assert "created by sqsjobs 0.1" in layout["detail"]
    assert "by_status, by_type" in layout["detail"] and "written by every job" in layout["detail"]
    assert "no migration (0.1.0 was never released)" in layout["detail"]
    assert "SQSJOBS_TABLE=<new name> sqsjobs provision" in layout["fix"]
    assert "once" in layout["fix"] and "has drained" in layout["fix"]
    # AND the missing attention index points at the same fix, not at an UpdateTable
    assert failed["index attention"]["detail"] == "missing"
    assert "table layout" in failed["index attention"]["fix"]
    # AND the rest of the deployment is still checked
    assert {c["name"].split()[0] for c in run.json["checks"]} >= {"ttl", "queue", "redrive"}
    app.close()


def test_doctor_fails_on_an_attention_index_of_another_shape(ministack_url):
    # GIVEN an attention index whose sort key is a string and that projects only the keys
    app = new_app(ministack_url)
    _create_table(app, [_gsi("attention", "attn", "due", "KEYS_ONLY")], {"attn": "S", "due": "S"})

    run = invoke(app, ministack_url, "doctor", "--json")

    # THEN the index check fails, showing what it found and what it must be
    assert run.code == EXIT_ERROR
    [check] = [c for c in run.json["checks"] if c["name"] == "index attention"]
    assert check["level"] == "fail"
    assert check["detail"] == "attn (S, hash), due (S, range), projection KEYS_ONLY"
    assert "attn (S, hash), due (N, range), projection INCLUDE" in check["fix"]
    assert "table layout" not in {c["name"] for c in run.json["checks"]}
    app.close()


def test_doctor_fails_on_a_table_made_before_batches_and_tags_and_says_which_indexes_to_add(ministack_url):
    # GIVEN a table with the attention index as provisioned today, but no batch_items or tags index
    app = new_app(ministack_url)
    attention = _gsi("attention", "attn", "due", "INCLUDE")
    attention["Projection"]["NonKeyAttributes"] = list(LISTED)
    _create_table(app, [attention], {"attn": "S", "due": "N"})

    run = invoke(app, ministack_url, "doctor", "--json")

    # THEN only those two index checks fail, each fix the UpdateTable that adds it
    assert run.code == EXIT_ERROR
    failed = {c["name"]: c for c in run.json["checks"] if c["level"] == "fail"}
    assert set(failed) == {"index batch_items", "index tags"}
    assert failed["index batch_items"]["detail"] == failed["index tags"]["detail"] == "missing"
    assert (
        "add GSI batch_items on batch_key (S, hash), projection KEYS_ONLY"
        in failed["index batch_items"]["fix"]
    )
    assert (
        "add GSI tags on tag (S, hash), tagged_at (N, range), projection KEYS_ONLY"
        in failed["index tags"]["fix"]
    )
    app.close()


def test_doctor_fails_on_a_misconfigured_queue_and_says_the_fix(ministack_url):
    app = new_app(ministack_url)
    app.provision()
    # GIVEN a mail queue whose redrive dead-letters too early and whose visibility is too short,
    mail = queue_url(app, "mail")
    dlq_arn = sqs_call(
        app, "get_queue_attributes", QueueUrl=queue_url(app, "mail", dlq=True), AttributeNames=["QueueArn"]
    )["Attributes"]["QueueArn"]
    sqs_call(
        app,
        "set_queue_attributes",
        QueueUrl=mail,
        Attributes={
            "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": "1"}),
            "VisibilityTimeout": "1",
        },
    )
    # AND a default queue whose DLQ is gone
    sqs_call(app, "delete_queue", QueueUrl=queue_url(app, "default", dlq=True))

    run = invoke(app, ministack_url, "doctor", "--json")

    assert run.code == EXIT_ERROR
    report = run.json
    assert report["ok"] is False
    failed = {c["name"]: c for c in report["checks"] if c["level"] == "fail"}
    redrive = failed[f"redrive {app.settings.queue_name('mail')}"]
    assert "maxReceiveCount 1 <= max_attempts 2" in redrive["detail"]
    assert "maxReceiveCount" in redrive["fix"]
    assert f"visibility {app.settings.queue_name('mail')}" in failed
    assert failed[f"dlq {app.settings.dlq_name('default')}"]["fix"].startswith("run `sqsjobs provision`")
    assert not any(c["name"].startswith(("table", "index", "ttl")) for c in failed.values())

    human = invoke(app, ministack_url, "doctor")
    assert human.code == EXIT_ERROR and "FAIL" in human.out and "doctor found problems" in human.out
    app.close()


def test_doctor_fails_on_an_explicit_timeout_the_lambda_function_can_never_start(ministack_url, monkeypatch):
    # GIVEN a Lambda function with a 60 s timeout consuming the queues (SQSJOBS_LAMBDA_TIMEOUT_S says so)
    monkeypatch.setenv("SQSJOBS_LAMBDA_TIMEOUT_S", "60")
    app = new_app(ministack_url)

    # AND a job type whose explicit timeout is ten minutes
    @app.job("reports.build", timeout=600)
    def build(payload: None, ctx: object) -> None: ...

    app.provision()

    # WHEN the doctor checks the deployment
    run = invoke(app, ministack_url, "doctor", "--json")

    # THEN it fails, naming the type's timeout and the function's, with the fix
    assert run.code == EXIT_ERROR
    [check] = [c for c in run.json["checks"] if c["name"] == "lambda timeout"]
    assert check["level"] == "fail"
    assert "'reports.build'" in check["detail"]
    assert "600 s timeout" in check["detail"] and "60 s timeout" in check["detail"]
    assert "raise the function's timeout" in check["fix"]
    app.close()


def test_doctor_passes_job_types_without_a_timeout_on_a_short_lambda_function(ministack_url, monkeypatch):
    # GIVEN a Lambda function with a 60 s timeout, and job types with no explicit timeout (300 s on ECS)
    monkeypatch.setenv("SQSJOBS_LAMBDA_TIMEOUT_S", "60")
    app = new_app(ministack_url)
    assert all(spec.explicit_timeout_s is None for spec in app.registry)
    app.provision()

    # WHEN the doctor checks the deployment
    run = invoke(app, ministack_url, "doctor", "--json")

    # THEN it passes: on Lambda those types run in the time an invocation has left
    assert run.code == 0, run.out
    [check] = [c for c in run.json["checks"] if c["name"] == "lambda timeout"]
    assert check["level"] == "ok"
    assert "60 s starts every job type" in check["detail"]
    app.close()


def test_doctor_fails_without_the_payload_bucket_and_warns_when_its_objects_never_expire(ministack_url):
    app = new_app(ministack_url)
    app.provision()
    bucket = app.settings.payload_bucket
    # GIVEN a bucket whose lifecycle rules were removed by hand
    app.run(one(Call("s3", "delete_bucket_lifecycle", {"Bucket": bucket})))
    warned = invoke(app, ministack_url, "doctor", "--json")
    [check] = [c for c in warned.json["checks"] if c["name"] == f"bucket {bucket}"]
    assert check["level"] == "warn" and "never expire" in check["detail"]
    assert "sqsjobs provision" in check["fix"]
    # ... and then the bucket itself gone
    app.run(one(Call("s3", "delete_bucket", {"Bucket": bucket})))
    failed = invoke(app, ministack_url, "doctor", "--json")
    assert failed.code == EXIT_ERROR
    [check] = [c for c in failed.json["checks"] if c["name"] == f"bucket {bucket}"]
    assert check["level"] == "fail" and "SQSJOBS_PAYLOAD_BUCKET" in check["fix"]
    app.close()


def test_doctor_fails_on_a_queue_that_keeps_messages_less_than_the_setting(ministack_url):
    app = new_app(ministack_url)
    app.provision()
    # GIVEN a mail queue back at SQS's default retention (4 days), as provision left it before
    mail = app.settings.queue_name("mail")
    sqs_call(
        app,
        "set_queue_attributes",
        QueueUrl=queue_url(app, "mail"),
        Attributes={"MessageRetentionPeriod": "345600"},
    )

    run = invoke(app, ministack_url, "doctor", "--json")

    # THEN that queue fails, with the attribute to set, and every other queue keeps 14 days
    assert run.code == EXIT_ERROR
    retention = {c["name"]: c for c in run.json["checks"] if c["name"].startswith("retention ")}
    assert retention[f"retention {mail}"]["level"] == "fail"
    assert "keeps messages 4 d < message_retention_s 14 d" in retention[f"retention {mail}"]["detail"]
    assert "MessageRetentionPeriod=1209600" in retention[f"retention {mail}"]["fix"]
    others = {n: c["detail"] for n, c in retention.items() if n != f"retention {mail}" and c["level"] != "ok"}
    assert others == {}
    assert retention[f"retention {app.settings.dlq_name('mail')}"]["detail"] == "keeps messages 14 d"
    app.close()


def test_doctor_fails_on_a_type_whose_retries_or_expiry_cannot_fit_the_retention(ministack_url):
    # GIVEN queues that keep messages one day
    app = new_app(ministack_url)
    app.configure(message_retention_s=86_400)

    # AND a type whose 30 attempts of up to an hour cannot fit in a day, one bounded by max_age,
    # and one that may wait two days to start
    @app.job("reports.nightly", max_attempts=30, timeout=3600)
    def nightly(payload: None, ctx: object) -> None: ...

    @app.job("reports.bounded", max_attempts=30, timeout=3600, retry=RetryPolicy(max_age_s=12 * 3600))
    def bounded(payload: None, ctx: object) -> None: ...

    @app.job("reports.patient", expires_after=2 * 86_400)
    def patient(payload: None, ctx: object) -> None: ...

    app.provision()

    # WHEN the doctor checks the deployment
    run = invoke(app, ministack_url, "doctor", "--json")

    # THEN it fails on the two that cannot fit, each naming the setting to change
    assert run.code == EXIT_ERROR
    failed = {c["name"]: c for c in run.json["checks"] if c["level"] == "fail"}
    assert set(failed) == {"retention reports.nightly", "expiry reports.patient"}
    nightly_check = failed["retention reports.nightly"]
    assert "30 attempts of up to 1 h" in nightly_check["detail"]
    assert "the queues keep messages 1 d" in nightly_check["detail"]
    assert "@app.job('reports.nightly', ...)" in nightly_check["fix"]
    assert "RetryPolicy(max_age_s=) at most 23 h" in nightly_check["fix"]
    assert "SQSJOBS_MESSAGE_RETENTION_S" in nightly_check["fix"]
    assert "expires_after 2 d > the queues' retention 1 d" in failed["expiry reports.patient"]["detail"]
    assert "set expires_after to at most 1 d" in failed["expiry reports.patient"]["fix"]
    # ... and at the default 14 days every one of them fits
    app.configure(message_retention_s=1_209_600)
    app.provision()
    passed = invoke(app, ministack_url, "doctor", "--json")
    assert passed.code == 0, passed.out
    [ok] = [c for c in passed.json["checks"] if c["name"] == "retention job types"]
    assert ok["detail"].startswith(
        "every job type fits the queues' 14 d (longest message span: reports.nightly"
    )
    app.close()


def _drop_messages(app) -> None:
    """Delete every message in the default queue, as a lost or expired message would be gone."""
    url = queue_url(app, "default")
    while got := sqs_call(app, "receive_message", QueueUrl=url, MaxNumberOfMessages=10).get("Messages", []):
        for m in got:
            sqs_call(app, "delete_message", QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])


def test_doctor_stranded_reports_records_nothing_will_bring_back_and_not_the_healthy_ones(ministack_url):
    app = new_app(ministack_url)
    app.provision()
    now = time.time()
    # GIVEN records whose messages are gone: one queued and due two days ago, one retry due 20 days ago
    # (longer than the queues keep a message), a chain step waiting on a step that does not exist,
    lost = app.enqueue("orders.ok", {"order_id": "lost"})
    old_retry = app.enqueue("orders.flaky", {"order_id": "old"})
    orphan_step = app.enqueue("orders.ok", {"order_id": "step"})
    dead_owner = app.enqueue("mail.send", {"to": "x@example.com"})
    live_owner = app.enqueue("orders.ok", {"order_id": "live"})
    _drop_messages(app)
    settle(app, lost, JobStatus.QUEUED, now - 2 * 86_400, run_at=now - 2 * 86_400)
    settle(app, old_retry, JobStatus.RETRY_SCHEDULED, now - 20 * 86_400, run_at=now - 20 * 86_400, attempt=1)
    settle(app, orphan_step, JobStatus.WAITING, now - 60, chain_id="cnothere", chain_step=1)
    # AND a job whose owner died an hour ago and whose message never came back
    settle(app, dead_owner, JobStatus.RUNNING, now - 3600, lease_expires=now - 3600, attempt=1)
    # AND healthy ones: running under a live lease, queued with its message, held far in the future
    settle(app, live_owner, JobStatus.RUNNING, now - 5, lease_expires=now + 300, attempt=1)
    healthy = app.enqueue("orders.ok", {"order_id": "fine"})
    held = app.enqueue("orders.ok", {"order_id": "later"}, delay=7200)

    # WHEN the audit scans the table
    run = invoke(app, ministack_url, "doctor", "--stranded", "--json", "--segments", "3")

    # THEN it reports exactly the records without a witness, each with why
    assert run.code == EXIT_ERROR, run.out
    why = {s["id"]: s["reason"] for s in run.json["stranded"]}
    assert set(why) == {lost, old_retry, orphan_step, dead_owner}
    assert healthy not in why and held not in why and live_owner not in why
    assert why[lost].startswith("due 2 d ago, not claimed and no attention entry")
    assert "longer than the queues keep a message (14 d)" in why[old_retry]
    assert "step cnothere-00 does not exist" in why[orphan_step]
    assert why[dead_owner].startswith("lease expired 1 h ago")
    assert run.json["scanned"] >= 7 and run.json["segments"] == 3
    # ... and a human-readable report that says so
    human = invoke(app, ministack_url, "doctor", "--stranded")
    assert human.code == EXIT_ERROR and "4 stranded records" in human.out and lost in human.out
    # ... while a shorter grace finds nothing more, and a clean table passes
    for job_id in (lost, old_retry, orphan_step, dead_owner):
        settle(app, job_id, JobStatus.CANCELLED, now)
    clean = invoke(app, ministack_url, "doctor", "--stranded", "--grace", "1m")
    assert clean.code == 0, clean.out
    assert "no stranded record" in clean.out
    app.close()
