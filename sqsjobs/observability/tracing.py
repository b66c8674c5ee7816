"""Trace context formats: what a message and a record carry so that a job's run continues its producer's trace.

A job is usually enqueued inside some request that is already traced, and the run that follows
belongs to that trace::

    producer (trace T, span P)
      └── send span S (sqsjobs.observability.spans)
            ├── SendMessage  message attribute ``traceparent`` = T/S (W3C, what OpenTelemetry extracts)
            │                system attribute ``AWSTraceHeader`` = T/S (X-Ray's own SQS → Lambda link)
            └── PutItem      record.trace = T/S   ← the sweeper's and a replay's re-sends carry it
    worker ── process span: parent S (or a link to S when the run starts long after the enqueue)

Two formats exist and both are accepted wherever a trace is read:

- X-Ray: ``Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1`` (Lambda sets
  it in ``_X_AMZN_TRACE_ID`` for each invocation; SQS carries it in the ``AWSTraceHeader`` system
  attribute, which is what links an SQS hop in X-Ray).
- W3C: ``00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-01`` (OpenTelemetry's ``traceparent``).

An X-Ray trace id is a valid W3C one, so a message carries both forms of one context. This module
only reads and writes headers; the spans themselves (``spans.py``) exist only when the process has
an OpenTelemetry SDK, and everything here works without one.
"""

from __future__ import annotations

import functools
import os
import re
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from collections.abc import Mapping

#: Lambda sets the invocation's X-Ray trace header in this variable.
XRAY_ENV = "_X_AMZN_TRACE_ID"
#: The SQS system attribute X-Ray reads to link a message to its producer's trace.
AWS_TRACE_HEADER = "AWSTraceHeader"
#: The message attribute (and record format) for W3C trace context (OpenTelemetry).
TRACEPARENT = "traceparent"
#: The W3C vendor state that travels beside ``traceparent`` when the producer's propagator sets one.
TRACESTATE = "tracestate"

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


def message_attributes(trace: str | None, carrier: Mapping[str, str] | None = None) -> dict[str, Any]:
    """What to merge into a SendMessage(Batch) entry so the message carries the trace, in both forms.

    ``traceparent`` (and whatever else the producer's propagator wrote into ``carrier``:
    ``tracestate``, ``baggage``) go in message attributes, where OpenTelemetry's propagators and
    SQS instrumentations look; the same context goes in the ``AWSTraceHeader`` system attribute,
    which SQS validates and X-Ray uses to link the message to the Lambda invocation it triggers.
    """
    ctx = parse(trace)
    if ctx is None:
        return {}
    # An X-Ray header without a parent (``Sampled=?`` from a Lambda that did not sample) has no W3C form.
    strings = {**({TRACEPARENT: ctx.traceparent()} if ctx.parent_id else {}), **(carrier or {})}
    attributes = {k: {"DataType": "String", "StringValue": v} for k, v in strings.items() if v}
    return {
        **({"MessageAttributes": attributes} if attributes else {}),
        "MessageSystemAttributes": {
            AWS_TRACE_HEADER: {"DataType": "String", "StringValue": ctx.xray_header()}
        },
    }


def delivered_trace(message_attributes: Mapping[str, Any], attributes: Mapping[str, Any]) -> str | None:
    """The trace a received message carries: its ``traceparent`` attribute, else its ``AWSTraceHeader``."""
    value = (message_attributes.get(TRACEPARENT) or {}).get("StringValue") or attributes.get(AWS_TRACE_HEADER)
    return value if isinstance(value, str) else None


def _otel_traceparent() -> str | None:
    if "opentelemetry.trace" not in sys.modules:  # not set up by the application: not in use
        return None
    from opentelemetry import trace

    span_ctx = trace.get_current_span().get_span_context()
    if not span_ctx.is_valid:
        return None
    # Only the sampled flag is carried (W3C level 1); the worker's span decides the rest itself.
    return f"00-{span_ctx.trace_id:032x}-{span_ctx.span_id:016x}-{int(span_ctx.trace_flags) & 1:02x}"
