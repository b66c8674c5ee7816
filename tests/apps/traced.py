"""An app whose processes are traced as an application would trace them: OpenTelemetry SDK, FastAPI and botocore instrumented.

Importing it installs an SDK tracer provider that appends every finished span, as one JSON line, to
``$TEST_SPANS_FILE`` (O_APPEND: the API server, the worker and a Lambda run write to one file), and
instruments FastAPI and botocore, as ``opentelemetry-instrument`` would. ``traced.parent`` writes an
S3 object through its own boto3 client and enqueues ``traced.child``: the trace the tests follow;
``traced.broken`` raises, so its span shows how a failure is recorded.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

import boto3
from botocore.config import Config
from opentelemetry import trace
from opentelemetry.instrumentation.botocore import BotocoreInstrumentor
from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from sqsjobs import App, JobContext

if TYPE_CHECKING:
    from collections.abc import Sequence

    from opentelemetry.sdk.trace import ReadableSpan


class FileExporter(SpanExporter):
    """One JSON line per span, appended to a file shared by every process of a test."""

    def __init__(self, path: str) -> None:
        self.path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = "".join(json.dumps(as_dict(s)) + "\n" for s in spans)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, lines.encode())
        finally:
            os.close(fd)
        return SpanExportResult.SUCCESS


def as_dict(span: ReadableSpan) -> dict[str, Any]:
    ctx = span.get_span_context()
    return {
        "name": span.name,
        "kind": span.kind.name,
        "trace_id": f"{ctx.trace_id:032x}",
        "span_id": f"{ctx.span_id:016x}",
        "parent_id": f"{span.parent.span_id:016x}" if span.parent else None,
        "links": [
            {"trace_id": f"{link.context.trace_id:032x}", "span_id": f"{link.context.span_id:016x}"}
            for link in span.links
        ],
        "attributes": {k: list(v) if isinstance(v, tuple) else v for k, v in (span.attributes or {}).items()},
        "status": span.status.status_code.name,
        "description": span.status.description,
        "events": [{"name": e.name, "attributes": dict(e.attributes or {})} for e in span.events],
        "start_ns": span.start_time,
        "scope": span.instrumentation_scope.name if span.instrumentation_scope else None,
        "pid": os.getpid(),
    }


if os.environ.get("TEST_SPANS_FILE"):
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(FileExporter(os.environ["TEST_SPANS_FILE"])))
    trace.set_tracer_provider(provider)
    BotocoreInstrumentor().instrument()
    FastAPIInstrumentor().instrument()

app = App(os.environ.get("TEST_APP_NAME", "traced"))


@app.job("traced.parent", max_attempts=2, timeout=30)
def parent(payload: dict[str, Any], ctx: JobContext) -> str:
    """Writes an S3 object with a boto3 client of its own, then enqueues a child: both belong to this run's trace."""
    s3 = boto3.client(
        "s3",
        endpoint_url=os.environ["SQSJOBS_ENDPOINT_URL"],
        region_name=app.settings.region,
        config=Config(s3={"addressing_style": "path"}),
    )
    s3.put_object(Bucket=payload["bucket"], Key=ctx.job_id, Body=b"evidence")
    return app.enqueue("traced.child", {"of": ctx.job_id})


@app.job("traced.child", max_attempts=2, timeout=30)
def child(payload: dict[str, Any], ctx: JobContext) -> str:
    """Does nothing but run: its spans are what the test looks for."""
    return str(payload["of"])


@app.job("traced.broken", max_attempts=1, timeout=30)
def broken(payload: dict[str, Any], ctx: JobContext) -> None:
    """Fails its only attempt: its span carries the exception as the conventions record one."""
    raise LookupError(f"no invoice {payload['invoice']} in the ledger")
