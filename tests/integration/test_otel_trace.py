"""One OpenTelemetry trace from an HTTP request to the last call of the child job it led to, across real processes.

The processes are traced as an application would trace them (``tests/apps/traced.py``: an SDK, FastAPI
and botocore instrumented) and append their spans to one file; the tests read the file and follow
the trace by ids: server span → send → process → the handler's S3 call and its child's send →
the child's process. The ECS worker and the Lambda adapter each get theirs.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import pytest

from sqsjobs._aws import Call, one
from tests.apps import traced
from tests.integration.helpers import kill_group, wait_until, worker_env

APP = "tests.apps.traced:app"
pytestmark = pytest.mark.slow


def spans_in(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def one_of(spans: list[dict], **where) -> dict:
    found = [s for s in spans if all(_get(s, k) == v for k, v in where.items())]
    assert len(found) == 1, (
        f"expected one span with {where}, found {len(found)}: {[s['name'] for s in spans]}"
    )
    return found[0]


def _get(span: dict, key: str):
    return span["attributes"].get(key.replace("__", ".")) if "__" in key else span.get(key)


def linked(span: dict, other: dict) -> bool:
    return {"trace_id": other["trace_id"], "span_id": other["span_id"]} in span["links"]


@pytest.fixture
def traced_app(ministack_url, make_app, tmp_path):
    app = make_app(ministack_url)
    app.registry.include(traced.app.registry)
    app.provision()
    bucket = f"evidence-{uuid.uuid4().hex[:12]}"
    app.run(one(Call("s3", "create_bucket", {"Bucket": bucket})))
    return app, bucket, tmp_path / "spans.jsonl"


def serve_api(app, spans_file: Path) -> tuple[subprocess.Popen[bytes], str]:
    """``sqsjobs api`` in a process of its own on a loopback port; its URL once it answers."""
    with socket.socket() as probe:  # a free port, given back for the server to take
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "sqsjobs", "api", "--app", APP, "--port", str(port)],
        env=worker_env(app, TEST_SPANS_FILE=str(spans_file)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        assert proc.poll() is None, "the API process exited"
        try:
            return httpx.get(f"{url}/queues", timeout=2, verify=False).status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_until(answers, 30, "the API to answer")
    except BaseException:
        kill_group(proc)
        raise
    return proc, url


def test_one_trace_from_the_http_request_through_a_worker_process_to_the_child_job(traced_app, tmp_path):
    app, bucket, spans_file = traced_app
    log_file = tmp_path / "worker.log"
    api, url = serve_api(app, spans_file)
    worker = None
    try:
        # WHEN a real HTTP request enqueues the parent job, and a worker process runs it and its child
        answer = httpx.post(
            f"{url}/jobs", json={"type": "traced.parent", "payload": {"bucket": bucket}}, timeout=30
        )
        assert answer.status_code == 202, answer.text
        parent_id = answer.json()["id"]
        with log_file.open("wb") as log:  # a worker as worker_process starts one, its log lines kept
            worker = subprocess.Popen(
                [sys.executable, "-m", "sqsjobs", "worker", "--app", APP, "--concurrency", "4"],
                env=worker_env(app, TEST_SPANS_FILE=str(spans_file), SQSJOBS_LOG_LEVEL="INFO"),
                stdout=subprocess.DEVNULL,
                stderr=log,
                start_new_session=True,
            )
        wait_until(lambda: app.get(parent_id).status.terminal, 60, "the parent job to finish")
        # (then a job that fails: enqueued with the parent, their claims could share one batched request)
        broken = httpx.post(
            f"{url}/jobs", json={"type": "traced.broken", "payload": {"invoice": 42}}, timeout=30
        )
        assert broken.status_code == 202, broken.text
        broken_id = broken.json()["id"]
        wait_until(lambda: app.get(broken_id).status.terminal, 60, "the broken job to die")
        parent_job = app.get(parent_id)
        assert parent_job.status.value == "succeeded", parent_job.last_error
        child_id = parent_job.result
        wait_until(
            lambda: any(
                s["attributes"].get("sqsjobs.job.id") == child_id and s["kind"] == "CONSUMER"
                for s in spans_in(spans_file)
            ),
            60,
            "the child's process span",
        )
    finally:
        kill_group(*(p for p in (worker, api) if p is not None))
    spans = spans_in(spans_file)

    # THEN one trace: the server span of the request ...
    send = one_of(spans, kind="PRODUCER", **{"sqsjobs__job__id": parent_id})
    server = one_of(
        spans,
        kind="SERVER",
        name="POST /jobs",
        scope="opentelemetry.instrumentation.fastapi",
        trace_id=send["trace_id"],
    )
    trace_id = server["trace_id"]
    by_id = {s["span_id"]: s for s in spans}

    def ancestors(span: dict) -> list[str]:
        out = []
        while span.get("parent_id") in by_id:
            span = by_id[span["parent_id"]]
            out.append(span["span_id"])
        return out

    # ... the producer span of the enqueue, inside the request, in the messaging conventions' names
    queue = app.settings.queue_name("default")  # the SQS queue's name, as botocore's spans have it
    assert send["name"] == f"send {queue}" and send["trace_id"] == trace_id
    assert server["span_id"] in ancestors(send)
    assert send["attributes"]["messaging.system"] == "aws_sqs"
    assert send["attributes"]["messaging.operation.type"] == "send"
    assert send["attributes"]["messaging.destination.name"] == queue
    assert send["attributes"]["sqsjobs.queue"] == "default"
    assert send["attributes"]["messaging.message.id"]
    # ... sqsjobs' own calls of the enqueue as client spans of the request: the message and the record
    own = [
        s for s in spans if s["scope"] == "sqsjobs" and s["kind"] == "CLIENT" and s["trace_id"] == trace_id
    ]
    methods = {(s["attributes"].get("rpc.service"), s["attributes"].get("rpc.method")) for s in own}
    assert {("SQS", "SendMessageBatch"), ("DynamoDB", "PutItem")} <= methods, methods
    put = next(s for s in own if s["attributes"]["rpc.method"] == "PutItem")
    assert (
        put["attributes"]["rpc.system"] == "aws-api"
        and put["attributes"]["aws.region"] == app.settings.region
    )

    # ... the worker's process span: the send span's child, linked to the receive that brought it
    process = one_of(spans, kind="CONSUMER", **{"sqsjobs__job__id": parent_id})
    assert process["name"] == f"process {queue}" and process["trace_id"] == trace_id
    assert process["parent_id"] == send["span_id"] and process["pid"] == worker.pid
    assert process["attributes"]["messaging.operation.type"] == "process"
    assert process["attributes"]["sqsjobs.job.outcome"] == "succeeded"
    receives = [s for s in spans if s["name"] == f"receive {app.name}-default" and linked(s, send)]
    assert len(receives) == 1 and receives[0]["kind"] == "CLIENT"
    assert receives[0]["attributes"]["messaging.operation.type"] == "receive"
    assert linked(process, receives[0])

    # ... the handler's S3 call (botocore's own instrumentation) inside the run
    s3 = one_of(spans, name="S3.PutObject")
    assert s3["trace_id"] == trace_id and s3["parent_id"] == process["span_id"]

    # ... the claim's DynamoDB call inside the process span too: the span opens before the claim,
    # so a child of it started before the handler's first call, and the finish after its last
    own_calls = sorted(
        (
            s
            for s in spans
            if s["scope"] == "sqsjobs" and s["kind"] == "CLIENT" and s["parent_id"] == process["span_id"]
        ),
        key=lambda s: s["start_ns"],
    )
    assert own_calls and own_calls[0]["attributes"]["rpc.service"] == "DynamoDB", own_calls
    assert own_calls[0]["start_ns"] < s3["start_ns"] < own_calls[-1]["start_ns"]
    assert own_calls[0]["attributes"]["aws.dynamodb.table_names"] == [app.settings.table_name]

    # ... the child's enqueue and run, still in the same trace
    child_send = one_of(spans, kind="PRODUCER", **{"sqsjobs__job__id": child_id})
    assert child_send["trace_id"] == trace_id and process["span_id"] in ancestors(child_send)
    child = one_of(spans, kind="CONSUMER", **{"sqsjobs__job__id": child_id})
    assert child["trace_id"] == trace_id and child["parent_id"] == child_send["span_id"]

    # ... and the worker's DynamoDB writes of the run appear inside it
    writes = [
        s
        for s in spans
        if s["scope"] == "sqsjobs"
        and s["attributes"].get("rpc.service") == "DynamoDB"
        and process["span_id"] in ancestors(s)
    ]
    assert writes, "no DynamoDB span in the parent's run"

    # ... a failed run records its exception as the conventions say: type, message, stack trace
    failed = one_of(spans, kind="CONSUMER", **{"sqsjobs__job__id": broken_id})
    assert failed["attributes"]["sqsjobs.job.outcome"] == "dead"
    assert failed["status"] == "ERROR"
    assert failed["description"] == "LookupError: no invoice 42 in the ledger"
    [event] = [e for e in failed["events"] if e["name"] == "exception"]
    assert event["attributes"]["exception.type"] == "LookupError"
    assert event["attributes"]["exception.message"] == "no invoice 42 in the ledger"
    stack = event["attributes"]["exception.stacktrace"]
    assert (
        "in broken" in stack
        and "raise LookupError" in stack
        and stack.rstrip().endswith("LookupError: no invoice 42 in the ledger")
    )

    # ... and the worker's log lines name the span they were logged in
    lines = [json.loads(line) for line in log_file.read_text().splitlines() if line.startswith("{")]
    for message in ("job claimed", "job succeeded"):
        line = next(x for x in lines if x.get("message") == message and x.get("job_id") == parent_id)
        assert (line["trace_id"], line["span_id"]) == (trace_id, process["span_id"]), line
    dead = next(x for x in lines if x.get("message") == "job dead" and x.get("job_id") == broken_id)
    assert (dead["trace_id"], dead["span_id"]) == (failed["trace_id"], failed["span_id"])


LAMBDA_RUN = """
import json, sys
from tests.apps import traced
from opentelemetry import trace
from sqsjobs.runtime.lambda_sqs import LambdaWorker
from tests.integration.lambda_events import FakeContext, event_from, receive, settle

app = traced.app
with trace.get_tracer("producer").start_as_current_span("request") as request:
    job_id = app.enqueue("traced.parent", {"bucket": sys.argv[1]})
worker = LambdaWorker(app)
try:
    for _ in range(2):  # the parent's invocation, then its child's
        context = FakeContext()
        context.invoked_function_arn = "arn:aws:lambda:us-east-1:000000000000:function:sqsjobs-test"
        context.memory_limit_in_mb = 512
        event = event_from(app, receive(app, 1))
        settle(app, event, worker(event, context))  # the parent's message is gone before the child's receive
finally:
    worker.close()
print(json.dumps({"job_id": job_id, "child_id": app.get(job_id).result}))
"""


def test_the_lambda_adapter_makes_an_invocation_span_that_the_run_links_to(traced_app):
    app, bucket, spans_file = traced_app
    env = worker_env(app, TEST_SPANS_FILE=str(spans_file), SQSJOBS_LOG_LEVEL="INFO")
    run = subprocess.run(
        [sys.executable, "-c", LAMBDA_RUN, bucket], env=env, capture_output=True, timeout=120, check=False
    )
    assert run.returncode == 0, run.stderr.decode()[-3000:]
    ids = json.loads(run.stdout.decode().strip().splitlines()[-1])
    spans = spans_in(spans_file)
    request = one_of(spans, name="request")
    send = one_of(spans, kind="PRODUCER", **{"sqsjobs__job__id": ids["job_id"]})
    assert send["parent_id"] == request["span_id"]

    # THEN each invocation is a span of its own (a new trace), linked to the messages it brought
    invocations = [s for s in spans if s["attributes"].get("faas.trigger") == "pubsub"]
    assert len(invocations) == 2
    first = next(s for s in invocations if linked(s, send))
    assert first["kind"] == "CONSUMER" and first["name"] == "sqsjobs-test"
    assert first["attributes"]["faas.coldstart"] is True
    assert first["attributes"]["faas.invocation_id"] == "req-test"
    assert first["trace_id"] != request["trace_id"]

    # ... and the run is the send span's child, linked to its invocation
    process = one_of(spans, kind="CONSUMER", **{"sqsjobs__job__id": ids["job_id"]})
    assert process["trace_id"] == request["trace_id"] and process["parent_id"] == send["span_id"]
    assert linked(process, first)
    s3 = one_of(spans, name="S3.PutObject")
    assert s3["parent_id"] == process["span_id"]
    child_send = one_of(spans, kind="PRODUCER", **{"sqsjobs__job__id": ids["child_id"]})
    child = one_of(spans, kind="CONSUMER", **{"sqsjobs__job__id": ids["child_id"]})
    assert child_send["parent_id"] == process["span_id"]
    assert child["parent_id"] == child_send["span_id"] and child["trace_id"] == request["trace_id"]
    second = next(s for s in invocations if s is not first)
    assert second["attributes"]["faas.coldstart"] is False and linked(child, second)
    # ... and the log lines name the run's span, with the fields Powertools adds in Lambda
    lines = [json.loads(line) for line in run.stderr.decode().splitlines() if line.startswith("{")]
    done = next(
        line
        for line in lines
        if line.get("message") == "job succeeded" and line.get("job_id") == ids["job_id"]
    )
    assert (done["trace_id"], done["span_id"]) == (process["trace_id"], process["span_id"])
    assert done["cold_start"] is True and done["function_name"] == "sqsjobs-test"
    assert done["function_memory_size"] == 512


NO_SDK_RUN = """
import asyncio, collections, json, sys, threading
from sqsjobs import App
from sqsjobs.runtime.worker import Worker

app = App(sys.argv[1])
@app.job("noop")
def noop(payload, ctx):
    return None

n = int(sys.argv[2])
ids = [app.enqueue("noop", {"i": i}) for i in range(n)]
app.kernel  # built here (its tracer decided), before the count
counts = collections.Counter()

def profile(frame, event, arg):
    if event == "call":
        module = frame.f_globals.get("__name__") or ""
        if module.startswith(("opentelemetry", "sqsjobs.observability.tracing", "sqsjobs.observability.spans")):
            counts[f"{module}.{frame.f_code.co_name}"] += 1

async def main():
    stop = asyncio.Event()
    worker = Worker(app)
    sys.setprofile(profile)
    threading.setprofile(profile)
    task = asyncio.create_task(worker.run(stop))
    while not all(app.get(i).status.terminal for i in ids):
        await asyncio.sleep(0.1)
    sys.setprofile(None)
    threading.setprofile(None)
    stop.set()
    await task

asyncio.run(main())
print(json.dumps({"counts": counts, "succeeded": sum(app.get(i).status.value == "succeeded" for i in ids)}))
"""


def test_without_an_sdk_a_job_makes_no_call_into_opentelemetry_or_sqsjobs_tracing(ministack_url, make_app):
    # GIVEN a worker process with the OpenTelemetry API installed (a dependency) but no SDK
    app = make_app(ministack_url)
    app.provision()
    env = worker_env(app, PYTHONPATH=os.getcwd())

    # WHEN it runs 20 jobs, every Python call counted while it does
    run = subprocess.run(
        [sys.executable, "-c", NO_SDK_RUN, app.name, "20"],
        env=env,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr.decode()[-3000:]
    result = json.loads(run.stdout.decode().strip().splitlines()[-1])

    # THEN the jobs ran and not one call went into OpenTelemetry or sqsjobs' tracing modules
    assert result["succeeded"] == 20
    assert result["counts"] == {}
