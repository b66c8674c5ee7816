"""`sqsjobs doctor`: passes on what `provision` made, fails with the fix on a misconfigured queue."""

from __future__ import annotations

import json

from sqsjobs.cli.common import EXIT_ERROR
from tests.cli.conftest import invoke, new_app
from tests.integration.helpers import queue_url, sqs_call


def test_doctor_passes_on_a_provisioned_app(world):
    run = world.cli("doctor", "--json")
    assert run.code == 0, run.out
    assert run.json["ok"] is True
    names = {c["name"].split()[0] for c in run.json["checks"]}
    assert {"table", "index", "ttl", "queue", "dlq", "redrive", "visibility"} <= names
    human = world.cli("doctor")
    assert human.code == 0 and "all checks passed" in human.out


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
