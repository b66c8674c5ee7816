"""OpenTelemetry spans for jobs: the producer's send, the worker's receive and process, sqsjobs' own AWS calls.

sqsjobs depends on the OpenTelemetry API only; the application chooses the SDK and the exporter
(ADOT, Application Signals, OTLP to X-Ray or any backend: docs/observability.md). Whether spans are
made is decided once, when the App builds its kernel: with no SDK's tracer provider installed by
then, ``App.tracer`` is None and the worker's pipeline calls nothing here nor in OpenTelemetry.

One job's trace, in the messaging conventions' names (``messaging.operation.type``)::

    enqueue ── send <queue> (PRODUCER)          one message: its context goes in the message and the record
    enqueue_many ── send (CLIENT) ──links──▶ create <queue> (PRODUCER), one per message
    worker  ── receive <queue> (CLIENT, links to every message received)
            └─ process <queue> (CONSUMER): child of the message's send/create span, linked to the receive
               (or to the Lambda invocation's span); a run long after its enqueue — a retry, a job held
               for later — starts a trace of its own and links to its producer instead, so traces do
               not stay open for days
                 ├─ the handler's own spans (its boto3 calls, the child jobs it enqueues)
                 └─ DynamoDB.UpdateItem (CLIENT): sqsjobs' writes, made at the I/O seam (``_aws.py``)
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import os
import threading
import time
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from sqsjobs.observability.tracing import delivered_trace, parse

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping, Sequence

    from sqsjobs._aws import Call
    from sqsjobs.delivery import Delivery
    from sqsjobs.job import Job

#: The instrumentation scope of every span sqsjobs makes.
SCOPE = "sqsjobs"
#: ``messaging.system`` of SQS in the messaging conventions.
SYSTEM = "aws_sqs"
#: A run that starts this long after its enqueue (or a retry) links to its producer instead of being its
#: child: SQS delays a message at most 15 minutes, so a later start is a held or retried job.
LINK_AFTER_S = 900.0
#: Receive spans remembered by message id until the message's run starts (its ``process`` span links them).
RECEIVED_MEMORY = 4096
#: AWS's names of the services sqsjobs calls (``rpc.service``), by boto3 client name.
RPC_SERVICES = {"dynamodb": "DynamoDB", "sqs": "SQS", "s3": "S3", "scheduler": "Scheduler"}
#: Outcomes that end an attempt in failure: the process span's status is ERROR.
FAILED_OUTCOMES = frozenset({"failed", "retry", "dead", "timeout", "expired"})


class Enqueued(Protocol):
    """What a producer span reads of a job being enqueued (``store.enqueue.NewJob``, a frozen dataclass)."""

    @property
    def id(self) -> str:
        """The job's id."""
        ...

    @property
    def type(self) -> str:
        """The job's type."""
        ...

    @property
    def queue(self) -> str:
        """The job's queue."""
        ...

    @property
    def trace(self) -> str | None:
        """The trace the caller is in (the span's parent)."""
        ...


J = TypeVar("J", bound=Enqueued)


def sdk_configured() -> bool:
    """True when the application installed an OpenTelemetry SDK's tracer provider (and did not disable it)."""
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    provider = trace.get_tracer_provider()
    return not isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider))


def _remote(header: str | None) -> trace.SpanContext | None:
    ctx = parse(header)
    if ctx is None or not ctx.parent_id:
        return None
    return trace.SpanContext(
        trace_id=int(ctx.trace_id, 16),
        span_id=int(ctx.parent_id, 16),
        is_remote=True,
        trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED if ctx.sampled else trace.TraceFlags.DEFAULT),
    )


def _parent_of(header: str | None) -> otel_context.Context | None:
    """The context a producer span starts in: the current one, unless the job names another trace.

    A job's ``trace`` is the current span's unless the caller passed ``trace=``, or the caller is a
    Lambda invocation traced by X-Ray alone (``_X_AMZN_TRACE_ID``): then that trace is the parent.
    """
    remote = _remote(header)
    if remote is None:
        return None
    current = trace.get_current_span().get_span_context()
    if current.is_valid and (current.trace_id, current.span_id) == (remote.trace_id, remote.span_id):
        return None
    return trace.set_span_in_context(trace.NonRecordingSpan(remote))


def traceparent_of(span_ctx: trace.SpanContext) -> str:
    """The W3C header of ``span_ctx`` (what the record keeps)."""
    return f"00-{span_ctx.trace_id:032x}-{span_ctx.span_id:016x}-{int(span_ctx.trace_flags):02x}"


class ProducerSpans(Generic[J]):
    """The spans of one enqueue: ``send`` for one message, ``create`` per message plus one ``send`` for several.

    ``jobs`` are the jobs with their ``trace`` set to their own span, so the message, the record
    and every later re-send (the sweeper's, a replay's) carry it; ``carrier`` is what the global
    propagator injected for each (``traceparent``, ``tracestate``, ``baggage``).
    """

    def __init__(self, tracer: trace.Tracer, jobs: Sequence[J]) -> None:
        import dataclasses

        self._tracer = tracer
        self._send: trace.Span | None = None
        self.spans: dict[str, trace.Span] = {}
        self.carriers: dict[str, dict[str, str]] = {}
        single = len(jobs) == 1
        traced = []
        for job in jobs:
            operation = "send" if single else "create"
            span = tracer.start_span(
                f"{operation} {job.queue}",
                context=_parent_of(job.trace),
                kind=SpanKind.PRODUCER,
                attributes={
                    "messaging.system": SYSTEM,
                    "messaging.operation.type": operation,
                    "messaging.operation.name": operation,
                    "messaging.destination.name": job.queue,
                    "sqsjobs.job.id": job.id,
                    "sqsjobs.job.type": job.type,
                },
            )
            carrier: dict[str, str] = {}
            propagate.inject(carrier, context=trace.set_span_in_context(span))
            self.spans[job.id], self.carriers[job.id] = span, carrier
            header = carrier.get("traceparent") or traceparent_of(span.get_span_context())
            traced.append(dataclasses.replace(job, trace=header))  # type: ignore[type-var]
        self.jobs: list[J] = traced
        if not single and jobs:
            self._send = tracer.start_span(
                "send",
                kind=SpanKind.CLIENT,
                links=[Link(s.get_span_context()) for s in self.spans.values()],
                attributes={
                    "messaging.system": SYSTEM,
                    "messaging.operation.type": "send",
                    "messaging.operation.name": "send",
                    "messaging.batch.message_count": len(jobs),
                },
            )

    def sent(self, job_id: str, message_id: str) -> None:
        """SQS accepted the message of ``job_id`` as ``message_id``."""
        span = self.spans.get(job_id)
        if span is not None:
            span.set_attribute("messaging.message.id", message_id)

    def end(self, error: BaseException | None = None) -> None:
        """End every span; ``error`` (the enqueue raised it) is recorded on them."""
        for span in [*self.spans.values(), *([self._send] if self._send else [])]:
            if error is not None:
                span.record_exception(error)
                span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
            span.end()


class _ProcessState:
    """What the running job's span learns before it ends (the attempt's outcome)."""

    __slots__ = ("span",)

    def __init__(self, span: trace.Span) -> None:
        self.span = span


_CURRENT: contextvars.ContextVar[_ProcessState | None] = contextvars.ContextVar("sqsjobs_span", default=None)


def note(outcome: str = "", error: str = "", error_type: str = "", traceback: str = "") -> None:
    """Tell the current process span how the attempt ended (called with each logged transition)."""
    state = _CURRENT.get()
    if state is None:
        return
    span = state.span
    if outcome:
        span.set_attribute("sqsjobs.job.outcome", outcome)
    if error and outcome in FAILED_OUTCOMES:
        span.add_event(
            "exception",
            {
                "exception.type": error_type or "Exception",
                "exception.message": error,
                **({"exception.stacktrace": traceback} if traceback else {}),
            },
        )
        span.set_status(Status(StatusCode.ERROR, error))


class JobTracer:
    """Makes sqsjobs' spans with the process's tracer provider (built only when an SDK is configured)."""

    def __init__(self, service: str) -> None:
        """``service``: the App's name, recorded as ``sqsjobs.app`` on each job's spans."""
        from importlib.metadata import PackageNotFoundError, version

        try:
            own_version: str | None = version("sqsjobs")
        except PackageNotFoundError:  # a vendored copy without metadata
            own_version = None
        self.service = service
        self.tracer = trace.get_tracer(SCOPE, own_version)
        self._received: collections.OrderedDict[str, trace.SpanContext] = collections.OrderedDict()
        self._lock = threading.Lock()

    # ── producer ────────────────────────────────────────────────────────────────────────────
    def producer(self, jobs: Sequence[J]) -> ProducerSpans[J]:
        """Open the spans of one enqueue (children of the caller's current span)."""
        return ProducerSpans(self.tracer, jobs)

    # ── sqsjobs' own AWS calls ──────────────────────────────────────────────────────────────
    def call_started(self, call: Call, api_name: str, region: str | None) -> Any:
        """A CLIENT span for ``call``, or None outside a trace (the worker's polling and batching stay out).

        A ReceiveMessage gets no span yet: only one that brings messages becomes a ``receive`` span
        (``call_ended``), so idle long polls make none.
        """
        if call.operation == "receive_message":
            return ("receive", time.time_ns(), call)
        if not trace.get_current_span().get_span_context().is_valid:
            return None
        service = RPC_SERVICES.get(call.service, call.service)
        attributes: dict[str, Any] = {
            "rpc.system": "aws-api",
            "rpc.service": service,
            "rpc.method": api_name,
            "cloud.provider": "aws",
        }
        if region:
            attributes["cloud.region"] = attributes["aws.region"] = region
        table = call.params.get("TableName")
        if call.service == "dynamodb":
            attributes["db.system.name"] = "aws.dynamodb"
            if table:
                attributes["aws.dynamodb.table_names"] = [table]
        elif call.service == "sqs" and "QueueUrl" in call.params:
            attributes["messaging.system"] = SYSTEM
            attributes["messaging.destination.name"] = str(call.params["QueueUrl"]).rsplit("/", 1)[-1]
        return self.tracer.start_span(f"{service}.{api_name}", kind=SpanKind.CLIENT, attributes=attributes)

    def call_ended(
        self, handle: Any, response: Mapping[str, Any] | None, error: BaseException | None
    ) -> None:
        """End the span ``call_started`` gave (a ReceiveMessage's is made now, if it brought messages)."""
        if isinstance(handle, tuple):
            if response:
                self._received_span(handle[1], handle[2], response)
            return
        meta = (response or {}).get("ResponseMetadata") or {}
        if meta.get("RequestId"):
            handle.set_attribute("aws.request_id", meta["RequestId"])
        if error is not None:
            handle.record_exception(error)
            handle.set_status(Status(StatusCode.ERROR, str(error)))
        handle.end()

    def _received_span(self, started_ns: int, call: Call, response: Mapping[str, Any]) -> None:
        messages = response.get("Messages") or []
        if not messages:
            return
        queue = str(call.params.get("QueueUrl", "")).rsplit("/", 1)[-1]
        links = []
        for m in messages:
            producer = _remote(delivered_trace(m.get("MessageAttributes") or {}, m.get("Attributes") or {}))
            if producer is not None:
                links.append(Link(producer, {"messaging.message.id": m.get("MessageId", "")}))
        span = self.tracer.start_span(
            f"receive {queue}",
            context=otel_context.Context(),  # a root: a receive belongs to no job's trace
            kind=SpanKind.CLIENT,
            links=links,
            start_time=started_ns,
            attributes={
                "messaging.system": SYSTEM,
                "messaging.operation.type": "receive",
                "messaging.operation.name": "receive",
                "messaging.destination.name": queue,
                "messaging.batch.message_count": len(messages),
            },
        )
        span.end()
        with self._lock:
            for m in messages:
                self._received[m.get("MessageId", "")] = span.get_span_context()
            while len(self._received) > RECEIVED_MEMORY:
                self._received.popitem(last=False)

    # ── worker: one span per attempt ───────────────────────────────────────────────────────
    @contextlib.contextmanager
    def span(self, job: Job, delivery: Delivery | None = None) -> Iterator[None]:
        """Trace one attempt of ``job`` as its ``process`` span, current while the attempt runs.

        Parent: the producer's span the message (or the record) names, unless the run starts long
        after the enqueue (``LINK_AFTER_S``) or is a retry: then a trace of its own, linked to the
        producer. Linked to the receive that brought the message, or to the span current here (the
        Lambda invocation's).
        """
        header = job.trace
        if delivery is not None:
            header = delivered_trace(delivery.message_attributes, delivery.attributes) or header
        producer = _remote(header)
        links: list[Link] = []
        received = None
        if delivery is not None:
            with self._lock:
                received = self._received.pop(delivery.message_id, None)
        current = trace.get_current_span().get_span_context()
        if received is not None:
            links.append(Link(received))
        elif current.is_valid:
            links.append(Link(current))
        late = job.attempt > 1 or (time.time() - job.created_at.timestamp()) > LINK_AFTER_S
        parent: otel_context.Context | None = None  # none: the current span's child (a Lambda invocation's)
        if producer is not None and not late:
            parent = trace.set_span_in_context(trace.NonRecordingSpan(producer))
        elif producer is not None:
            links.append(Link(producer, {"sqsjobs.link": "producer"}))
            parent = otel_context.Context()
        queue = job.queue  # the App's name for it, as the send span has it (the receive's is SQS's)
        attributes: dict[str, Any] = {
            "messaging.system": SYSTEM,
            "messaging.operation.type": "process",
            "messaging.operation.name": "process",
            "messaging.destination.name": queue,
            "sqsjobs.app": self.service,
            "sqsjobs.job.id": job.id,
            "sqsjobs.job.type": job.type,
            "sqsjobs.job.attempt": job.attempt,
        }
        if delivery is not None:
            attributes["messaging.message.id"] = delivery.message_id
        if job.tenant:
            attributes["sqsjobs.tenant"] = job.tenant
        with self.tracer.start_as_current_span(
            f"process {queue}",
            context=parent,
            kind=SpanKind.CONSUMER,
            links=links,
            attributes=attributes,
        ) as span:
            token = _CURRENT.set(_ProcessState(span))
            try:
                yield
            finally:
                _CURRENT.reset(token)

    # ── Lambda: one span per invocation ────────────────────────────────────────────────────
    @contextlib.contextmanager
    def invocation(
        self, context: Any, records: Sequence[tuple[str, str | None]], *, cold_start: bool
    ) -> Iterator[None]:
        """The invocation's span, current while the batch runs; none when a Lambda wrapper (ADOT) made one.

        ``records``: (message id, trace header) of each record, linked from the span.
        """
        if trace.get_current_span().get_span_context().is_valid:
            yield
            return
        links = [
            Link(p, {"messaging.message.id": mid}) for mid, h in records if (p := _remote(h)) is not None
        ]
        name = (
            getattr(context, "function_name", None) or os.environ.get("AWS_LAMBDA_FUNCTION_NAME") or "sqsjobs"
        )
        attributes: dict[str, Any] = {
            "faas.trigger": "pubsub",
            "faas.coldstart": cold_start,
            "faas.name": name,
            "cloud.provider": "aws",
            "messaging.system": SYSTEM,
            "messaging.batch.message_count": len(records),
        }
        if request_id := getattr(context, "aws_request_id", None):
            attributes["faas.invocation_id"] = request_id
        if arn := getattr(context, "invoked_function_arn", None):
            attributes["cloud.resource_id"] = arn
        if region := os.environ.get("AWS_REGION"):
            attributes["cloud.region"] = region
        with self.tracer.start_as_current_span(
            name, context=otel_context.Context(), kind=SpanKind.CONSUMER, links=links, attributes=attributes
        ):
            yield


class LogCorrelation:
    """A logging filter that puts the current span's ``trace_id`` and ``span_id`` on each line.

    Installed on the App's logger only when spans are made (``App.tracer``); a line logged inside a
    job's ``process`` span names that span, so a log search and a trace lead to each other.
    """

    def filter(self, record: Any) -> bool:
        """Add the ids (the trace id as the trace backend shows it, 32 hex digits)."""
        span_ctx = trace.get_current_span().get_span_context()
        if span_ctx.is_valid:
            record.trace_id = f"{span_ctx.trace_id:032x}"
            record.span_id = f"{span_ctx.span_id:016x}"
        return True
