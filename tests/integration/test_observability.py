"""Logs, EMF metrics and trace continuation, captured from real runs on MiniStack (Lambda entry and ECS worker)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from sqsjobs.runtime.lambda_sqs import LambdaWorker
from sqsjobs.runtime.worker import Worker
from tests.apps import lambda_app
from tests.integration.helpers import worker_env
from tests.integration.lambda_events import FakeContext, event_from, receive

#: The checkout: the no-SDK run's child imports its tests package from there.
ROOT = Path(__file__).resolve().parents[2]

SECRET = "4111-1111-1111-1111"


def json_lines(text):
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
    return out


def emf(lines):
    return [line for line in lines if "_aws" in line]


@pytest.fixture
def traced_app(ministack_url, make_app, monkeypatch):
    def make(**settings):
        monkeypatch.setenv("SQSJOBS_LOG_LEVEL", "INFO")
        app = make_app(ministack_url, **settings)
        app.registry.include(lambda_app.app.registry)
        app.provision()
        return app

    return make


def run_lambda(app, n):
    worker = LambdaWorker(app)
    try:
        messages = receive(app, n)
        return messages, worker(event_from(app, messages), FakeContext())
    finally:
        worker.close()


def test_each_transition_logs_one_json_line_with_its_fields_and_never_the_payload(traced_app, capfd):
    # GIVEN a tenant's job whose payload holds something that must not reach the logs
    app = traced_app()
    ok = app.enqueue("ok", {"n": SECRET}, tenant="acme")
    flaky = app.enqueue("flaky", {"delay_s": 60, "card": SECRET})
    capfd.readouterr()

    # WHEN the Lambda entry point runs them
    run_lambda(app, 2)
    out, err = capfd.readouterr()

    # THEN every transition is one JSON line with the job's fields
    logs = {(line["job_id"], line["message"]): line for line in json_lines(err) if "job_id" in line}
    claimed, done = logs[(ok, "job claimed")], logs[(ok, "job succeeded")]
    for line in (claimed, done):
        assert (line["job_type"], line["queue"], line["attempt"], line["tenant"]) == (
            "ok",
            "default",
            1,
            "acme",
        )
        assert line["level"] == "INFO"
    assert claimed["outcome"] == "started" and claimed["wait_s"] >= 0
    assert done["outcome"] == "succeeded" and done["duration_s"] >= 0
    retry = logs[(flaky, "job retry scheduled")]
    assert (retry["outcome"], retry["error"], retry["delay_s"]) == ("retry", "Retry", 60.0)
    assert retry["duration_s"] >= 0  # not only successes say how long they took
    # ... and the payload is nowhere: not in the logs, not in the metrics
    assert SECRET not in out and SECRET not in err

    # THEN the invocation flushed EMF: one line per job type, the tenant as a second dimension set
    docs = {(d["job_type"], d.get("tenant")): d for d in emf(json_lines(out))}
    acme = docs[("ok", "acme")]
    assert acme["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [
        ["service", "job_type"],
        ["service", "job_type", "tenant"],
    ]
    assert acme["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "sqsjobs"
    for name in ("JobsEnqueued", "JobsStarted", "JobsSucceeded"):
        assert acme[name] == [1.0]
    assert len(acme["JobRunTime"]) == 1 and len(acme["JobQueueWait"]) == 1
    units = {m["Name"]: m["Unit"] for m in acme["_aws"]["CloudWatchMetrics"][0]["Metrics"]}
    assert units["JobRunTime"] == units["JobQueueWait"] == "Milliseconds"
    assert docs[("flaky", None)]["JobsRetried"] == [1.0]


def test_payloads_are_logged_only_when_the_user_opts_in(traced_app, capfd):
    app = traced_app(log_payloads=True)
    job_id = app.enqueue("ok", {"n": "visible-on-purpose"})
    run_lambda(app, 1)
    claimed = next(
        line for line in json_lines(capfd.readouterr().err) if line.get("message") == "job claimed"
    )
    assert (claimed["job_id"], claimed["payload"]) == (job_id, {"n": "visible-on-purpose"})


#: The no-SDK producer and Lambda run, in a process of its own: a test of this pytest worker may have
#: installed an OpenTelemetry SDK (``otel_spans``), and a process cannot uninstall one.
NO_SDK_RUN = """
import json, os
from sqsjobs.runtime.lambda_sqs import LambdaWorker
from tests.apps.lambda_app import app
from tests.integration.lambda_events import FakeContext, event_from, receive

job_id = app.enqueue("ok", {"n": 1})  # in the invocation: the trace is in the environment
del os.environ["_X_AMZN_TRACE_ID"]
worker = LambdaWorker(app)
try:
    messages = receive(app, 1)
    worker(event_from(app, messages), FakeContext())
finally:
    worker.close()
print(json.dumps({
    "sdk": app.telemetry.tracer is not None,
    "trace": app.get(job_id).trace,
    "traceparent": messages[0]["MessageAttributes"]["traceparent"]["StringValue"],
}))
"""


def test_without_an_sdk_the_lambda_s_x_ray_trace_travels_with_the_job_in_both_forms(traced_app):
    # GIVEN a producer inside a Lambda invocation traced by X-Ray, with no OpenTelemetry SDK (a fresh
    # process: whatever this one installed cannot reach it), whose job a Lambda worker then runs
    root, parent = "1-5759e988-bd862e3fe1be46a994272793", "53995c3f42cd8ad8"
    trace_id = f"Root={root};Parent={parent};Sampled=1;Lineage=a87bd80c:1"
    app = traced_app()
    done = subprocess.run(
        [sys.executable, "-c", NO_SDK_RUN],
        env=worker_env(app, SQSJOBS_LOG_LEVEL="INFO", _X_AMZN_TRACE_ID=trace_id),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["sdk"] is False

    # THEN the record keeps the trace (only the keys SQS accepts in AWSTraceHeader), and the message
    # carries its W3C form, which an OpenTelemetry consumer extracts. The message's AWSTraceHeader
    # cannot be checked here: MiniStack 1.5.33 and moto 5.2.5 both drop MessageSystemAttributes from
    # SendMessageBatch entries (tests/unit/test_observability_units.py checks the entry).
    assert seen["trace"] == f"Root={root};Parent={parent};Sampled=1"
    assert seen["traceparent"] == f"00-{root[2:].replace('-', '')}-{parent}-01"
    # ... and the log lines name the trace
    ended = next(line for line in json_lines(done.stderr) if line.get("message") == "job succeeded")
    assert ended["trace_id"] == root


@pytest.fixture(scope="session")
def otel_spans():
    """An in-memory exporter on the process's SDK provider, installed once per process.

    OpenTelemetry lets a process set its provider once. Module-scoped, this fixture was made again in
    a process that xdist's worksteal handed this module's tests twice: its second provider was refused
    ("Overriding of current TracerProvider is not allowed") and its exporter saw no span (fresh-clone
    run 61). Session-scoped, and adding to a provider already installed, it sees every span.
    """
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    current = trace.get_tracer_provider()
    if isinstance(current, TracerProvider):
        current.add_span_processor(SimpleSpanProcessor(exporter))
    else:
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
    return exporter


def test_a_failed_run_records_its_outcome_and_error_on_its_process_span(traced_app, otel_spans):
    from opentelemetry import trace

    app = traced_app()
    with trace.get_tracer("test").start_as_current_span("http request") as request:
        job_id = app.enqueue("flaky", {"delay_s": 60})
    send = next(s for s in otel_spans.get_finished_spans() if s.attributes.get("sqsjobs.job.id") == job_id)
    assert send.parent is not None and send.parent.span_id == request.get_span_context().span_id
    traceparent = app.get(job_id).trace
    assert traceparent.startswith(f"00-{send.context.trace_id:032x}-{send.context.span_id:016x}-")
    messages, _ = run_lambda(app, 1)
    assert messages[0]["MessageAttributes"]["traceparent"]["StringValue"] == traceparent

    span = next(
        s
        for s in otel_spans.get_finished_spans()
        if s.name == f"process {app.settings.queue_name('default')}"
    )
    assert span.context.trace_id == request.get_span_context().trace_id
    assert span.parent is not None and span.parent.span_id == send.context.span_id
    assert span.kind is trace.SpanKind.CONSUMER
    assert span.attributes["sqsjobs.job.id"] == job_id
    assert span.attributes["sqsjobs.job.outcome"] == "retry"
    assert span.status.status_code is trace.StatusCode.ERROR
    [event] = [e for e in span.events if e.name == "exception"]
    assert event.attributes["exception.type"] == "sqsjobs.errors.Retry"  # the fully qualified class
    assert event.attributes["exception.message"] == "the first attempt always fails"
    assert "Retry: the first attempt always fails" in event.attributes["exception.stacktrace"]
    assert span.status.description == "Retry: the first attempt always fails"


class VendorPropagator:
    """A user's own trace header (as B3's or a vendor's is): ``x-vendor-trace: <trace>.<span>.<tier>``.

    It carries a vendor state entry that only it writes and reads: a worker that parsed
    ``traceparent`` itself, instead of extracting with the application's propagator, loses it.
    """

    HEADER = "x-vendor-trace"

    def inject(self, carrier, context=None, setter=None):
        from opentelemetry import trace

        span_ctx = trace.get_current_span(context).get_span_context()
        if span_ctx.is_valid:
            tier = span_ctx.trace_state.get("vendor") or "none"
            carrier[self.HEADER] = f"{span_ctx.trace_id:032x}.{span_ctx.span_id:016x}.{tier}"

    def extract(self, carrier, context=None, getter=None):
        from opentelemetry import context as otel_context
        from opentelemetry import trace
        from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState

        value = carrier.get(self.HEADER)
        if not value:
            return context if context is not None else otel_context.get_current()
        trace_id, span_id, tier = value.split(".")
        remote = SpanContext(
            int(trace_id, 16),
            int(span_id, 16),
            is_remote=True,
            trace_flags=TraceFlags(TraceFlags.SAMPLED),
            trace_state=TraceState([("vendor", tier)]),
        )
        return trace.set_span_in_context(NonRecordingSpan(remote), context)

    @property
    def fields(self):
        return {self.HEADER}


@pytest.fixture
def vendor_propagation():
    """The application's global propagator: its own trace header, and W3C baggage."""
    from opentelemetry import propagate
    from opentelemetry.baggage.propagation import W3CBaggagePropagator
    from opentelemetry.propagators.composite import CompositePropagator

    before = propagate.get_global_textmap()
    propagate.set_global_textmap(CompositePropagator([VendorPropagator(), W3CBaggagePropagator()]))
    yield
    propagate.set_global_textmap(before)


def test_the_application_s_propagator_carries_the_trace_its_state_and_baggage_to_the_run(
    traced_app, otel_spans, vendor_propagation
):
    # GIVEN a producer whose application propagates with its own header and W3C baggage, inside a
    # span whose trace state names a vendor tier, with baggage set
    from opentelemetry import baggage, trace
    from opentelemetry import context as otel_context
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState

    app = traced_app()

    @app.job("carried")
    def carried(payload: dict, ctx) -> dict:
        span_ctx = trace.get_current_span().get_span_context()
        return {"baggage": dict(baggage.get_all()), "vendor": span_ctx.trace_state.get("vendor")}

    upstream = SpanContext(
        0x5759E988BD862E3FE1BE46A994272793,
        0x53995C3F42CD8AD8,
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
        trace_state=TraceState([("vendor", "gold")]),
    )
    scope = baggage.set_baggage("customer.id", "c-42", trace.set_span_in_context(NonRecordingSpan(upstream)))
    token = otel_context.attach(baggage.set_baggage("customer.tier", "gold", scope))
    try:
        job_id = app.enqueue("carried", {})
    finally:
        otel_context.detach(token)
    send = next(s for s in otel_spans.get_finished_spans() if s.attributes.get("sqsjobs.job.id") == job_id)

    # WHEN a worker of the same application runs it
    messages, _ = run_lambda(app, 1)
    assert VendorPropagator.HEADER in messages[0]["MessageAttributes"], messages[0]["MessageAttributes"]
    assert "baggage" in messages[0]["MessageAttributes"], messages[0]["MessageAttributes"]

    # THEN its process span continues the send span, with the trace state the vendor's header carried
    process = next(
        s
        for s in otel_spans.get_finished_spans()
        if s.kind is trace.SpanKind.CONSUMER and s.attributes.get("sqsjobs.job.id") == job_id
    )
    assert process.context.trace_id == upstream.trace_id
    assert process.parent is not None and process.parent.span_id == send.context.span_id
    assert process.context.trace_state.get("vendor") == "gold"
    # ... in the SQS queue's name, as the messaging conventions and botocore's spans name it
    queue = app.settings.queue_name("default")
    assert process.name == f"process {queue}" and send.name == f"send {queue}"
    assert process.attributes["messaging.destination.name"] == queue
    assert process.attributes["sqsjobs.queue"] == "default"
    # ... and the handler runs with the producer's baggage and trace state
    assert app.get(job_id).result == {
        "baggage": {"customer.id": "c-42", "customer.tier": "gold"},
        "vendor": "gold",
    }


def test_a_retry_starts_a_trace_of_its_own_linked_to_the_producer(traced_app, otel_spans):
    # GIVEN a job whose first attempt asks for a retry one second later
    from opentelemetry import trace

    app = traced_app()
    with trace.get_tracer("test").start_as_current_span("http request") as request:
        job_id = app.enqueue("flaky", {"delay_s": 1})
    send = next(s for s in otel_spans.get_finished_spans() if s.attributes.get("sqsjobs.job.id") == job_id)

    # WHEN both attempts run
    run_lambda(app, 1)
    run_lambda(app, 1)
    assert app.get(job_id).status.value == "succeeded"

    # THEN the first attempt is the send span's child, the retry a new trace that links to it
    first, second = sorted(
        (
            s
            for s in otel_spans.get_finished_spans()
            if s.kind is trace.SpanKind.CONSUMER and s.attributes.get("sqsjobs.job.id") == job_id
        ),
        key=lambda s: s.attributes["sqsjobs.job.attempt"],
    )
    assert first.parent.span_id == send.context.span_id
    assert first.context.trace_id == request.get_span_context().trace_id
    assert second.parent is None or second.parent.span_id != send.context.span_id
    assert second.context.trace_id != request.get_span_context().trace_id
    assert (send.context.trace_id, send.context.span_id) in {
        (link.context.trace_id, link.context.span_id) for link in second.links
    }
    assert second.attributes["sqsjobs.job.outcome"] == "succeeded"


def test_a_request_carrying_several_runs_writes_shows_in_each_run_s_trace(traced_app, otel_spans):
    # GIVEN five jobs, each enqueued in a trace of its own, delivered to one invocation
    from opentelemetry import trace

    app = traced_app()
    ids = []
    for n in range(5):
        with trace.get_tracer("test").start_as_current_span(f"request {n}"):
            ids.append(app.enqueue("ok", {"n": n}))
    otel_spans.clear()
    app.requests.reset()

    # WHEN it runs them: their five claims, made at one instant, leave in one batched request
    run_lambda(app, 5)
    assert {app.get(i).status.value for i in ids} == {"succeeded"}
    assert app.requests.counts[("dynamodb", "BatchExecuteStatement")] >= 1, app.requests.snapshot()

    # THEN each run's trace has the DynamoDB request that carried its claim, before its handler ran
    spans = otel_spans.get_finished_spans()
    process = {
        s.attributes["sqsjobs.job.id"]: s
        for s in spans
        if s.name == f"process {app.settings.queue_name('default')}"
    }
    assert set(process) == set(ids)
    carried = {}
    for job_id, run in process.items():
        calls = sorted(
            (
                s
                for s in spans
                if s.kind is trace.SpanKind.CLIENT
                and s.parent is not None
                and s.parent.span_id == run.context.span_id
                and s.attributes.get("rpc.service") == "DynamoDB"
            ),
            key=lambda s: s.start_time,
        )
        assert calls, f"no DynamoDB request in the run of {job_id}"
        carried[job_id] = calls[0]
    claims = {s.attributes.get("aws.request_id") for s in carried.values()}
    assert len(claims) == 1 and None not in claims, claims  # one request, seen from every trace
    assert {s.name for s in carried.values()} == {"DynamoDB.BatchExecuteStatement"}
    assert {s.attributes["db.operation.batch.size"] for s in carried.values()} == {5}
    assert len({s.context.trace_id for s in carried.values()}) == 5


def test_the_ecs_worker_flushes_metrics_on_its_interval_and_when_it_stops(traced_app, capfd):
    app = traced_app(metrics_interval_s=0.3)
    first = app.enqueue("ok", {"n": 1})
    capfd.readouterr()

    async def scenario():
        stop = asyncio.Event()
        worker = Worker(app)
        task = asyncio.create_task(worker.run(stop))
        try:
            while not app.get(first).status.terminal:
                await asyncio.sleep(0.1)
            await asyncio.sleep(0.8)  # a few intervals: the worker is still running
            running = capfd.readouterr().out
            second = await app.aenqueue("ok", {"n": 2})
            while not (await app.aget(second)).status.terminal:
                await asyncio.sleep(0.05)
        finally:
            stop.set()
            await task
        return running, capfd.readouterr().out

    while_running, after_stop = asyncio.run(scenario())
    assert sum(sum(d.get("JobsSucceeded", [])) for d in emf(json_lines(while_running))) == 1
    # the second job's metrics left by the next interval or, at the latest, at shutdown
    assert sum(sum(d.get("JobsSucceeded", [])) for d in emf(json_lines(after_stop))) == 1


def test_a_refused_claim_is_counted_per_type(traced_app, capfd):
    # GIVEN a job that ran, and a copy of its message delivered again (SQS delivers at least once)
    app = traced_app()
    job_id = app.enqueue("ok", {"n": 1}, tenant="acme")
    messages, _ = run_lambda(app, 1)
    assert app.get(job_id).status.value == "succeeded"
    capfd.readouterr()

    # WHEN the copy arrives
    worker = LambdaWorker(app)
    try:
        worker(event_from(app, messages), FakeContext())
    finally:
        worker.close()

    # THEN its claim was refused, counted for its type (and tenant), and nothing ran again
    docs = {(d["job_type"], d.get("tenant")): d for d in emf(json_lines(capfd.readouterr().out))}
    assert docs[("ok", "acme")]["ClaimsRefused"] == [1.0]
    assert "JobsStarted" not in docs[("ok", "acme")]


def test_only_declared_tags_become_metric_dimensions(traced_app, capfd):
    # GIVEN an App that declares the tag "plan" as a metric dimension, and jobs tagged with a plan and a customer
    app = traced_app(metric_tags={"plan"})
    app.enqueue("ok", {"n": "1"}, tags={"plan": "pro", "customer": "42"})
    app.enqueue("ok", {"n": "2"}, tags={"plan": "free", "customer": "43"})
    app.enqueue("ok", {"n": "3"})  # untagged
    capfd.readouterr()

    # WHEN the Lambda entry point runs them
    run_lambda(app, 3)
    out, _ = capfd.readouterr()

    # THEN each plan has its own dimension set beside the type's; the customer is no dimension anywhere
    docs = emf(json_lines(out))
    by_plan = {d.get("tag_plan"): d for d in docs if d.get("job_type") == "ok"}
    assert set(by_plan) == {"pro", "free", None}
    assert by_plan["pro"]["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [
        ["service", "job_type"],
        ["service", "job_type", "tag_plan"],
    ]
    assert by_plan["pro"]["JobsSucceeded"] == by_plan["free"]["JobsSucceeded"] == [1.0]
    assert all("tag_customer" not in d and "42" not in json.dumps(d) for d in docs)
    # ... and the type's own figures still add up over every line (CloudWatch sums them)
    assert sum(d.get("JobsSucceeded", [0.0])[0] for d in docs if d.get("job_type") == "ok") == 3.0
