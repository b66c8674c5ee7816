"""Producer operations, each one sans-I/O flow that the App runs with boto3 or aiobotocore.

Enqueue sends the message first (it carries the job, payload included), then writes the record
with one conditional PutItem. A crash between the two loses nothing: the claim creates the record
from the message. With ``Settings.enqueue_together`` the two leave at once (one round trip of
latency), at the price of one window: a producer killed after its put landed and before SQS took
the message leaves a record no message brings. A message SQS refused is kept in the record for the
sweeper. Repeating the enqueue with the same idempotency key sends the message again (the claim
decides) and finds the record already there.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypedDict

from sqsjobs._aws import Call, Flow, together
from sqsjobs.config import to_seconds
from sqsjobs.context import RUNNING_TAGS
from sqsjobs.envelope import DEEP_PAYLOAD, payload_depth_error
from sqsjobs.errors import (
    DedupeInvalid,
    NotifyInvalid,
    PayloadInvalid,
    PayloadTooLarge,
    StoreError,
    TransportError,
)
from sqsjobs.job import Notify
from sqsjobs.observability.tracing import current_trace, message_attributes
from sqsjobs.options import DEDUPE_MODES, KeyPolicy, P
from sqsjobs.store import deadlines, enqueue, sealing, statements, tags, transact
from sqsjobs.store.apply import Refused, apply, apply_batched
from sqsjobs.store.codec import idempotent_job_id
from sqsjobs.store.enqueue import KeyEnv, KeySettler
from sqsjobs.transport import lifespan, objects, routes, sqs

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence
    from datetime import datetime, timedelta

    from sqsjobs._clock import Clock
    from sqsjobs.config import Settings
    from sqsjobs.job import Job
    from sqsjobs.observability.metrics import JobMetrics
    from sqsjobs.observability.spans import JobTracer, ProducerSpans
    from sqsjobs.observability.telemetry import Telemetry
    from sqsjobs.registry import HandlerOf, HandlerSpec, Registry
    from sqsjobs.store.write import Put
    from sqsjobs.transport.queues import QueueUrls


@dataclass(frozen=True)
class JobRequest(Generic[P]):
    """One job to enqueue (``App.enqueue_many`` takes a list of these or of dicts with these keys).

    ``type`` is the job type's name or its handler; with the handler, mypy checks ``payload``
    against the handler's annotation (``None`` always passes: it is the default).
    """

    #: The registered name, or the handler itself (``HandlerNotFound`` if the App does not have it).
    type: str | HandlerOf[P]
    #: Validated against the handler's annotation, then stored as JSON.
    payload: P | None = None
    #: The job's identity: the same key and payload return the same job (``IdempotencyConflict``
    #: for another payload).
    idempotency_key: str | None = None
    #: Run no sooner than this from now.
    delay: timedelta | float | None = None
    #: Run no sooner than this instant (timezone-aware).
    run_at: datetime | None = None
    #: Override the handler's queue (needed for a type this App does not register).
    queue: str | None = None
    #: Recorded, part of the idempotency identity, and the key of a partitioned limit.
    tenant: str | None = None
    #: The job that enqueued this one.
    parent_id: str | None = None
    #: The producer's trace header; default: the current trace, if any.
    trace: str | None = None
    #: Not started this long after the enqueue, the job expires and never runs (wins over the type's).
    expires_after: timedelta | float | None = None
    #: ``"high"`` | ``"normal"`` | ``"low"``; default: the type's (``@app.job(priority=...)``), else normal.
    priority: str | None = None
    #: Jobs with one key run one at a time, in enqueue order (``serialized_queues``).
    serialize_key: str | None = None
    #: How long ``idempotency_key`` names one job: ``DedupeFor``, ``Throttle``, ``WhileActive`` or
    #: ``Debounce`` (default: the type's ``@app.job(dedupe=)``). See docs/dedupe.md.
    dedupe: KeyPolicy | None = None
    #: Where the job's end is told: ``Notify(url=, secret=)`` (a signed webhook), ``Notify(queue=)``
    #: or ``Notify(bus=)``, or that as a dict. See docs/http-workers.md, "Hearing back".
    notify: Notify | Mapping[str, str] | None = None
    #: What the job is about, e.g. ``{"customer": "42", "order": "o-9"}``: kept on the record, and
    #: each findable (``sqsjobs jobs list --tag customer=42``); see ``sqsjobs.store.tags``.
    tags: Mapping[str, str] | None = None


class EnqueueOptions(TypedDict, total=False):
    """The keyword options of ``App.enqueue``/``aenqueue``, typed once; each is documented on ``JobRequest``."""

    idempotency_key: str | None
    delay: timedelta | float | None
    run_at: datetime | None
    queue: str | None
    tenant: str | None
    parent_id: str | None
    trace: str | None
    expires_after: timedelta | float | None
    priority: str | None
    serialize_key: str | None
    dedupe: KeyPolicy | None
    notify: Notify | Mapping[str, str] | None
    tags: Mapping[str, str] | None


def requests_of(items: Iterable[JobRequest[Any] | Mapping[str, Any]]) -> list[JobRequest[Any]]:
    """``enqueue_many``'s items as requests: each a ``JobRequest`` or a mapping of its fields."""
    return [i if isinstance(i, JobRequest) else JobRequest(**i) for i in items]


def build_new_job(
    request: JobRequest[Any],
    *,
    registry: Registry,
    settings: Settings,
    now: float,
    in_record: bool = False,
    window_at: float | None = None,
) -> enqueue.NewJob:
    """Validate a request against its handler and turn it into the record to write.

    ``in_record``: the record keeps the payload until the message is sent (a transactional enqueue),
    so the record's limit for a payload applies (``held_inline_payload_bytes``) rather than the message's.
    ``window_at``: the instant a window mode (``dedupe_for``, ``throttle``) slots the job by, when it
    is not ``now`` — a foreign message's send time, so every delivery of it lands in one window.
    """
    job_type = registry.name_of(request.type)
    spec = registry.get(job_type) if request.queue is None or job_type in registry else None
    payload = spec.dump(request.payload) if spec else request.payload
    if request.run_at is not None:
        run_at = request.run_at.timestamp()
    else:
        run_at = now + (to_seconds(request.delay) if request.delay is not None else 0.0)
    mode = _dedupe_of(request, spec)
    if mode is not None and not request.idempotency_key:
        raise ValueError(f"{job_type!r}: a dedup mode ({mode.mode}) needs an idempotency_key")
    if not request.idempotency_key:
        job_id = uuid.uuid4().hex
    elif mode is None:
        job_id = idempotent_job_id(job_type, request.idempotency_key, request.tenant)
    else:
        at = now if window_at is None else window_at
        job_id = mode.job_id(job_type, request.idempotency_key, request.tenant, at)
    queue = request.queue or (spec.queue if spec else "default")
    priority = routes.check(
        settings, queue, request.priority or (spec.priority if spec else None), request.serialize_key
    )
    job = enqueue.NewJob(
        id=job_id,
        type=job_type,
        queue=queue,
        priority=priority,
        serialize_key=request.serialize_key,
        payload=payload,
        payload_version=spec.version if spec else 1,
        # Without the handler this producer cannot know the type's policy: the claim resolves it.
        max_attempts=spec.max_attempts if spec else None,
        run_at=run_at,
        now=now,
        held=run_at - now > lifespan.delay_cap_s(settings),
        idempotency_key=request.idempotency_key,
        tenant=request.tenant,
        parent_id=request.parent_id,
        root_id=None,
        # The record keeps the producer's trace so the run can continue it (sqsjobs.observability.tracing).
        trace=request.trace or current_trace(),
        # A producer without the handler writes only an enqueue's own: the worker applies the type's.
        start_by=deadlines.start_by(
            job_type=job_type,
            now=now,
            run_at=run_at,
            expires_after_s=to_seconds(request.expires_after)
            if request.expires_after is not None
            else spec.expires_after_s
            if spec
            else None,
        ),
        notify=notify_target(request.notify),
        policy=mode,
        # A job enqueued by a running handler inherits that job's tags (its own win).
        tags=tags.checked(tags.inherited(RUNNING_TAGS.get(), request.tags)),
        encrypt=sealing.key_of(spec, settings),  # sealed by the enqueue's flow (a KMS data key)
    )
    return _claim_checked(job, settings, in_record=in_record or job.held)


def notify_target(value: Notify | Mapping[str, str] | None) -> Notify | None:
    """A job's, chain's or batch's notify target; ``NotifyInvalid`` says what is wrong with one."""
    if value is None:
        return None
    try:
        return Notify.of(dict(value) if isinstance(value, Mapping) else value)
    except (TypeError, ValueError) as exc:
        raise NotifyInvalid(str(exc), field="notify") from None


def _dedupe_of(request: JobRequest[Any], spec: HandlerSpec | None) -> KeyPolicy | None:
    """The request's dedup mode, else its type's (``@app.job(dedupe=)``)."""
    if request.dedupe is not None and not isinstance(request.dedupe, KeyPolicy):
        raise DedupeInvalid(f"dedupe={request.dedupe!r}: {DEDUPE_MODES}", field="dedupe")
    return request.dedupe if request.dedupe is not None else spec.dedupe if spec is not None else None


def _claim_checked(job: enqueue.NewJob, settings: Settings, *, in_record: bool) -> enqueue.NewJob:
    """``job``, with its payload moved to S3 when the message or the record would carry too much.

    The message carries up to ``inline_payload_bytes``; a record that keeps the payload (a held or a
    transactional job's: billed per KB at each of its writes) up to ``held_inline_payload_bytes``
    (docs/payloads.md has the arithmetic).
    """
    try:
        text: str | None = job.payload_json
    except RecursionError:  # ``json`` stops near 1,000 levels
        text = None
    problem = payload_depth_error(job.payload, text)
    if problem is not None:
        raise PayloadInvalid(f"payload of {job.type!r}: {problem}", reason=DEEP_PAYLOAD)
    assert text is not None
    size = len(text)  # canonical JSON is ASCII: characters are bytes
    if size > settings.max_payload_bytes:
        raise PayloadTooLarge(
            f"payload of {job.type!r} is {size} bytes, over max_payload_bytes "
            f"({settings.max_payload_bytes}); store the data elsewhere and enqueue its key, "
            "or raise the setting"
        )
    limit = settings.held_inline_payload_bytes if in_record else settings.inline_payload_bytes
    if (sealing.sealed_size(size) if job.encrypt else size) <= limit:
        return job
    latest_start = job.now + (settings.payload_object_days - settings.retention_days) * 86_400
    if job.run_at > latest_start:
        raise PayloadTooLarge(
            f"payload of {job.type!r} ({size} bytes) goes to S3, where it expires after "
            f"{settings.payload_object_days} days (payload_object_days): such a job must start within "
            f"{settings.payload_object_days - settings.retention_days} days, not at {job.run_at:.0f}"
        )
    return dataclasses.replace(job, payload_bucket=settings.payload_bucket)


class Producer:
    """An App's enqueue path: every request is built (validated, at one clock reading) and sent here.

    Every producer path of the App (``enqueue``, ``enqueue_many``, ``POST /jobs``, which needs the
    built job's id and times for its start estimate) goes through ``build`` and ``send_flow``, so a
    change to either reaches all of them.
    """

    def __init__(
        self,
        registry: Callable[[], Registry],
        settings: Callable[[], Settings],
        queue_urls: Callable[[], QueueUrls],
        telemetry: Telemetry,
        clock: Clock,
    ) -> None:
        """Each callable reads the App's own, as it is at the enqueue (a test may swap its registry)."""
        self._registry = registry
        self._settings = settings
        self._queue_urls = queue_urls
        self._telemetry = telemetry
        self._clock = clock

    def build(self, requests: Sequence[JobRequest[Any]]) -> list[enqueue.NewJob]:
        """The jobs ``requests`` make, validated, at one clock reading: the first half of every enqueue."""
        now, settings = self._clock.now(), self._settings()
        registry = self._registry()
        return [build_new_job(r, registry=registry, settings=settings, now=now) for r in requests]

    def send_flow(self, jobs: Sequence[enqueue.NewJob]) -> Flow[list[str]]:
        """Enqueue jobs already built and validated (``build``, ``build_new_job``)."""
        return enqueue_jobs_flow(
            jobs,
            settings=self._settings(),
            queue_urls=self._queue_urls(),
            logger=self._telemetry.deferred_logger,
            metrics=self._telemetry.metrics,
            tracer=self._telemetry.tracer,
        )

    def flow(self, requests: Sequence[JobRequest[Any]]) -> Flow[list[str]]:
        """Build ``requests`` and enqueue them; their ids, in order."""
        return (yield from self.send_flow(self.build(requests)))


def enqueue_jobs_flow(
    jobs: Sequence[enqueue.NewJob],
    *,
    settings: Settings,
    queue_urls: QueueUrls,
    logger: Any,
    metrics: JobMetrics | None = None,
    tracer: JobTracer | None = None,
) -> Flow[list[str]]:
    """Enqueue built jobs (``build_new_job``); a job whose dedup mode settles it asks the mode first.

    Jobs without such a mode go straight to ``enqueue_many_flow``, in one batch. A mode that settles
    its job (``KeySettler.settle_flow``: ``WhileActive`` takes the key item, ``Debounce`` gathers into
    the key's job) answers the id, and whether the plain enqueue still writes the job.
    """

    def send_and_write(some: Sequence[enqueue.NewJob]) -> Flow[list[str]]:
        return enqueue_many_flow(
            some, settings=settings, queue_urls=queue_urls, logger=logger, metrics=metrics, tracer=tracer
        )

    # Sealed first: a dedup mode's own writes (a debounced job's payload) carry only the sealed one.
    jobs = yield from sealing.seal_jobs_flow(jobs, settings.table_name)
    if not any(isinstance(j.policy, KeySettler) for j in jobs):
        return (yield from send_and_write(jobs))

    def url_of(job: enqueue.NewJob) -> Flow[str]:
        route = route_of(job)
        return (yield from queue_urls.flow([route]))[route]

    env = KeyEnv(settings.table_name, settings.retention_days * 86_400.0, url_of)
    results: list[str | None] = [None] * len(jobs)
    todo: list[tuple[int, enqueue.NewJob]] = []
    for i, job in enumerate(jobs):
        if not isinstance(job.policy, KeySettler):
            todo.append((i, job))
            continue
        settled = yield from job.policy.settle_flow(job, env)
        results[i] = settled.id
        if settled.write:
            todo.append((i, job))
    if todo:
        ids = yield from send_and_write([job for _, job in todo])
        for (i, _), new in zip(todo, ids, strict=True):
            results[i] = results[i] or new
    return [r for r in results if r is not None]


def enqueue_many_flow(
    jobs: Sequence[enqueue.NewJob],
    *,
    settings: Settings,
    queue_urls: QueueUrls,
    logger: Any = None,
    metrics: JobMetrics | None = None,
    tracer: JobTracer | None = None,
) -> Flow[list[str]]:
    """Send the messages (ten to a request per queue), then write the records (or both at once).

    With a ``tracer`` (an OpenTelemetry SDK is configured), the enqueue is a ``send`` span, or a
    ``create`` span per job and one ``send``; each job's message and record carry its own span.

    The URLs of the queues the messages go to are resolved first (cached in ``queue_urls``): a held
    job sends nothing now, so its queue is not looked up.

    The message goes first because it carries the job (payload included): if this process dies
    between the two, the job still runs: the claim creates the record from the message. A message
    SQS refused is not retried here: its record is written with the payload as a ``pending``
    attention entry instead, and the sweeper sends it. A repeated idempotency key sends its message
    again (harmless: the claim decides) and finds its record already there.

    ``settings.enqueue_together`` sends and puts at once (``together``): a refused message then
    takes a second write (``enqueue.mark_unsent``), and a producer killed after its put landed and
    before SQS took the message leaves a record no message brings (docs/lifecycle.md).
    """
    jobs = yield from sealing.seal_jobs_flow(jobs, settings.table_name)  # before any of it leaves
    spans = (
        tracer.producer(jobs, lambda j: routes.queue_name(settings, route_of(j)))
        if tracer is not None and jobs
        else None
    )
    if spans is not None:
        jobs = spans.jobs
    try:
        urls = yield from queue_urls.flow({route_of(j) for j in jobs if not j.held})
        yield from write_objects(jobs)
        if not settings.enqueue_together:  # message first: a crash before the put loses nothing
            unsent = yield from send_hints(
                jobs, queue_urls=urls, logger=logger, settings=settings, spans=spans
            )
            puts = [(job, enqueue.put_job(settings.table_name, job, unsent=job.id in unsent)) for job in jobs]
            created = yield from _put_all(settings, puts)
        elif all(j.held for j in jobs):  # nothing to send: the record (with its payload) is the job
            created = yield from _put_all(
                settings, [(j, enqueue.put_job(settings.table_name, j)) for j in jobs]
            )
        else:
            puts = [(job, enqueue.put_job(settings.table_name, job)) for job in jobs]
            sent, written = yield from together(
                send_hints(jobs, queue_urls=urls, logger=logger, settings=settings, spans=spans),
                _put_all(settings, puts),
            )
            refused: set[str] = sent.get()
            created = written.get()
            for job in jobs:
                if job.id in refused:
                    yield from _keep_unsent(settings, job)
    except BaseException as exc:
        if spans is not None:
            spans.end(exc)
            spans = None
        raise
    finally:
        if spans is not None:
            spans.end()
    yield from tags.write_jobs_flow(settings, created)
    if metrics is not None:
        for job in created:
            metrics.enqueued(job.type, job.tenant)
    return [j.id for j in jobs]


def _keep_unsent(settings: Settings, job: enqueue.NewJob) -> Flow[None]:
    """SQS refused ``job``'s message after its put landed: the record takes the payload for the sweeper.

    Refused when the record has a witness already (a repeated key's earlier message claimed it).
    """
    yield from apply(enqueue.mark_unsent(settings.table_name, job))


def write_objects(jobs: Sequence[enqueue.NewJob]) -> Flow[None]:
    """Write the payloads that go to S3 (``NewJob.payload_ref``): before any message or record names them."""
    for job in jobs:
        if job.payload_ref is not None:
            yield from objects.put_flow(job.payload_ref, job.payload_json.encode())


def route_of(job: enqueue.NewJob | Job) -> str:
    """The route (``sqsjobs.transport.routes``) of the SQS queue a job's message goes to."""
    return routes.job_route(job.queue, job.priority, job.serialize_key)


def send_hints(
    jobs: Sequence[enqueue.NewJob | Job],
    *,
    queue_urls: dict[str, str],
    settings: Settings | None = None,
    logger: Any = None,
    spans: ProducerSpans[enqueue.NewJob] | None = None,
) -> Flow[set[str]]:
    """Send the messages of the jobs that are not held, ten to a request per queue; the ids SQS refused.

    Each message carries its job's trace (``message_attributes``): with ``spans``, the context the
    propagator injected for its span, and its message id is set on that span.

    ``queue_urls`` is keyed by route (``route_of``). A FIFO queue takes no per-message delay: a
    serialized job due later is sent now, and its claim re-arms it until due (holding its key).

    A refusal is not retried here: the caller keeps the payload in the record for the sweeper
    (``enqueue_many_flow``; ``sqsjobs.transaction`` after its commit).
    """
    unsent: set[str] = set()
    by_queue: dict[str, list[tuple[enqueue.NewJob | Job, str]]] = {}
    for job in jobs:
        if not _held(job):
            by_queue.setdefault(route_of(job), []).append((job, enqueue.envelope_of(job).to_body()))
    for queue, queued in by_queue.items():
        fifo = routes.is_fifo(queue)
        fair = settings is None or settings.fair_queues
        for sized in sqs.sized_chunks(queued, [len(body) for _, body in queued]):
            batch = [job for job, _ in sized]
            entries = [(str(i), body, 0 if fifo else _delay_s(j)) for i, (j, body) in enumerate(sized)]
            try:
                params = sqs.send_batch(queue_urls[queue], entries)
                for entry, j in zip(params["Entries"], batch, strict=True):
                    entry.update(message_attributes(j.trace, spans.carriers.get(j.id) if spans else None))
                    entry.update(
                        routes.message_fields(
                            queue, tenant=j.tenant, serialize_key=j.serialize_key, fair=fair
                        )
                    )
                response = yield Call("sqs", "send_message_batch", params)
                failed = sqs.failed_entries(response)
                if spans is not None:
                    for ok in response.get("Successful", []):
                        spans.sent(batch[int(ok["Id"])].id, ok["MessageId"])
            except TransportError as exc:
                failed = {e[0]: exc.code for e in entries}
            unsent.update(batch[int(i)].id for i in failed)
            if failed and logger is not None:
                logger.warning(
                    "enqueue: message not sent, the record is kept for the sweeper",
                    extra={
                        "queue": queue,
                        "job_ids": [batch[int(i)].id for i in failed],
                        "codes": sorted(set(failed.values())),
                    },
                )
    return unsent


def _held(job: enqueue.NewJob | Job) -> bool:
    """A new job with no message yet; a record handed to ``send_hints`` is always sent."""
    return isinstance(job, enqueue.NewJob) and job.held


def _delay_s(job: enqueue.NewJob | Job) -> int:
    """A new job's delay; a record (a chain step unblocked by its predecessor's finish) is due now."""
    return sqs.clamp_delay(job.run_at - job.now) if isinstance(job, enqueue.NewJob) else 0


def hint_written(
    written: Sequence[tuple[enqueue.NewJob | Job, Mapping[str, Any]]],
    *,
    table: str,
    queue_urls: QueueUrls,
    settings: Settings | None = None,
    logger: Any = None,
) -> Flow[set[str]]:
    """Send the messages of jobs another transaction wrote, then clear each record's pending entry.

    A batch item, a chain's first step (and each next one, unblocked with its predecessor's finish:
    its record), a batch's callback, a finish hook's job and a transaction's jobs are all written with a pending entry (payload and due) inside someone else's transaction,
    and their message may leave only once it landed. Until it is cleared the entry is the job's
    witness: a crash, a refused send or a failed clear leaves it, and the sweeper sends the message at
    its due. A refused clear means a claim, a sweep or a replay took the entry first and owns it.
    Returns the ids whose message did not leave.
    """
    jobs = [job for job, _ in written if not _held(job)]
    if not jobs:
        return set()
    try:
        urls = yield from queue_urls.flow({route_of(job) for job in jobs})
    except TransportError:
        return {job.id for job in jobs}
    unsent = yield from send_hints(jobs, queue_urls=urls, settings=settings, logger=logger)
    for job, item in written:
        if _held(job) or job.id in unsent:
            continue
        try:
            yield from apply(transact.clear_sent(table, item))  # refused: claimed already, nothing to clear
        except StoreError as exc:
            if logger is not None:
                logger.warning(
                    "the sent job's pending entry was not cleared; the sweeper may send it again",
                    extra={"job_id": job.id, "code": exc.code},
                )
    return unsent


def _put_all(settings: Settings, puts: list[tuple[enqueue.NewJob, Put]]) -> Flow[list[enqueue.NewJob]]:
    """Write the records, 25 to a ``BatchExecuteStatement`` of INSERTs; the jobs that were new.

    An INSERT fails on an existing key, which is the idempotency condition of the single put. A job
    an INSERT did not create (a repeated key, a passing fault, a batch that failed whole) is written
    again with its single conditional put, whose ``ALL_OLD`` answer tells the same job from a
    conflicting one. One job alone is its single put, as ``enqueue`` always is.
    """
    created: list[enqueue.NewJob] = []
    alone: list[tuple[enqueue.NewJob, Put]] = []
    if settings.batch_writes and len(puts) > 1:
        # A batch naming one item twice is refused whole: a repeated id is put alone, after the first.
        firsts: list[tuple[enqueue.NewJob, Put]] = []
        seen: set[str] = set()
        for job, put in puts:
            (alone if job.id in seen else firsts).append((job, put))
            seen.add(job.id)
        for group in sqs.chunks(firsts, statements.MAX_STATEMENTS):
            inserted = yield from apply_batched([put for _, put in group])
            for (job, put), new in zip(group, inserted, strict=True):
                if new:
                    created.append(job)
                else:
                    alone.append((job, put))
    else:
        alone = puts
    for job, put in alone:
        put_alone = yield from apply(put)
        if isinstance(put_alone, Refused):
            if put_alone.item is None:  # the id condition cannot fail without a record: not a refusal
                raise put_alone.as_error()
            enqueue.interpret_put_conflict(job, put_alone.item)  # IdempotencyConflict unless the same job
        else:
            created.append(job)
    return created
