"""``GET /series`` and ``/ui/charts`` from CloudWatch: what a real worker process emitted, read with GetMetricData.

MiniStack serves PutMetricData and GetMetricData (namespaces kept apart, percentiles) but ingests no
EMF log lines, which on AWS the log pipeline turns into metrics. So the test plays that pipeline:
the EMF lines a real ``sqsjobs worker`` process printed are put into MiniStack with PutMetricData,
dimension sets and values as the lines declare them. The series read from CloudWatch must then
agree with the series read from the job records of the same run, and noise in another namespace
or another service must not leak in.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from datetime import UTC, datetime

import pytest

from sqsjobs import JobRequest
from sqsjobs._aws import Call, one
from tests.api.helpers import client, serving
from tests.apps import routing
from tests.integration.helpers import worker_env
from tests.integration.test_routing import APP, wait_until

pytestmark = pytest.mark.slow

TOKEN = "cw-token"


def emf_lines(path) -> list[dict]:
    out = []
    for line in path.read_text().splitlines():
        if line.startswith("{") and '"_aws"' in line:
            out.append(json.loads(line))
    return out


def ingest(app, document: dict) -> int:
    """What CloudWatch's EMF ingestion does with one line: each metric, under each dimension set."""
    meta = document["_aws"]
    when = datetime.fromtimestamp(meta["Timestamp"] / 1000, UTC)
    put = 0
    for directive in meta["CloudWatchMetrics"]:
        for names in directive["Dimensions"]:
            dims = [{"Name": n, "Value": document[n]} for n in names]
            data = []
            for metric in directive["Metrics"]:
                values = document[metric["Name"]]
                values = values if isinstance(values, list) else [values]
                data.append(
                    {
                        "MetricName": metric["Name"],
                        "Dimensions": dims,
                        "Timestamp": when,
                        "Values": [float(v) for v in values],
                        "Counts": [1.0] * len(values),
                        "Unit": metric.get("Unit", "None"),
                    }
                )
            app.run(
                one(
                    Call(
                        "cloudwatch",
                        "put_metric_data",
                        {"Namespace": directive["Namespace"], "MetricData": data},
                    )
                )
            )
            put += len(data)
    return put


def test_the_series_from_cloudwatch_agree_with_the_records_of_the_same_run(ministack_url, make_app, tmp_path):
    # GIVEN an App whose charts read CloudWatch, and a real worker that runs 6 jobs (one fails once)
    app = make_app(ministack_url, charts_source="cloudwatch")
    app.registry.include(routing.app.registry)
    app.provision()
    log, out = tmp_path / "runs.jsonl", tmp_path / "worker.out"
    ids = app.enqueue_many(
        [JobRequest("work.run", {"label": f"w{i}", "log": str(log), "fail_once": i == 0}) for i in range(6)]
    )
    with out.open("wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "sqsjobs", "worker", "--app", APP, "--queues", "work"],
            env=worker_env(app),
            stdout=sink,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            wait_until(lambda: all(app.get(i).status.value == "succeeded" for i in ids), 60, "the six jobs")
        finally:
            os.killpg(proc.pid, signal.SIGTERM)  # a worker that stops flushes its metrics
            proc.wait(30)
    lines = emf_lines(out)
    assert lines, out.read_text()[-2000:]
    # ... its EMF lines ingested as CloudWatch would, and noise in another namespace and another service
    assert sum(ingest(app, doc) for doc in lines) > 0
    noise = [
        {"Name": "service", "Value": app.telemetry.metrics.service},
        {"Name": "job_type", "Value": "work.run"},
    ]
    now = datetime.now(UTC)
    for namespace, dims in (("other", noise), ("sqsjobs", [{**noise[0], "Value": "another-app"}, noise[1]])):
        metric = {"MetricName": "JobsStarted", "Dimensions": dims, "Timestamp": now, "Value": 100.0}
        app.run(one(Call("cloudwatch", "put_metric_data", {"Namespace": namespace, "MetricData": [metric]})))
    records_app = make_app(ministack_url, name=app.name)  # the same table, on the emulator's default source
    records_app.registry.include(routing.app.registry)
    with (
        serving(app, token=TOKEN) as url,
        client(url, TOKEN) as http,
        serving(records_app, token=TOKEN) as records_url,
        client(records_url, TOKEN) as records_http,
    ):
        # WHEN the series are asked for
        cloud = http.get("/series", params={"type": "work.run"}).json()
        # THEN they come from CloudWatch, and count what the worker did: 7 starts, 6 successes, 1 retry
        assert (
            cloud["source"] == "cloudwatch" and cloud["read"] == 0 and cloud["metrics"] == 10 + 2
        )  # 10 per type, 2 per SQS queue
        totals = {k: sum(v) for k, v in cloud["counts"].items()}
        assert totals == {"started": 7, "succeeded": 6, "failed": 1, "dead": 0}, cloud
        # ... as the records of the same run say
        records = records_http.get("/series", params={"type": "work.run"}).json()
        assert records["source"] == "records" and {k: sum(v) for k, v in records["counts"].items()} == totals
        # ... and the run time's sample count is every attempt's
        assert cloud["latency"]["work.run"]["run"]["n"] == 7
        assert cloud["latency"]["work.run"]["run"]["p50"] is not None
        # ... and the charts page draws CloudWatch's numbers and says where they came from
        page = http.get("/ui/charts", params={"type": "work.run"}).text
        assert "From CloudWatch (GetMetricData, 12 metrics)" in page
        drawn = sum(
            int(v) for v in re.findall(r'data-series="started" data-bucket="\d+" data-value="(\d+)"', page)
        )
        assert drawn == 7, page[:2000]


def test_auto_reads_the_records_on_an_emulator(fresh_api):
    served = fresh_api(mails=0, perm=False)
    assert served.world.app.settings.charts_source == "auto"
    assert served.http.get("/series").json()["source"] == "records"
