"""Which source the charts read (``charts_source``), and ``auto``'s fallback when GetMetricData is denied.

The flows are sans-I/O, so the test answers their calls itself: the first call shows the source
chosen; an AccessDenied thrown into the CloudWatch read shows what ``auto`` does with a role that
may not call GetMetricData (infra's API function) and what ``cloudwatch`` does.
"""

from __future__ import annotations

import pytest

from sqsjobs import App
from sqsjobs.api.series_routes import series_flow
from sqsjobs.errors import ConfigurationError, TransportError


def _app(**settings) -> App:
    app = App("charts", **settings)

    @app.job("report")
    def report(payload: dict) -> None:
        """A job type to chart."""

    return app


def _denied(code: str = "AccessDenied") -> TransportError:
    return TransportError(f"cloudwatch {code}: not authorized", code=code, response={})


def _finish(flow, call):
    """Answer the records' Scan with an empty table until the flow returns its series."""
    while True:
        assert (call.service, call.operation) == ("dynamodb", "scan"), call
        try:
            call = flow.send({"Items": [], "ScannedCount": 0})
        except StopIteration as done:
            return done.value


def test_auto_on_aws_reads_cloudwatch_and_falls_back_to_the_records_when_denied():
    flow = series_flow(_app(charts_source="auto"), window="1h", job_type=None)
    call = next(flow)
    assert (call.service, call.operation) == ("cloudwatch", "get_metric_data")
    names = {q["MetricStat"]["Metric"]["MetricName"] for q in call.params["MetricDataQueries"]}
    assert {"JobsStarted", "JobsDead", "JobRunTime", "ApproximateNumberOfMessagesVisible"} <= names
    assert _finish(flow, flow.throw(_denied())).source == "records"


def test_auto_on_an_emulator_reads_the_records():
    flow = series_flow(_app(endpoint_url="http://127.0.0.1:1"), window="1h", job_type=None)
    assert _finish(flow, next(flow)).source == "records"


@pytest.mark.parametrize(("source", "code"), [("cloudwatch", "AccessDenied"), ("auto", "Throttling")])
def test_a_denied_read_asked_of_cloudwatch_and_any_other_error_are_raised(source, code):
    flow = series_flow(_app(charts_source=source), window="1d", job_type="report")
    next(flow)
    with pytest.raises(TransportError):
        flow.throw(_denied(code))


def test_an_unknown_source_is_refused():
    with pytest.raises(ConfigurationError, match="charts_source"):
        _ = _app(charts_source="prometheus").settings
