"""Pure parts of observability: trace header formats, what the message carries, EMF documents."""

from __future__ import annotations

import json

import pytest
from aws_lambda_powertools.metrics import EphemeralMetrics, MetricUnit

from sqsjobs import App
from sqsjobs.observability import logs, tracing
from sqsjobs.observability.metrics import MAX_VALUES_PER_LINE, QUEUE_WAIT, RUN_TIME, JobMetrics
from sqsjobs.producer import send_hints
from sqsjobs.store.enqueue import NewJob

ROOT, PARENT = "1-5759e988-bd862e3fe1be46a994272793", "53995c3f42cd8ad8"
XRAY = f"Root={ROOT};Parent={PARENT};Sampled=1"
W3C = "00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-01"


def test_both_trace_formats_parse_to_the_same_position():
    x, w = tracing.parse(XRAY + ";Lineage=a87bd80c:1"), tracing.parse(W3C)
    assert x is not None and w is not None
    assert (x.trace_id, x.parent_id, x.sampled) == (w.trace_id, w.parent_id, w.sampled)
    assert x.xray_header() == XRAY and w.traceparent() == W3C
    assert x.traceparent() == W3C  # an X-Ray id is a valid W3C id
    assert (tracing.trace_id(XRAY), tracing.trace_id(W3C)) == (ROOT, W3C.split("-")[1])


def test_a_header_is_parsed_once_for_all_its_readers():
    # A job's header is read by its claimed line, its span and its outcome line: one parse.
    header = f"Root=1-5759e988-{'ab' * 12};Parent={PARENT};Sampled=1"
    assert tracing.parse(header) is tracing.parse(header)
    assert tracing.trace_id(header) == f"1-5759e988-{'ab' * 12}"


def test_garbage_is_no_trace():
    for header in (
        None,
        "",
        "Root=abc",
        "00-" + "0" * 32 + "-53995c3f42cd8ad8-01",
        "ff-" + "a" * 32 + "-" + "b" * 16 + "-01",
    ):
        assert tracing.parse(header) is None
    assert tracing.parse(f"Root={ROOT};Sampled=?") == tracing.TraceContext(
        ROOT[2:].replace("-", ""), "", None, "xray"
    )


def test_the_producer_reads_the_lambda_trace_header_and_normalises_it():
    assert tracing.current_trace({"_X_AMZN_TRACE_ID": XRAY + ";Lineage=a87bd80c:1"}) == XRAY
    assert tracing.current_trace({}) is None


def test_the_send_batch_entry_carries_the_trace_in_both_forms():
    # Both emulators drop MessageSystemAttributes from SendMessageBatch entries, so the entry itself is checked:
    # W3C context where OpenTelemetry extracts it, AWSTraceHeader where X-Ray links SQS to Lambda, from either form.
    unparented = f"Root={ROOT};Sampled=0"
    jobs = [
        NewJob(
            id=f"j{i}",
            type="x",
            queue="default",
            payload={},
            payload_version=1,
            max_attempts=1,
            run_at=0.0,
            now=0.0,
            trace=trace,
        )
        for i, trace in enumerate([XRAY, W3C, unparented, None])
    ]
    call = next(send_hints(jobs, queue_urls={"default": "https://q"}))
    xray, w3c, bare, none = call.params["Entries"]
    for entry in (xray, w3c):
        assert entry["MessageSystemAttributes"] == {
            "AWSTraceHeader": {"DataType": "String", "StringValue": XRAY}
        }
        assert entry["MessageAttributes"] == {"traceparent": {"DataType": "String", "StringValue": W3C}}
    # An X-Ray header without a parent has no W3C form: the system attribute alone
    assert bare["MessageSystemAttributes"]["AWSTraceHeader"]["StringValue"] == unparented
    assert "MessageAttributes" not in bare
    assert "MessageSystemAttributes" not in none and "MessageAttributes" not in none


def test_a_received_message_names_its_trace_by_traceparent_else_by_aws_trace_header():
    assert tracing.delivered_trace({"traceparent": {"StringValue": W3C}}, {"AWSTraceHeader": XRAY}) == W3C
    assert tracing.delivered_trace({}, {"AWSTraceHeader": XRAY}) == XRAY
    assert tracing.delivered_trace({}, {}) is None


def test_emf_documents_split_long_series_and_sum_counts():
    lines = []
    metrics = JobMetrics("svc", write=lines.append, flush_interval_s=3600)
    for _ in range(3):
        metrics.enqueued("report", "acme")
    for i in range(MAX_VALUES_PER_LINE + 5):
        metrics.timing(RUN_TIME, "report", "acme", i / 1000)
    assert metrics.flush() == 2
    first, second = (json.loads(line) for line in lines)
    assert first["JobsEnqueued"] == [3.0]
    assert len(first[RUN_TIME]) == MAX_VALUES_PER_LINE and len(second[RUN_TIME]) == 5
    assert "JobsEnqueued" not in second
    assert first["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [
        ["service", "job_type"],
        ["service", "job_type", "tenant"],
    ]
    assert metrics.flush() == 0  # nothing left


def test_emf_documents_are_what_powertools_writes_value_by_value():
    # The series go to Powertools' serializer whole; the document is the one add_metric would build.
    metrics = JobMetrics("svc", write=lambda line: None, flush_interval_s=3600)
    metrics.enqueued("report", "acme")
    metrics.timing(RUN_TIME, "report", "acme", 0.25)
    metrics.timing(RUN_TIME, "report", "acme", 0.5)
    metrics.timing(QUEUE_WAIT, "report", "acme", 1.0)
    (ours,) = metrics.lines()

    expected = EphemeralMetrics(namespace="sqsjobs", service="svc")
    expected.add_dimension(name="service", value="svc")
    expected.add_dimension(name="job_type", value="report")
    expected.add_dimensions(service="svc", job_type="report", tenant="acme")
    expected.add_metric(name="JobsEnqueued", unit=MetricUnit.Count, value=1)
    for name, value in ((QUEUE_WAIT, 1000.0), (RUN_TIME, 250.0), (RUN_TIME, 500.0)):
        expected.add_metric(name=name, unit=MetricUnit.Milliseconds, value=value)
    theirs = dict(expected.serialize_metric_set())
    ours["_aws"].pop("Timestamp"), theirs["_aws"].pop("Timestamp")
    assert json.dumps(ours) == json.dumps(theirs)


def test_metrics_flush_by_themselves_once_the_interval_passed_and_can_be_turned_off(monkeypatch):
    now = [0.0]
    lines = []
    metrics = JobMetrics("svc", write=lines.append, flush_interval_s=60, monotonic=lambda: now[0])
    metrics.enqueued("a")
    assert lines == []
    now[0] = 61.0
    metrics.enqueued("a")
    assert len(lines) == 1 and json.loads(lines[0])["JobsEnqueued"] == [2.0]
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    metrics.enqueued("a")
    assert metrics.flush() == 0 and len(lines) == 1


@pytest.mark.parametrize(
    "message",
    [
        "job claimed",
        "",
        "   ",
        " x",
        "{",
        '{"a": 1}',
        " [1, 2]",
        "\n\t-3.5e2",
        '"quoted"',
        "true",
        "nullx",
        "NaN",
        "Infinity",
        "-Infinity",
        "None",
        "I am",
        "error: [x]",
        "0 jobs",
        "{not json",
    ],
)
def test_log_messages_decode_as_powertools_would(message: str):
    # Powertools decodes a message as JSON and keeps it as it is when that fails; the shortcut for
    # texts no JSON starts like must give the same result, only without raising.
    try:
        expected = json.loads(message)
    except ValueError:
        expected = message
    try:
        ours = logs.decode_message(message)
    except ValueError:
        ours = message
    assert ours == expected or (ours != ours and expected != expected)  # NaN


def test_the_app_logs_json_lines_with_plain_and_json_messages(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("SQSJOBS_LOG_LEVEL", "INFO")
    app = App("logs", endpoint_url="http://127.0.0.1:9")
    app.telemetry.logger.info("job claimed", extra={"job_id": "j1"})
    app.telemetry.logger.info('{"embedded": true}')
    first, second = (json.loads(line) for line in capsys.readouterr().err.splitlines())
    assert first["message"] == "job claimed" and first["job_id"] == "j1" and first["service"] == "logs"
    assert second["message"] == {"embedded": True}


def test_two_apps_of_one_name_share_a_working_logger(monkeypatch):
    """A second Powertools Logger of a service name skips its formatter; the LambdaWorker's append_keys then failed."""
    first, second = App("same-name-logger"), App("same-name-logger")
    first.telemetry.logger.info("first")
    second.telemetry.logger.append_keys(function_request_id="r1")
    second.telemetry.logger.info("second")
    assert first.telemetry.logger is second.telemetry.logger
