"""End to end: the packaged zip deployed as a function on MiniStack, fed by an SQS event source mapping.

MiniStack runs the function on its own interpreter (its virtualenv's Python, whatever the declared
runtime), so the zip is built for that Python; boto3/botocore are bundled in it, as for AWS. The
function reaches MiniStack through the ``AWS_ENDPOINT_URL`` MiniStack injects into it.
"""

from __future__ import annotations

import json
import time

import boto3
import pytest

from sqsjobs import JobStatus
from sqsjobs.deploy.packaging import HANDLER, LambdaBuild, build_lambda_zip
from sqsjobs.envelope import DLQ_REASON
from sqsjobs.errors import ConfigurationError
from tests.apps import lambda_app
from tests.emulators import REPO_ROOT, ministack_python
from tests.integration.helpers import attr, depth, receive_dlq, send_raw
from tests.integration.lambda_events import host_arch

SECRET = "4111-1111-1111-1111"
FUNCTION_TIMEOUT_S = 10


def test_the_packaged_function_runs_a_mix_of_jobs_to_their_final_states(ministack_url, make_app, tmp_path):
    # GIVEN the zip `sqsjobs package lambda` builds, for MiniStack's interpreter (deps cached by make)
    build = LambdaBuild(
        app="tests.apps.lambda_app:app",
        output=tmp_path / "worker.zip",
        python_version=ministack_python(),
        arch=host_arch(),
        project_dir=REPO_ROOT,
        offline=True,
        compress_level=1,
    )
    try:
        report = build_lambda_zip(build)
    except ConfigurationError as exc:
        pytest.fail(f"{exc}\nrun `make lambda-e2e-deps` (part of `make test`) first")
    assert report.handler == HANDLER == "sqsjobs.runtime.lambda_handlers.sqs_worker"

    # ... deployed as a function with an ESM that reports batch item failures
    app = make_app(ministack_url, visibility_timeout_s=30)
    app.registry.include(lambda_app.app.registry)
    app.provision()
    aws = {"endpoint_url": ministack_url, "region_name": app.settings.region}
    lam, sqs, logs = (boto3.client(s, **aws) for s in ("lambda", "sqs", "logs"))
    lam.create_function(
        FunctionName=app.name,
        Runtime="python3.12",
        Role="arn:aws:iam::000000000000:role/sqsjobs-worker",
        Handler=report.handler,
        Code={"ZipFile": report.path.read_bytes()},
        Timeout=FUNCTION_TIMEOUT_S,
        Environment={
            "Variables": {
                "SQSJOBS_APP": "tests.apps.lambda_app:app",
                "SQSJOBS_TABLE": app.settings.table_name,
                "SQSJOBS_QUEUE_PREFIX": app.settings.queue_prefix,
                "POWERTOOLS_METRICS_NAMESPACE": "sqsjobs-e2e",
            }
        },
    )
    try:
        # One environment: each MiniStack environment unzips the code on its own, slowly on 2 cores.
        lam.put_function_concurrency(FunctionName=app.name, ReservedConcurrentExecutions=1)
        queue_url = app.run(app.queue_urls.flow(["default"]))["default"]
        arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"][
            "QueueArn"
        ]
        mapping = lam.create_event_source_mapping(
            EventSourceArn=arn,
            FunctionName=app.name,
            BatchSize=10,
            FunctionResponseTypes=["ReportBatchItemFailures"],
        )
        run_the_mix(app, lambda: function_output(logs, app.name))
        lam.delete_event_source_mapping(UUID=mapping["UUID"])
    finally:
        lam.delete_function(FunctionName=app.name)  # stops its warm worker process


def function_output(logs, name):
    """The function's output lines, from CloudWatch Logs (/aws/lambda/<name>), where AWS would extract EMF."""
    kwargs = {"logGroupName": f"/aws/lambda/{name}"}
    lines = []
    while True:
        page = logs.filter_log_events(**kwargs)
        lines += [line for event in page["events"] for line in event["message"].splitlines()]
        if not page.get("nextToken"):
            return lines
        kwargs["nextToken"] = page["nextToken"]


def run_the_mix(app, output):
    # WHEN a mix of jobs is enqueued
    ok = [app.enqueue("ok", {"n": SECRET}, tenant="acme" if i == 0 else None) for i in range(3)]
    flaky = app.enqueue("flaky", {"delay_s": 1})
    boom = app.enqueue("boom", {"order": 7})
    unknown = app.enqueue("no.such.type", {}, queue="default")
    send_raw(app, "not an sqsjobs message")

    # THEN each record reaches its final state and the queue empties
    expected = {j: JobStatus.SUCCEEDED for j in [*ok, flaky]} | {
        boom: JobStatus.DEAD,
        unknown: JobStatus.DEAD,
    }
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        states = {j: app.get(j).status for j in expected}
        if states == expected and depth(app) == {"visible": 0, "in_flight": 0, "delayed": 0}:
            break
        time.sleep(0.5)
    else:
        tail = "\n".join(output()[-40:])
        pytest.fail(f"not final after 60 s: {states}, queue {depth(app)}\n{tail}")
    assert app.get(flaky).attempt == 2  # retried once: re-armed, reported failed, redelivered when due
    assert [h.outcome for h in app.get(flaky).history] == ["retry", "succeeded"]
    assert all(app.get(j).attempt == 1 for j in ok)
    # ... the dead job, the unknown type and the malformed message are in the DLQ with their reasons
    reasons = sorted(attr(m, DLQ_REASON).split(" ")[0] for m in receive_dlq(app))
    assert reasons == ["malformed", "permanent", "unknown"]

    # THEN the function's log has the transition lines and the EMF metrics, and no payload.
    # The log is read through the emulator's log store, which may lag the record writes: the last
    # invocation's lines can land a moment after its final write, so read until they are all there.
    deadline = time.monotonic() + 20
    while True:
        text = output()
        lines = [json.loads(line) for line in text if line.startswith("{")]
        succeeded = [line for line in lines if line.get("message") == "job succeeded"]
        if {line["job_id"] for line in succeeded} == {*ok, flaky} or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert {line["job_id"] for line in succeeded} == {*ok, flaky}
    emf = [line for line in lines if "_aws" in line]
    assert sum(sum(d.get("JobsSucceeded", [])) for d in emf) == 4
    assert any(d.get("tenant") == "acme" for d in emf)
    assert {d["_aws"]["CloudWatchMetrics"][0]["Namespace"] for d in emf} == {"sqsjobs-e2e"}
    assert not any(SECRET in line for line in text)
