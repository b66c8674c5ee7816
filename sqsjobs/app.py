"""App: the handler registry, the settings and the AWS clients, in one object loaded by every runtime.

The ECS worker, the Lambda entry point, the CLI and ``sqsjobs dev`` all load the same App from a
dotted path (``--app pkg.jobs:app`` or ``SQSJOBS_APP``). Creating an App reads nothing and
connects to nothing; settings are resolved on first use.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
from typing import TYPE_CHECKING, Any, TypeVar, Unpack, overload

from sqsjobs._aws import AsyncClients, Flow, SyncClients, async_verb, run_async, run_sync, sync_verb
from sqsjobs._clock import Clock, SystemClock
from sqsjobs.config import Settings, to_seconds
from sqsjobs.deploy.provision import ProvisionReport, provision_flow
from sqsjobs.errors import ConfigurationError
from sqsjobs.events.stream_relay import events_plugin
from sqsjobs.hooks.transition_hooks import hooks_plugin
from sqsjobs.ingress.foreign import foreign_plugin
from sqsjobs.limits.expiry import expiry_plugin
from sqsjobs.limits.gate import limits_plugin
from sqsjobs.limits.ops import FlowControl
from sqsjobs.observability.logs import DeferredLogger
from sqsjobs.observability.metrics import RequestCounter
from sqsjobs.ops.cancel_job import cancel_flow
from sqsjobs.ops.requeue import KEEP, retry_flow
from sqsjobs.outbox import OutboxOptions, arun_sql, enqueue_options, run_sql, write_in
from sqsjobs.producer import JobRequest, build_new_job, enqueue_jobs_flow, get_flow, requests_of
from sqsjobs.registry import P, Registry
from sqsjobs.runtime.kernel import Kernel, locate
from sqsjobs.schedules.fire import fires_plugin
from sqsjobs.schedules.specs import Schedules
from sqsjobs.steps import steps_plugin
from sqsjobs.steps.tokens import Tokens
from sqsjobs.store import waiting
from sqsjobs.transaction import Transaction
from sqsjobs.transport.queues import QueueUrls
from sqsjobs.workflows.batch_hook import batches_plugin
from sqsjobs.workflows.batches import Batches
from sqsjobs.workflows.chain_hook import chains_plugin
from sqsjobs.workflows.chains import Chains

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
    from datetime import timedelta

    from sqsjobs.job import Job
    from sqsjobs.observability.metrics import JobMetrics
    from sqsjobs.observability.spans import JobTracer
    from sqsjobs.registry import Handler, HandlerOf
    from sqsjobs.runtime.seams import Plugin
    from sqsjobs.store.enqueue import NewJob

T = TypeVar("T")


class App:
    """A named set of job types and the AWS resources they run on.

    The core verbs are its own (enqueue, get, wait, cancel, retry, transaction); each feature's are
    in its namespace: ``app.chains``, ``app.batches``, ``app.tokens``, ``app.limits``.
    """

    def __init__(self, name: str, *, clock: Clock | None = None, **settings: Any) -> None:
        """Create an App; ``settings`` are ``Settings`` fields that win over the environment.

        Only their names are checked now (``ConfigurationError`` for a typo); values, and the
        environment, are read on first use.
        """
        Settings.check_names(settings)
        self.name = name
        self.registry = Registry()
        #: ``@app.job("name", queue=..., max_attempts=..., timeout=...)``.
        self.job = self.registry.job
        self.schedules = Schedules()
        #: ``app.schedule("name", cron=|rate=|at=, job=..., payload=...)``: see docs/schedules.md.
        self.schedule = self.schedules.add
        #: Named fleet-wide limits, and pause/resume of a job type (docs/flow-control-limits.md).
        self.limits = FlowControl(self._core_kernel)
        #: ``app.limit("stripe", concurrency=5, rate="20/s", key=..., breaker=Breaker(...))``: a named,
        #: fleet-wide limit that ``@app.job(..., limits=["stripe"])`` puts types under.
        self.limit = self.limits.add
        #: Jobs run one after another (docs/workflows-chains.md).
        self.chains = Chains(self._core_kernel)
        #: Jobs told once when every item is done (docs/workflows-batches.md).
        self.batches = Batches(self._core_kernel)
        #: Answers to a job's wait tokens (docs/steps.md).
        self.tokens = Tokens(self._core_kernel)
        self.clock: Clock = clock or SystemClock()
        #: Every AWS call this process made through the App, by service and operation.
        self.requests = RequestCounter()
        self._explicit = settings
        self._settings: Settings | None = None
        self._sync: SyncClients | None = None
        self._async: AsyncClients | None = None
        self._queue_urls: QueueUrls | None = None
        self._logger: Any = None
        #: What enqueues log with: the logger only once a refused message needs it.
        self._enqueue_logger = DeferredLogger(lambda: self.logger)
        self._metrics: JobMetrics | None = None
        self._tracer: JobTracer | None = None
        self._tracer_decided = False
        self._core: Kernel | None = None
        self._kernel: Kernel | None = None
        #: Sync handlers run in threads and may enqueue at once: one set of clients, not one each.
        self._clients_lock = threading.Lock()

    # ── configuration ──────────────────────────────────────────────────────────────────────
    @property
    def settings(self) -> Settings:
        """Resolved on first use: explicit arguments > environment > defaults."""
        if self._settings is None:
            self._settings = Settings.from_env(self.name, **self._explicit)
        return self._settings

    def configure(self, **settings: Any) -> None:
        """Override settings (e.g. the CLI's ``--endpoint-url``); drops clients made with the old ones."""
        Settings.check_names(settings)
        self._explicit = {**self._explicit, **settings}
        self._settings = None
        if self._sync is not None:
            self._sync.close()
        self._sync = None
        self._async = None
        self._queue_urls = None
        self._core = self._kernel = None

    # ── the kernel: what the runtime reads, and the features plugged into it ──────────────────
    def _plugins(self, core: Kernel) -> list[Plugin]:
        """The features, one line each, in the order the kernel consults them (finish hooks run in it)."""
        return [
            expiry_plugin(core),  # a job not started by its deadline: expired instead of claimed
            batches_plugin(core),  # items streamed from a handler; an item's end counted on its batch
            chains_plugin(core),  # a step's previous result; the next step unblocked with a success
            limits_plugin(core, self.limits),  # pause, limits and breakers: admission, slots given back
            fires_plugin(core, self.schedules),  # schedule fires become their occurrence's job
            foreign_plugin(core),  # messages sent from outside sqsjobs become jobs
            hooks_plugin(core),  # on_dead/on_succeeded: a hook job written with the finish
            steps_plugin(core),  # durable steps: ctx.step runs a function once per job, across attempts
            events_plugin(core),  # job events: the change stream relayed to the bus by the sweeper (local)
        ]

    @property
    def kernel(self) -> Kernel:
        """The runtime's frozen context with the features plugged in; made again after ``configure``.

        Building it checks the declarations the features need (an unknown limit name raises
        ``ConfigurationError``), so a worker fails at its start, not at a job.
        """
        if self._kernel is None:
            core = self._core_kernel()
            self._kernel = dataclasses.replace(core, plugins=tuple(self._plugins(core)))
        return self._kernel

    def _core_kernel(self) -> Kernel:
        """The kernel without plug-ins: what the features and the façade's own flows read."""
        if self._core is None:
            self._core = Kernel(
                name=self.name,
                settings=self.settings,
                clock=self.clock,
                registry=self.registry,
                run=self.run,
                arun=self.async_clients.run,  # the worker's calls go straight to the clients
                aclose=self.aclose,
                logger=self.logger,
                metrics=self.metrics,
                tracer=self.tracer,
                queue_urls=self.queue_urls,
            )
        return self._core

    @property
    def logger(self) -> Any:
        """Powertools JSON logger: one line per job transition."""
        if self._logger is None:
            from sqsjobs.observability.logs import make_logger

            self._logger = make_logger(self.name)
        return self._logger

    @property
    def metrics(self) -> JobMetrics:
        """EMF metrics per job type (``sqsjobs.observability.metrics``); flushed by the worker and the Lambda entry."""
        if self._metrics is None:
            from sqsjobs.observability.metrics import JobMetrics

            self._metrics = JobMetrics(self.name, flush_interval_s=self.settings.metrics_interval_s)
        return self._metrics

    @property
    def tracer(self) -> JobTracer | None:
        """The App's OpenTelemetry spans (``sqsjobs.observability.spans``); None when no SDK is configured.

        Decided once, on first use (the kernel's build, a first enqueue): configure the SDK before
        that. Without one, nothing in the worker's pipeline calls into OpenTelemetry.
        """
        if not self._tracer_decided:
            from sqsjobs.observability.spans import tracer_for

            self._tracer = tracer_for(self.name, lambda: self.logger)
            self.metrics.traced = self._tracer is not None
            self._tracer_decided = True
        return self._tracer

    @property
    def sync_clients(self) -> SyncClients:
        """boto3 clients for the sync API."""
        with self._clients_lock:
            if self._sync is None:
                self._sync = SyncClients(self.settings, self.requests, tracer=self.tracer)
            return self._sync

    @property
    def async_clients(self) -> AsyncClients:
        """The async API's and the worker's aiobotocore clients (bound to the running loop)."""
        if self._async is None:
            self._async = AsyncClients(self.settings, self.requests, tracer=self.tracer)
        return self._async

    def run(self, flow: Flow[T]) -> T:
        """Run a sans-I/O flow with boto3."""
        return run_sync(flow, self.sync_clients)

    async def arun(self, flow: Flow[T]) -> T:
        """Run a sans-I/O flow with aiobotocore."""
        return await run_async(flow, self.async_clients)

    @property
    def queue_urls(self) -> QueueUrls:
        """The App's queue URLs, resolved once per process (``QueueUrls.flow``)."""
        if self._queue_urls is None:
            self._queue_urls = QueueUrls(self.settings)
        return self._queue_urls

    # ── producer API: sync and async twins over the same flows ─────────────────────────────
    def build_jobs(self, requests: Sequence[JobRequest[Any]]) -> list[NewJob]:
        """The jobs ``requests`` make, validated, at one clock reading: the first half of every enqueue.

        Every producer path of this App (``enqueue``, ``enqueue_many``, ``POST /jobs``, which needs
        the built job's id and times for its start estimate) builds here and sends with
        ``enqueue_jobs_flow``, so a change to either reaches all of them.
        """
        now = self.clock.now()
        return [build_new_job(r, registry=self.registry, settings=self.settings, now=now) for r in requests]

    def _enqueue_flow(self, requests: list[JobRequest[Any]]) -> Flow[list[str]]:
        return (yield from self.enqueue_jobs_flow(self.build_jobs(requests)))

    def enqueue_jobs_flow(self, jobs: Sequence[NewJob]) -> Flow[list[str]]:
        """Enqueue jobs already built and validated (``build_new_job``): a schedule fire's, a foreign message's."""
        return enqueue_jobs_flow(
            jobs,
            settings=self.settings,
            queue_urls=self.queue_urls,
            logger=self._enqueue_logger,
            metrics=self.metrics,
            tracer=self.tracer,
        )

    # ``job_type`` is the type's name (any payload), or its handler: then mypy checks the payload
    # against the handler's annotation, as dramatiq's ``Actor.send`` checks its arguments.
    @overload
    def enqueue(self, job_type: str, payload: Any = None, **options: Unpack[OutboxOptions]) -> str: ...
    @overload
    def enqueue(self, job_type: HandlerOf[P], payload: P, **options: Unpack[OutboxOptions]) -> str: ...
    def enqueue(self, job_type: str | Handler, payload: Any = None, **options: Unpack[OutboxOptions]) -> str:
        """Enqueue one job and return its id (the same id again for a repeated idempotency key).

        Args:
            job_type: the registered name, or the handler itself (``HandlerNotFound`` if this App
                does not have it).
            payload: validated against the handler's annotation, then stored as JSON.
            idempotency_key: the job's identity: the same key and payload return the same job.
            delay: run no sooner than this from now.
            run_at: run no sooner than this instant (timezone-aware).
            queue: override the handler's queue (needed for a type this App does not register).
            tenant: recorded, and part of the idempotency identity.
            parent_id: the job that enqueued this one.
            trace: the producer's trace header; default: the current trace, if any.
            expires_after: not started this long after now, the job ends ``expired`` and never
                runs (wins over the type's ``@job(expires_after=)``; docs/flow-control-expiry.md).
            unique: ``"while_active"``: the key names the live job only; once it has finished, the
                next enqueue makes a new job (docs/dedupe.md). The id returned is then an
                ``EnqueuedId`` saying ``deduplicated`` and ``replaced`` (the finished job).
            dedupe_for: the key names one job within this window (aligned; another payload in it
                raises ``IdempotencyConflict``).
            throttle: the first enqueue of the key in this window (aligned) wins; later ones, any
                payload, return its id.
            debounce: the last payload of a quiet period this long wins; ``debounce_max`` (default
                ten quiet periods) bounds the wait from the key's first enqueue.
            connection: a psycopg 3 connection or SQLAlchemy 2 session: the job goes into the outbox
                table in its open transaction; the relay enqueues it once committed (docs/outbox.md).
        """
        if (
            outbox := write_in(options, self.registry, self.settings, job_type, payload, self.clock.now())
        ) is not None:
            return run_sql(*outbox)
        return self.run(self._enqueue_flow([JobRequest(job_type, payload, **enqueue_options(options))]))[0]

    @overload
    async def aenqueue(self, job_type: str, payload: Any = None, **options: Unpack[OutboxOptions]) -> str: ...
    @overload
    async def aenqueue(self, job_type: HandlerOf[P], payload: P, **options: Unpack[OutboxOptions]) -> str: ...
    async def aenqueue(
        self, job_type: str | Handler, payload: Any = None, **options: Unpack[OutboxOptions]
    ) -> str:
        """Async ``enqueue`` (``connection``: an async psycopg connection or SQLAlchemy session)."""
        if (
            outbox := write_in(options, self.registry, self.settings, job_type, payload, self.clock.now())
        ) is not None:
            return await arun_sql(*outbox)
        return (
            await self.arun(self._enqueue_flow([JobRequest(job_type, payload, **enqueue_options(options))]))
        )[0]

    def _enqueue_many(self, requests: Iterable[JobRequest[Any] | Mapping[str, Any]]) -> Flow[list[str]]:
        """Enqueue many jobs; hints go to SQS in batches of ten. Returns ids in order.

        Each request names its type by name or by handler, like ``enqueue``; only the ``JobRequest``
        form has its payload type-checked.
        """
        return self._enqueue_flow(requests_of(requests))

    enqueue_many, aenqueue_many = sync_verb(_enqueue_many), async_verb(_enqueue_many)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Transaction]:
        """``with app.transaction() as tx:`` your DynamoDB writes and jobs, committed together on a clean exit.

        One TransactWriteItems carries ``tx.put``/``update``/``delete``/``condition_check`` (boto3
        client shapes) and the records of ``tx.enqueue``'s jobs; their messages go after it. An
        exception in the block writes nothing. See ``sqsjobs.transaction`` and docs/payloads.md.
        """
        tx = self._transaction()
        try:
            yield tx
        except BaseException:
            tx.discard()
            raise
        self.run(tx.commit_flow())

    @contextlib.asynccontextmanager
    async def atransaction(self) -> AsyncIterator[Transaction]:
        """Async ``transaction``: ``async with app.atransaction() as tx:``."""
        tx = self._transaction()
        try:
            yield tx
        except BaseException:
            tx.discard()
            raise
        await self.arun(tx.commit_flow())

    def _transaction(self) -> Transaction:
        return Transaction(
            registry=self.registry,
            settings=self.settings,
            queue_urls=self.queue_urls,
            now=self.clock.now,
            logger=self.logger,
            metrics=self.metrics,
        )

    def _get(self, job_id: str, *, load_result: bool = True) -> Flow[Job]:
        """The job's record; ``JobNotFound`` if there is none.

        A result kept in S3 (larger than ``inline_result_bytes``) is read into ``result`` unless
        ``load_result`` is False; ``result_ref`` names its object either way.
        """
        return get_flow(self.settings, job_id, load_result=load_result)

    def _wait(self, job_id: str, *, timeout: float | timedelta = 60.0) -> Flow[Job]:
        """The job's record once it ended (succeeded, dead, cancelled or expired), its result read.

        ``WaitTimeout`` (its ``last``: the record as last read) when it has not ended within
        ``timeout``. A waiter reads the record with a growing pause, about 13 reads per 20 s
        (``sqsjobs.store.waiting``; docs/results.md says what that costs).
        """
        return waiting.job_flow(self.settings, job_id, to_seconds(timeout))

    def _cancel(self, job_id: str) -> Flow[str]:
        """Cancel a waiting job (``"cancelled"``) or ask a running one to stop (``"requested"``)."""
        return cancel_flow(self.settings, job_id, self.clock.now())

    def _retry(self, job_id: str, *, payload: Any = KEEP) -> Flow[Job]:
        """Put a dead or cancelled job back in its queue (attempts reset, audit entry); see ``sqsjobs.ops.requeue``.

        ``payload``: a corrected payload that replaces the job's (validated by the current handler,
        same job id and idempotency key; see docs/payloads.md). Default: the job's own.
        """
        return retry_flow(
            job_id,
            settings=self.settings,
            registry=self.registry,
            queue_urls=self.queue_urls,
            now=self.clock.now(),
            payload=payload,
        )

    get, aget = sync_verb(_get), async_verb(_get)
    wait, await_result = sync_verb(_wait), async_verb(_wait)
    cancel, acancel = sync_verb(_cancel), async_verb(_cancel)
    retry, aretry = sync_verb(_retry), async_verb(_retry)

    def provision(self, queues: list[str] | None = None) -> ProvisionReport:
        """Create the table, queues and DLQs on the configured endpoint (idempotent)."""
        report: ProvisionReport = self.run(provision_flow(self.settings, self.registry, queues))
        return report

    def close(self) -> None:
        """Close the sync clients (made again if used)."""
        if self._sync is not None:
            self._sync.close()
            self._sync = None

    async def aclose(self) -> None:
        """Close the async clients."""
        if self._async is not None:  # kept: it opens new clients on the next use (the kernel holds it)
            await self._async.aclose()

    @staticmethod
    def from_path(path: str | None = None) -> App:
        """Load ``module.path:attribute`` (default: ``SQSJOBS_APP``)."""
        path = path or os.environ.get("SQSJOBS_APP")
        app = locate(path)
        if not isinstance(app, App):
            raise ConfigurationError(f"{path} is not an sqsjobs App (got {type(app).__name__})")
        return app
