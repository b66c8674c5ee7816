"""Trace context: captured at enqueue, carried by the message and the record, continued by the worker.

A job is usually enqueued inside some request that is already traced, and the run that follows
belongs to that trace::

    producer (trace T, span P)
      ├── PutItem   record.trace = T/P             ← the worker reads it back with the claim
      └── SendMessage  AWSTraceHeader = T/P (X-Ray) or message attribute ``traceparent`` (W3C)
                          │
    worker  ── claim ─────┴── run: a span/segment in trace T whose parent is P

Two formats exist and both are accepted wherever a trace is read:

- X-Ray: ``Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1`` (Lambda sets
  it in ``_X_AMZN_TRACE_ID`` for each invocation; SQS carries it in the ``AWSTraceHeader`` system
  attribute, which is what links an SQS hop in X-Ray).
- W3C: ``00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-01`` (OpenTelemetry's ``traceparent``).

Everything here is optional, so a missing backend is not an error. OpenTelemetry (``sqsjobs[otel]``
brings the API; the SDK is the application's choice) is used only when the process already imported
it (the application set it up); X-Ray segments are sent only when ``aws-xray-sdk`` is installed
(``sqsjobs[xray]``) and a daemon is there to receive them (inside Lambda, or
``AWS_XRAY_DAEMON_ADDRESS`` on ECS). Without either, a job span costs a context-variable set and reset.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import importlib.util
import os
import re
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

    from sqsjobs.job import Job

#: Lambda sets the invocation's X-Ray trace header in this variable.
XRAY_ENV = "_X_AMZN_TRACE_ID"
#: The SQS system attribute X-Ray reads to link a message to its producer's trace.
AWS_TRACE_HEADER = "AWSTraceHeader"
#: The message attribute (and record format) for W3C trace context (OpenTelemetry).
TRACEPARENT = "traceparent"
#: ``POWERTOOLS_TRACE_DISABLED=true`` turns sqsjobs' X-Ray segments off as it turns Powertools' Tracer off.
TRACE_DISABLED_ENV = "POWERTOOLS_TRACE_DISABLED"
#: Where the X-Ray daemon listens (set by Lambda; set it on ECS when a daemon sidecar runs).
XRAY_DAEMON_ENV = "AWS_XRAY_DAEMON_ADDRESS"

_XRAY_ROOT = re.compile(r"^1-([0-9a-f]{8})-([0-9a-f]{24})$")
_HEX16 = re.compile(r"^[0-9a-f]{16}$")
_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")


@dataclass(frozen=True)
class TraceContext:
    """One trace position, whichever format it came in."""

    #: 32 lowercase hex digits; for X-Ray, the root's epoch and random parts joined.
    trace_id: str
    #: The producer's span/segment id (16 hex digits), or "" when the header named none.
    parent_id: str
    #: The producer's sampling decision; None when it deferred it (X-Ray ``Sampled=?``).
    sampled: bool | None
    #: The format it was read from.
    source: Literal["xray", "w3c"]

    @property
    def xray_root(self) -> str:
        """``1-<epoch>-<random>``: the trace id as X-Ray writes it."""
        return f"1-{self.trace_id[:8]}-{self.trace_id[8:]}"

    @property
    def display_id(self) -> str:
        """The trace id in the format it came in (what a log reader searches for)."""
        return self.xray_root if self.source == "xray" else self.trace_id

    def xray_header(self) -> str:
        """``Root=...;Parent=...;Sampled=...``, only the keys SQS and X-Ray accept."""
        parts = [f"Root={self.xray_root}"]
        if self.parent_id:
            parts.append(f"Parent={self.parent_id}")
        if self.sampled is not None:
            parts.append(f"Sampled={int(self.sampled)}")
        return ";".join(parts)

    def traceparent(self) -> str:
        """The W3C header (an X-Ray id is a valid W3C id, so either source converts)."""
        return f"00-{self.trace_id}-{self.parent_id or '0' * 16}-{'01' if self.sampled else '00'}"


#: Trace headers remembered by ``parse``: a job's is read three times within its run (the claimed
#: and the outcome log lines, the span), with at most a worker's concurrency of runs in between.
PARSED_CACHE_SIZE = 1024


@functools.lru_cache(maxsize=PARSED_CACHE_SIZE)
def parse(header: str | None) -> TraceContext | None:
    """Read an X-Ray header or a W3C ``traceparent``; None for anything else.

    Cached: a ``TraceContext`` is immutable, so every reader of one header can share it, and a job
    parses its header once instead of three times (3.5 µs each).
    """
    if not header:
        return None
    header = header.strip()
    match = _TRACEPARENT.match(header)
    if match:
        version, trace_id, parent_id, flags = match.groups()
        if version == "ff" or trace_id == "0" * 32 or parent_id == "0" * 16:
            return None
        return TraceContext(trace_id, parent_id, bool(int(flags, 16) & 1), "w3c")
    fields = dict(part.split("=", 1) for part in header.split(";") if "=" in part)
    root = _XRAY_ROOT.match(fields.get("Root", "").strip().lower())
    if not root:
        return None
    parent = fields.get("Parent", "").strip().lower()
    sampled = {"1": True, "0": False}.get(fields.get("Sampled", "").strip())
    return TraceContext(
        root.group(1) + root.group(2), parent if _HEX16.match(parent) else "", sampled, "xray"
    )


def trace_id(header: str | None) -> str | None:
    """The trace id to put in log lines (None when there is no valid trace)."""
    ctx = parse(header)
    return ctx.display_id if ctx else None


# ── producer side ────────────────────────────────────────────────────────────────────────────
def current_trace(environ: Mapping[str, str] | None = None) -> str | None:
    """The trace the caller is in, to store on the record: OpenTelemetry's span, else Lambda's X-Ray header.

    OpenTelemetry wins when the application has an active span, because that is the trace it
    will look for; otherwise the X-Ray header Lambda sets for the invocation. Outside Lambda
    without OpenTelemetry there is nothing to read: pass ``trace=`` to ``enqueue``.
    """
    otel = _otel_traceparent()
    if otel:
        return otel
    raw = (os.environ if environ is None else environ).get(XRAY_ENV)
    ctx = parse(raw)
    return ctx.xray_header() if ctx is not None and ctx.source == "xray" else None


def message_attributes(trace: str | None) -> dict[str, Any]:
    """What to merge into a SendMessage(Batch) entry so the message carries the trace.

    X-Ray headers go in the ``AWSTraceHeader`` system attribute (SQS validates that one and X-Ray
    links through it); W3C context goes in a ``traceparent`` message attribute, as OpenTelemetry's
    SQS instrumentation does.
    """
    ctx = parse(trace)
    if ctx is None:
        return {}
    if ctx.source == "xray":
        return {
            "MessageSystemAttributes": {
                AWS_TRACE_HEADER: {"DataType": "String", "StringValue": ctx.xray_header()}
            }
        }
    return {"MessageAttributes": {TRACEPARENT: {"DataType": "String", "StringValue": ctx.traceparent()}}}


def _otel_traceparent() -> str | None:
    if "opentelemetry.trace" not in sys.modules:  # not set up by the application: not in use
        return None
    from opentelemetry import trace

    span_ctx = trace.get_current_span().get_span_context()
    if not span_ctx.is_valid:
        return None
    # Only the sampled flag is carried (W3C level 1); the worker's span decides the rest itself.
    return f"00-{span_ctx.trace_id:032x}-{span_ctx.span_id:016x}-{int(span_ctx.trace_flags) & 1:02x}"


# ── worker side ──────────────────────────────────────────────────────────────────────────────
@dataclass
class _Span:
    """What the running job's span learns before it ends (the execution's outcome)."""

    outcome: str = ""
    error: str = ""
    attributes: dict[str, Any] = field(default_factory=dict)
    otel: Any = None


_CURRENT: contextvars.ContextVar[_Span | None] = contextvars.ContextVar("sqsjobs_span", default=None)


def note(outcome: str = "", error: str = "", **attributes: Any) -> None:
    """Tell the current job span how the attempt ended (called with each transition)."""
    span = _CURRENT.get()
    if span is None:
        return
    if outcome:
        span.outcome = outcome
    if error:
        span.error = error
    span.attributes.update({k: v for k, v in attributes.items() if v is not None})
    if span.otel is not None:
        if outcome:
            span.otel.set_attribute("sqsjobs.outcome", outcome)
        if error:
            from opentelemetry.trace import Status, StatusCode

            span.otel.set_status(Status(StatusCode.ERROR, error))


class JobTracer:
    """Opens one span per job run, in the producer's trace, with whatever tracer the process has."""

    def __init__(self, service: str, environ: Mapping[str, str] | None = None) -> None:
        """Decide once which backends are live (the environment does not change under a worker)."""
        env = os.environ if environ is None else environ
        self.service = service
        self._xray: Any = None
        disabled = env.get(TRACE_DISABLED_ENV, "").strip().lower() in ("1", "true", "yes", "on")
        in_lambda = bool(env.get("LAMBDA_TASK_ROOT")) and not env.get("AWS_SAM_LOCAL")
        daemon = env.get(XRAY_DAEMON_ENV)
        if not disabled and (in_lambda or daemon) and importlib.util.find_spec("aws_xray_sdk") is not None:
            from aws_xray_sdk.core.emitters.udp_emitter import UDPEmitter

            self._xray = UDPEmitter(daemon) if daemon else UDPEmitter()

    @property
    def xray_enabled(self) -> bool:
        """True when job runs are sent to X-Ray as segments."""
        return self._xray is not None

    def close(self) -> None:
        """Close the X-Ray emitter's UDP socket, which would otherwise live until garbage collection.

        The SDK's emitter has no close(); its socket is the one resource it holds.
        """
        sock = getattr(self._xray, "_socket", None)
        if sock is not None:
            sock.close()
        self._xray = None

    @contextlib.contextmanager
    def span(self, job: Job) -> Iterator[None]:
        """Trace one attempt of ``job``; the outcome arrives through ``note``."""
        ctx = parse(job.trace)
        state = _Span()
        token = _CURRENT.set(state)
        started = time.time()
        try:
            with self._otel_span(job, ctx) as otel:
                state.otel = otel
                yield
        except BaseException as exc:
            state.error = state.error or f"{type(exc).__name__}: {exc}"
            raise
        finally:
            _CURRENT.reset(token)
            if self._xray is not None and ctx is not None and ctx.sampled is not False:
                self._send_segment(job, ctx, state, started, time.time())

    def _otel_span(self, job: Job, ctx: TraceContext | None) -> contextlib.AbstractContextManager[Any]:
        if "opentelemetry.trace" not in sys.modules:
            return contextlib.nullcontext()
        from opentelemetry import trace

        parent = None
        if ctx is not None and ctx.parent_id:
            remote = trace.SpanContext(
                trace_id=int(ctx.trace_id, 16),
                span_id=int(ctx.parent_id, 16),
                is_remote=True,
                trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED if ctx.sampled else 0),
            )
            parent = trace.set_span_in_context(trace.NonRecordingSpan(remote))
        return trace.get_tracer("sqsjobs").start_as_current_span(
            f"{job.type} process",
            context=parent,
            kind=trace.SpanKind.CONSUMER,
            attributes={
                "messaging.system": "aws_sqs",
                "messaging.operation": "process",
                "messaging.destination.name": job.queue,
                "sqsjobs.job.id": job.id,
                "sqsjobs.job.type": job.type,
                "sqsjobs.job.attempt": job.attempt,
                **({"sqsjobs.tenant": job.tenant} if job.tenant else {}),
            },
        )

    def _send_segment(self, job: Job, ctx: TraceContext, state: _Span, started: float, ended: float) -> None:
        """One X-Ray segment in the producer's trace, sent straight to the daemon.

        A free-standing segment rather than a subsegment of the recorder's current one: the
        worker runs many jobs on one thread, and the X-Ray SDK's default context is per thread,
        so nesting would attach jobs to each other.
        """
        from aws_xray_sdk.core.models.segment import Segment

        segment = Segment(self.service, traceid=ctx.xray_root, parent_id=ctx.parent_id or None, sampled=True)
        segment.start_time = started
        segment.origin = "AWS::SQS::Job"
        for key, value in (
            ("job_id", job.id),
            ("job_type", job.type),
            ("queue", job.queue),
            ("attempt", job.attempt),
            ("outcome", state.outcome or "unknown"),
            ("tenant", job.tenant),
        ):
            if value is not None:
                segment.put_annotation(key, value)
        if state.error:
            segment.add_error_flag()
            segment.put_metadata("error", state.error, "sqsjobs")
        segment.close(end_time=ended)
        with contextlib.suppress(Exception):  # tracing must never fail a job
            self._xray.send_entity(segment)
