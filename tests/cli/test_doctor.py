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
