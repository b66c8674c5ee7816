"""App: the handler registry, the settings and the AWS clients, in one object loaded by every runtime.

The ECS worker, the Lambda entry point, the CLI and ``sqsjobs dev`` all load the same App from a
dotted path (``--app pkg.jobs:app`` or ``SQSJOBS_APP``). Creating an App reads nothing and
connects to nothing; settings are resolved on first use.
"""

from __future__ import annotations

import dataclasses
import os
from typing import TYPE_CHECKING, Any, TypeVar, Unpack, overload

from sqsjobs._aws import Flow, async_verb, sync_verb
from sqsjobs._clock import Clock, SystemClock
from sqsjobs.archive.namespace import Archive
from sqsjobs.archive.plugin import archive_plugin
from sqsjobs.batches.namespace import Batches
from sqsjobs.batches.plugin import batches_plugin
from sqsjobs.chains.namespace import Chains
from sqsjobs.chains.plugin import chains_plugin
from sqsjobs.children.plugin import children_plugin, wake_spec
from sqsjobs.config import Settings, to_seconds
from sqsjobs.deploy.provision import ProvisionReport, provision_flow
from sqsjobs.errors import ConfigurationError
from sqsjobs.events.plugin import events_plugin
from sqsjobs.hooks.plugin import hooks_plugin
from sqsjobs.ingress.plugin import foreign_plugin
from sqsjobs.limits.namespace import FlowControl
from sqsjobs.limits.plugin import limits_plugin
from sqsjobs.notify.plugin import notify_plugin
from sqsjobs.notify.sender import delivery_spec
from sqsjobs.observability.metrics import RequestCounter
from sqsjobs.observability.telemetry import Telemetry
from sqsjobs.ops.cancel_job import cancel_flow
from sqsjobs.ops.requeue import KEEP, retry_flow
from sqsjobs.outbox import OutboxOptions, arun_sql, enqueue_options, run_sql, write_in
from sqsjobs.producer import JobRequest, Producer, requests_of
from sqsjobs.registry import Registry
from sqsjobs.runtime.kernel import Feature, Kernel, features_of, locate
from sqsjobs.schedules.namespace import Schedules
from sqsjobs.schedules.plugin import fires_plugin
from sqsjobs.signals.namespace import Signals
from sqsjobs.signals.plugin import signal_spec, signals_plugin
from sqsjobs.slow_runs.namespace import SlowRuns
from sqsjobs.slow_runs.plugin import slow_runs_plugin
from sqsjobs.steps.namespace import Tokens
from sqsjobs.steps.plugin import steps_plugin
from sqsjobs.store import waiting
from sqsjobs.transaction import Transaction
from sqsjobs.transport.clients import Clients
from sqsjobs.transport.queues import QueueUrls

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from datetime import timedelta

    from sqsjobs.job import Job
    from sqsjobs.options import P
    from sqsjobs.registry import Handler, HandlerOf
    from sqsjobs.runtime.seams import Plugin

T = TypeVar("T")


class App:
    """A named set of job types and the AWS resources they run on.

    The core verbs are its own (enqueue, get, wait, cancel, retry, transaction); each feature's are
    in its namespace: ``app.chains``, ``app.batches``, ``app.tokens``, ``app.limits``.
    """

    # ── the features: one line each, in the order the kernel consults their plug-ins ─────────
    #: Jobs told once when every item is done (docs/workflows-batches.md).
    batches = Feature(batches_plugin, Batches)
    #: Jobs run one after another (docs/workflows-chains.md).
    chains = Feature(chains_plugin, Chains)
    #: Named fleet-wide limits (``app.limit`` is ``add``), pause/resume (docs/flow-control-limits.md).
    limits = Feature.declared(limits_plugin, FlowControl)
    #: Recurring jobs (``app.schedule`` is ``add``): their fires become jobs (docs/schedules.md).
    schedules = Feature.declared(fires_plugin, Schedules)
    _foreign = Feature(foreign_plugin)  # messages sent from outside sqsjobs become jobs
    _hooks = Feature(hooks_plugin)  # on_dead/on_succeeded: a hook job written with the finish
    #: Durable steps (``ctx.step``); this namespace answers their wait tokens (docs/steps.md).
    tokens = Feature(steps_plugin, Tokens)
    _children = Feature(children_plugin, built_ins=wake_spec)  # ctx.children: awaited without a slot
    #: Signals a job waits for or is cancelled by (``ctx.signals.wait``, ``cancel_on``; docs/signals.md).
    signals = Feature.declared(signals_plugin, Signals, built_ins=signal_spec)
    _events = Feature(events_plugin)  # job events: the change stream relayed to the bus by the sweeper
    _notify = Feature(notify_plugin, built_ins=delivery_spec)  # enqueue(notify=...): a delivery job
    #: Runs far longer than their type's usual time, flagged (docs/observability.md, "Slow runs").
    slow_runs = Feature.declared(slow_runs_plugin, SlowRuns)
    #: Finished records kept in S3 past their TTL, found by id (docs/archive.md).
    archive = Feature(archive_plugin, Archive)

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
        #: ``app.external("name", queue=..., payload=...)``: a type HTTP workers run (docs/http-workers.md).
        self.external = self.registry.external
        for feature in features_of(type(self)):  # sqsjobs' own job types (enqueue(notify=)'s deliveries)
            if feature.built_ins is not None:
                self.registry.add_built_in(feature.built_ins(lambda: self.kernel))
        #: ``app.schedule("name", cron=|rate=|at=, job=..., payload=...)``: see docs/schedules.md.
        self.schedule = self.schedules.add
        #: ``app.limit("stripe", concurrency=5, rate="20/s", key=..., breaker=Breaker(...))``: a named,
        #: fleet-wide limit that ``@app.job(..., limits=["stripe"])`` puts types under.
        self.limit = self.limits.add
        self.clock: Clock = clock or SystemClock()
        #: Every AWS call this process made through the App, by service and operation.
        self.requests = RequestCounter()
        #: Its logger, EMF metrics and OpenTelemetry tracer, each made on first use.
        self.telemetry = Telemetry(name, lambda: self.settings)
        #: Its boto3 and aiobotocore clients, made on first use and again after ``configure``.
        self.clients = Clients(lambda: self.settings, self.requests, lambda: self.telemetry.tracer)
        #: Its enqueue path: requests built and validated, then sent (``producer.Producer``).
        self.producer = Producer(
            lambda: self.registry, lambda: self.settings, lambda: self.queue_urls, self.telemetry, self.clock
        )
        self._explicit = settings
        self._settings: Settings | None = None
        self._queue_urls: QueueUrls | None = None
        self._core: Kernel | None = None
        self._kernel: Kernel | None = None

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
        self.clients.reset()
        self._queue_urls = None
        self._core = self._kernel = None

    # ── the kernel: what the runtime reads, and the features plugged into it ──────────────────
    def _plugins(self, core: Kernel) -> list[Plugin]:
        """The features' plug-ins, in the order they are declared above (finish hooks run in it)."""
        return [feature.plugin(self, core) for feature in features_of(type(self))]

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
                arun=self.clients.aiobotocore.run,  # the worker's calls go straight to the clients
                aclose=self.aclose,
                logger=self.telemetry.logger,
                metrics=self.telemetry.metrics,
                tracer=self.telemetry.tracer,
                queue_urls=self.queue_urls,
            )
        return self._core

    def run(self, flow: Flow[T]) -> T:
        """Run a sans-I/O flow with boto3."""
        return self.clients.run(flow)

    async def arun(self, flow: Flow[T]) -> T:
        """Run a sans-I/O flow with aiobotocore."""
        return await self.clients.arun(flow)

    @property
    def queue_urls(self) -> QueueUrls:
        """The App's queue URLs, resolved once per process (``QueueUrls.flow``)."""
        if self._queue_urls is None:
            self._queue_urls = QueueUrls(self.settings)
        return self._queue_urls

    # ── producer API: sync and async twins over the same flows ─────────────────────────────
    # ``job_type`` is the type's name (any payload), or its handler: then mypy checks the payload
    # against the handler's annotation, as dramatiq's ``Actor.send`` checks its arguments.
    @overload
    def enqueue(self, job_type: str, payload: Any = None, **options: Unpack[OutboxOptions]) -> str: ...
    @overload
    def enqueue(self, job_type: HandlerOf[P], payload: P, **options: Unpack[OutboxOptions]) -> str: ...
    def enqueue(self, job_type: str | Handler, payload: Any = None, **options: Unpack[OutboxOptions]) -> str:
        """Enqueue one job and return its id (the same id again for a repeated idempotency key).

        ``options`` are ``JobRequest``'s fields (idempotency key, delay, tenant, dedupe...), and
        ``connection``: a psycopg 3 connection, a SQLAlchemy 2 session or connection, or a Django
        cursor, whose open transaction the job joins through the outbox table (docs/outbox.md).
        """
        if (
            outbox := write_in(options, self.registry, self.settings, job_type, payload, self.clock.now())
        ) is not None:
            return run_sql(*outbox)
        return self.run(self.producer.flow([JobRequest(job_type, payload, **enqueue_options(options))]))[0]

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
            await self.arun(self.producer.flow([JobRequest(job_type, payload, **enqueue_options(options))]))
        )[0]

    def _enqueue_many(self, requests: Iterable[JobRequest[Any] | Mapping[str, Any]]) -> Flow[list[str]]:
        """Enqueue many jobs; hints go to SQS in batches of ten. Returns ids in order.

        Each request names its type by name or by handler, like ``enqueue``; only the ``JobRequest``
        form has its payload type-checked.
        """
        return self.producer.flow(requests_of(requests))

    enqueue_many, aenqueue_many = sync_verb(_enqueue_many), async_verb(_enqueue_many)

    def transaction(self) -> Transaction:
        """``with app.transaction() as tx:`` your DynamoDB writes and jobs, committed together on a clean exit.

        One TransactWriteItems carries ``tx.put``/``update``/``delete``/``condition_check`` (boto3
        client shapes) and the records of ``tx.enqueue``'s jobs; their messages go after it. An
        exception in the block writes nothing. ``async with`` commits with the async clients (and
        ``app.atransaction()`` says so where it is read). See ``sqsjobs.transaction``, docs/payloads.md.
        """
        return Transaction(
            registry=self.registry,
            settings=self.settings,
            queue_urls=self.queue_urls,
            now=self.clock.now,
            logger=self.telemetry.logger,
            metrics=self.telemetry.metrics,
            run=self.run,
            arun=self.arun,
        )

    atransaction = transaction

    def _get(self, job_id: str, *, load_result: bool = True) -> Flow[Job]:
        """The job's record; ``JobNotFound`` if there is none.

        A result kept in S3 (larger than ``inline_result_bytes``) is read into ``result`` unless
        ``load_result`` is False; ``result_ref`` names its object either way.
        """
        return waiting.read_job_flow(self.settings, job_id, load_result=load_result)

    def _wait(self, job_id: str, *, timeout: float | timedelta = 60.0) -> Flow[Job]:
        """The job's record once it ended (succeeded, dead, cancelled or expired), its result read.

        ``WaitTimeout`` (its ``last``: the record as last read) when it has not ended within
        ``timeout``. A waiter reads the record with a growing pause, about 13 reads per 20 s
        (``sqsjobs.store.waiting``; docs/results.md says what that costs).
        """
        return waiting.job_flow(self.settings, job_id, to_seconds(timeout))

    def _cancel(self, job_id: str) -> Flow[str]:
        """Cancel a waiting job (``"cancelled"``) or ask a running one to stop (``"requested"``)."""
        return cancel_flow(self.settings, self.registry, job_id, self.clock.now())

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
        """Close the boto3 clients (made again if used)."""
        self.clients.close()

    async def aclose(self) -> None:
        """Close the aiobotocore clients."""
        await self.clients.aclose()

    @staticmethod
    def from_path(path: str | None = None) -> App:
        """Load ``module.path:attribute`` (default: ``SQSJOBS_APP``)."""
        path = path or os.environ.get("SQSJOBS_APP")
        app = locate(path)
        if not isinstance(app, App):
            raise ConfigurationError(f"{path} is not an sqsjobs App (got {type(app).__name__})")
        return app
