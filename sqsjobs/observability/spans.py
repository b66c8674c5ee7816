"""OpenTelemetry spans for jobs: the producer's send, the worker's receive and process, sqsjobs' own AWS calls.

sqsjobs depends on the OpenTelemetry API only; the application chooses the SDK and the exporter
(ADOT, Application Signals, OTLP to X-Ray or any backend: docs/observability.md). Whether spans are
made is decided once, when the App builds its kernel: with no SDK's tracer provider installed by
then, ``app.telemetry.tracer`` is None and the worker's pipeline calls nothing here nor in OpenTelemetry.

One job's trace, in the messaging conventions' names (``messaging.operation.type``)::

    enqueue ── send <queue> (PRODUCER)          one message: its context goes in the message and the record
    enqueue_many ── send (CLIENT) ──links──▶ create <queue> (PRODUCER), one per message
    worker  ── receive <queue> (CLIENT, links to every message received)
            └─ process <queue> (CONSUMER), per delivery, from before the claim to the ``Ack``: child of the
               message's send/create span, linked to the receive (or to the Lambda invocation's span); a
               redelivery (a retry) or a run long after its enqueue (a job held for later) starts a
               trace of its own and links to its producer instead, so traces do not stay open for days
                 ├─ DynamoDB.UpdateItem (CLIENT): the claim, made at the I/O seam (``_aws.py``)
                 ├─ the handler's own spans (its boto3 calls, the child jobs it enqueues)
                 └─ DynamoDB.UpdateItem (CLIENT): the finish
               a write the worker batched with others' (``store/write_batcher.py``) is one
               DynamoDB.BatchExecuteStatement request, with a CLIENT span of it in each run it carries
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

from sqsjobs._aws import CARRIED_FOR
from sqsjobs.observability.tracing import delivered_trace, parse

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping, Sequence

    from sqsjobs._aws import Call
    from sqsjobs.delivery import Ack, Delivery
    from sqsjobs.envelope import Envelope
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


def carrier_of(message_attributes: Mapping[str, Any]) -> dict[str, str]:
    """A message's string attributes, as the carrier a propagator's ``extract`` reads."""
    return {
        name: value["StringValue"]
        for name, value in message_attributes.items()
        if isinstance(value, dict) and isinstance(value.get("StringValue"), str)
    }


def _producer_of(
    envelope: Envelope, delivery: Delivery
) -> tuple[otel_context.Context | None, trace.SpanContext | None]:
    """The producer's context as the application's propagator reads it from the message, and its span.

    ``propagate.extract`` with the global propagator (W3C trace context and baggage by default, or
    the application's own: B3, X-Ray, a vendor's), so ``tracestate`` and baggage arrive with the
    span. A message it finds no span in (a re-send from the record, an X-Ray-only producer) is
    given the span the record or ``AWSTraceHeader`` names, beside whatever else was extracted.
    """
    carrier = carrier_of(delivery.message_attributes)
    extracted = propagate.extract(carrier) if carrier else None
    if extracted is not None:
        span_ctx = trace.get_current_span(extracted).get_span_context()
        if span_ctx.is_valid:
            return extracted, span_ctx
    remote = _remote(delivered_trace(delivery.message_attributes, delivery.attributes) or envelope.trace)
    if remote is None:
        return extracted, None
    return trace.set_span_in_context(trace.NonRecordingSpan(remote), extracted), remote


class ProducerSpans(Generic[J]):
    """The spans of one enqueue: ``send`` for one message, ``create`` per message plus one ``send`` for several.

    ``jobs`` are the jobs with their ``trace`` set to their own span, so the message, the record
    and every later re-send (the sweeper's, a replay's) carry it; ``carrier`` is what the global
    propagator injected for each (``traceparent``, ``tracestate``, ``baggage``).
    """

    def __init__(self, tracer: trace.Tracer, jobs: Sequence[J], destination: Callable[[J], str]) -> None:
        import dataclasses

        self._tracer = tracer
        self._send: trace.Span | None = None
        self.spans: dict[str, trace.Span] = {}
        self.carriers: dict[str, dict[str, str]] = {}
        single = len(jobs) == 1
        traced = []
        for job in jobs:
            operation = "send" if single else "create"
            queue = destination(job)
            span = tracer.start_span(
                f"{operation} {queue}",
                context=_parent_of(job.trace),
                kind=SpanKind.PRODUCER,
                attributes={
                    "messaging.system": SYSTEM,
                    "messaging.operation.type": operation,
                    "messaging.operation.name": operation,
                    "messaging.destination.name": queue,
                    "sqsjobs.queue": job.queue,
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


class ProcessSpan:
    """The ``process`` span of one delivery, current from before its claim until its ``Ack`` is decided.

    It learns the claimed job (``note`` with the ``job claimed`` line: attempt, tenant) and how the
    attempt ended (``note`` with the outcome's line, and the exception that ended it); ``acked``
    gives the outcome of a delivery that ran nothing (a refused claim, a deferral).
    """

    __slots__ = ("outcome", "span")

    def __init__(self, span: trace.Span) -> None:
        self.span = span
        self.outcome = ""

    def acked(self, ack: Ack) -> Ack:
        """Record what the message is worth, and an outcome when no transition named one; returns ``ack``."""
        self.span.set_attribute("sqsjobs.message.ack", ack.kind)
        if not self.outcome:
            self.outcome = NOT_RUN.get(ack.kind, ack.kind)
            self.span.set_attribute("sqsjobs.job.outcome", self.outcome)
        return ack


#: The outcome of a delivery whose job did not run, by the ``Ack`` it ended with: a copy of a finished
#: job or an expired one is dropped, a job not due or held by a limit deferred, one whose record could
#: not be read left for redelivery, a message without a job (or an unknown type) rejected to the DLQ.
NOT_RUN = {
    "delete": "dropped",
    "rearm": "deferred",
    "resend": "deferred",
    "leave": "left",
    "release": "released",
    "dead_letter": "rejected",
}

_CURRENT: contextvars.ContextVar[ProcessSpan | None] = contextvars.ContextVar("sqsjobs_span", default=None)


def note(
    outcome: str = "",
    error: str = "",
    error_type: str = "",
    *,
    job: Job | None = None,
    exception: BaseException | None = None,
) -> None:
    """Tell the current process span what a logged transition says (the claim's job, the attempt's end).

    A failed attempt's ``exception`` is recorded as the conventions ask (an ``exception`` event with
    ``exception.type``, ``.message``, ``.stacktrace``) and the span's status is ERROR with the
    error's class and message; without the exception object (a job dead without a run), its class
    and message from the log line.
    """
    state = _CURRENT.get()
    if state is None:
        return
    span = state.span
    if job is not None:
        span.set_attribute("sqsjobs.job.attempt", job.attempt)
        if job.tenant:
            span.set_attribute("sqsjobs.tenant", job.tenant)
    if not outcome or outcome == "started":
        return
    state.outcome = outcome
    span.set_attribute("sqsjobs.job.outcome", outcome)
    if outcome not in FAILED_OUTCOMES:
        return
    if exception is not None:
        span.record_exception(exception)
        span.set_status(Status(StatusCode.ERROR, f"{type(exception).__name__}: {exception}"))
    elif error:
        span.add_event("exception", {"exception.type": error_type or "Exception", "exception.message": error})
        span.set_status(Status(StatusCode.ERROR, error))


def _carried_runs(current: trace.Span) -> list[trace.Span]:
    """The process spans of the other runs whose writes the call being made carries (``CARRIED_FOR``)."""
    spans: list[trace.Span] = []
    for context in CARRIED_FOR.get():
        state = context.get(_CURRENT)
        if state is not None and state.span is not current and state.span not in spans:
            spans.append(state.span)
    return spans


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
    def producer(self, jobs: Sequence[J], destination: Callable[[J], str]) -> ProducerSpans[J]:
        """Open the spans of one enqueue (children of the caller's current span).

        ``destination``: the SQS queue a job's message goes to (the conventions' destination name;
        the App's logical queue is ``sqsjobs.queue``).
        """
        return ProducerSpans(self.tracer, jobs, destination)

    # ── sqsjobs' own AWS calls ──────────────────────────────────────────────────────────────
    def call_started(self, call: Call, api_name: str, region: str | None) -> Any:
        """A CLIENT span for ``call``, or None outside a trace (the worker's polling and batching stay out).

        A ReceiveMessage gets no span yet: only one that brings messages becomes a ``receive`` span
        (``call_ended``), so idle long polls make none.
        """
        if call.operation == "receive_message":
            return ("receive", time.time_ns(), call)
        current = trace.get_current_span()
        carried = _carried_runs(current)
        if not current.get_span_context().is_valid and not carried:
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
        if "Statements" in call.params:
            attributes["db.operation.batch.size"] = len(call.params["Statements"])
        name = f"{service}.{api_name}"
        if not carried:
            return self.tracer.start_span(name, kind=SpanKind.CLIENT, attributes=attributes)
        # one request carrying several runs' writes: a span of it in each run's trace
        parents = [current] if current.get_span_context().is_valid else []
        return [
            self.tracer.start_span(
                name, context=trace.set_span_in_context(parent), kind=SpanKind.CLIENT, attributes=attributes
            )
            for parent in parents + carried
        ]

    def call_ended(
        self, handle: Any, response: Mapping[str, Any] | None, error: BaseException | None
    ) -> None:
        """End the span ``call_started`` gave (a ReceiveMessage's is made now, if it brought messages)."""
        if isinstance(handle, tuple):
            if response:
                self._received_span(handle[1], handle[2], response)
            return
        meta = (response or {}).get("ResponseMetadata") or {}
        for span in handle if isinstance(handle, list) else [handle]:
            if meta.get("RequestId"):
                span.set_attribute("aws.request_id", meta["RequestId"])
            if error is not None:
                span.record_exception(error)
                span.set_status(Status(StatusCode.ERROR, str(error)))
            span.end()

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

    # ── worker: one span per delivery ──────────────────────────────────────────────────────
    @contextlib.contextmanager
    def process(self, envelope: Envelope, delivery: Delivery) -> Iterator[ProcessSpan]:
        """Trace one delivery of a job as its ``process`` span, current from before the claim to the ``Ack``.

        Opened from the message alone, so the claim's DynamoDB call is its child. Parent: the
        producer's span the message (or the envelope) names, unless the message was delivered
        before (``ApproximateReceiveCount`` > 1: a retry re-arms its message) or the run starts long
        after the enqueue (``LINK_AFTER_S``): then a trace of its own, linked to the producer.
        Linked to the receive that brought the message, or to the span current here (the Lambda
        invocation's).
        """
        extracted, producer = _producer_of(envelope, delivery)
        links: list[Link] = []
        with self._lock:
            received = self._received.pop(delivery.message_id, None)
        current = trace.get_current_span().get_span_context()
        if received is not None:
            links.append(Link(received))
        elif current.is_valid:
            links.append(Link(current))
        created = envelope.created_at
        late = delivery.receive_count > 1 or (created is not None and time.time() - created > LINK_AFTER_S)
        parent: otel_context.Context | None = None  # none: the current span's child (a Lambda invocation's)
        if producer is not None and not late:
            parent = extracted
        elif producer is not None:
            links.append(Link(producer, {"sqsjobs.link": "producer"}))
            # a trace of its own, keeping what else the producer's propagator carried (baggage)
            parent = trace.set_span_in_context(trace.INVALID_SPAN, extracted or otel_context.Context())
        queue = delivery.queue_url.rsplit("/", 1)[-1] or envelope.queue or delivery.queue  # SQS's name
        attributes: dict[str, Any] = {
            "messaging.system": SYSTEM,
            "messaging.operation.type": "process",
            "messaging.operation.name": "process",
            "messaging.destination.name": queue,
            "sqsjobs.queue": envelope.queue or delivery.queue,
            "messaging.message.id": delivery.message_id,
            "sqsjobs.message.receive_count": delivery.receive_count,
            "sqsjobs.app": self.service,
            "sqsjobs.job.id": envelope.job_id,
            "sqsjobs.job.type": envelope.job_type,
        }
        if envelope.tenant:
            attributes["sqsjobs.tenant"] = envelope.tenant
        # The producer's context is made current around the span, not only its parent: the span
        # becomes current in whatever context is current, and the run must see the baggage too.
        carried = otel_context.attach(parent) if parent is not None else None
        try:
            with self.tracer.start_as_current_span(
                f"process {queue}",
                context=parent,
                kind=SpanKind.CONSUMER,
                links=links,
                attributes=attributes,
            ) as span:
                state = ProcessSpan(span)
                token = _CURRENT.set(state)
                try:
                    yield state
                except (
                    BaseException
                ):  # the host logs it and leaves the message; the span records it as it ends
                    if not state.outcome:
                        span.set_attribute("sqsjobs.job.outcome", "error")
                    raise
                finally:
                    _CURRENT.reset(token)
        finally:
            if carried is not None:
                otel_context.detach(carried)

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

    Installed on the App's logger only when spans are made (``app.telemetry.tracer``); a line logged inside a
    job's ``process`` span names that span, so a log search and a trace lead to each other.
    """

    def filter(self, record: Any) -> bool:
        """Add the ids (the trace id as the trace backend shows it, 32 hex digits)."""
        span_ctx = trace.get_current_span().get_span_context()
        if span_ctx.is_valid:
            record.trace_id = f"{span_ctx.trace_id:032x}"
            record.span_id = f"{span_ctx.span_id:016x}"
        return True


def tracer_for(name: str, logger_of: Callable[[], Any]) -> JobTracer | None:
    """The App's tracer when an SDK is configured, else None (then nothing calls into OpenTelemetry).

    With one, the App's log lines carry the trace and span ids. ``logger_of`` makes the App's
    logger only then: a thin producer without an SDK never loads Powertools.
    """
    if not sdk_configured():
        return None
    logger = logger_of()
    if not any(isinstance(f, LogCorrelation) for f in logger.filters):
        logger.addFilter(LogCorrelation())
    return JobTracer(name)
