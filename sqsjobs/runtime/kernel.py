"""The kernel: the frozen context every runtime part reads, built by the App (``App.kernel``).

The App is the root and the façade; below it, the runtime and the features take a ``Kernel``
(or only the part of it they need) instead of the whole App. The App builds one on first use and
builds it again when ``App.configure`` changes the settings, so a kernel never sees half of a
change. Its attribute names are the App's (``settings``, ``clock``, ``registry``, ``run``,
``arun``, ``logger``, ``metrics``, ``tracer``, ``queue_urls``), so code written against either reads
the same. ``plugins`` is the App's ordered list of features (``sqsjobs.runtime.seams``); each seam's
list is made once, when the kernel is built, and ``Kernel.concerned`` filters it per job by data.

The Lambda entry points name the App by dotted path (``SQSJOBS_APP``); ``kernel_from_path`` loads
that object and takes its kernel without this package importing the App.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, overload

from sqsjobs.config import END_STATES
from sqsjobs.errors import ConfigurationError
from sqsjobs.store import deadlines

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping

    from sqsjobs._aws import AsyncRunner, Flow
    from sqsjobs._clock import Clock
    from sqsjobs.config import Settings
    from sqsjobs.job import Job
    from sqsjobs.observability.metrics import JobMetrics
    from sqsjobs.observability.spans import JobTracer
    from sqsjobs.registry import HandlerSpec, Registry
    from sqsjobs.runtime.seams import (
        AdmissionGuard,
        FinishHook,
        MessageKind,
        Plugin,
        RunOutcome,
        RunPreparation,
        RunWatch,
        SweepPass,
    )
    from sqsjobs.transport.queues import QueueUrls

T = TypeVar("T")
S = TypeVar("S")
#: A feature's namespace on the App (None: it has none).
N = TypeVar("N")


class SyncRunner(Protocol):
    """Runs a flow with boto3 (``App.run``)."""

    def __call__(self, flow: Flow[T], /) -> T:
        """Drive ``flow`` to its result."""
        ...


@dataclass(frozen=True)
class Kernel:
    """What the runtime reads of an App: settings, clock, handlers, flow runners, telemetry, plug-ins."""

    #: The App's name (its logger's and metrics' service, the worker registry's label).
    name: str
    settings: Settings
    clock: Clock
    registry: Registry
    #: Run a sans-I/O flow with boto3 (sync callers: a handler's thread, the Lambda sweeper).
    run: SyncRunner
    #: Run a sans-I/O flow with aiobotocore (the worker's loop).
    arun: AsyncRunner
    #: Close the async clients (a worker's exit).
    aclose: Callable[[], Awaitable[None]]
    logger: Any
    metrics: JobMetrics
    #: sqsjobs' OpenTelemetry spans; None without an SDK (the pipeline then makes no tracing call at all).
    tracer: JobTracer | None
    queue_urls: QueueUrls
    #: The features, in the App's order (``sqsjobs.runtime.seams.Plugin``).
    plugins: tuple[Plugin, ...] = ()
    #: Each seam's plug-ins, in plug-in order, listed once when the kernel is built.
    guards: tuple[tuple[Plugin, AdmissionGuard], ...] = field(init=False, repr=False)
    finish_hooks: tuple[tuple[Plugin, FinishHook], ...] = field(init=False, repr=False)
    preparations: tuple[tuple[Plugin, RunPreparation], ...] = field(init=False, repr=False)
    sweeps: tuple[tuple[Plugin, SweepPass], ...] = field(init=False, repr=False)
    watches: tuple[tuple[Plugin, RunWatch], ...] = field(init=False, repr=False)
    #: Envelope class → the feature that handles such messages.
    kinds: Mapping[type, MessageKind] = field(init=False, repr=False)
    #: Exception class a handler raised → the feature that records that end of its run.
    outcomes: Mapping[type, RunOutcome] = field(init=False, repr=False)
    #: ``JobContext`` fields every run gets (the plug-ins' ``context``).
    context: Mapping[str, Any] = field(init=False, repr=False)
    #: (job type, end state) → how long its record is kept, for the registered types when
    #: ``Settings.retention`` has rules: worked out once here, not at every finish (``kept_for``).
    retentions: Mapping[tuple[str, str], float] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        plugins = self.plugins
        lists: dict[str, Any] = {
            "guards": tuple((p, p.guard) for p in plugins if p.guard is not None),
            "finish_hooks": tuple((p, p.finish) for p in plugins if p.finish is not None),
            "preparations": tuple((p, p.prepare) for p in plugins if p.prepare is not None),
            "sweeps": tuple((p, p.sweep) for p in plugins if p.sweep is not None),
            "watches": tuple((p, p.watch) for p in plugins if p.watch is not None),
            "kinds": {cls: kind for p in plugins for cls, kind in p.kinds.items()},
            "outcomes": {cls: outcome for p in plugins for cls, outcome in p.outcomes.items()},
            "context": {k: v for p in plugins for k, v in p.context.items()},
            "retentions": {
                (spec.name, state): self.settings.retention_for(spec.name, state)
                for spec in self.registry
                for state in END_STATES
            }
            if self.settings.retention
            else {},
        }
        for name, value in lists.items():
            object.__setattr__(self, name, value)

    @staticmethod
    def concerned(seam: tuple[tuple[Plugin, S], ...], job_type: str, subject: object) -> list[S]:
        """The seam's plug-ins whose jobs include ``subject`` (a ``Job`` or an ``Envelope``) of ``job_type``.

        Read from the plug-ins' data alone (``Plugin.fields``, ``Plugin.types``): a job no feature
        declares runs none of their code. A message without the job's fields (a version 1 hint)
        cannot say which fields it has: every field-declaring feature hears of it.
        """
        return [part for plugin, part in seam if _concerns(plugin, job_type, subject)]

    def kept_for(self, job_type: str, state: str) -> float:
        """How long a record of ``job_type`` that ended in ``state`` is kept (``Settings.retention``)."""
        if not self.settings.retention:
            return self.settings.retention_s
        kept = self.retentions.get((job_type, state))
        return (
            kept if kept is not None else self.settings.retention_for(job_type, state)
        )  # a type not registered

    def late(self, spec: HandlerSpec, job: Job) -> str | None:
        """Why ``job``, claimed earlier, ends ``expired`` rather than start only now; None: it may start.

        Asked where a claimed job waited before its handler: for a free slot (``runtime/run_stage.py``)
        or in a batch collector for its call (``runtime/batching.py``). A deadline passed meanwhile ends
        it ``expired`` unrun, as the claim would have had the job waited in the queue instead.
        """
        bound = spec.expires_after_s
        if job.start_by is None and bound is None:  # no deadline: nothing to ask
            return None
        return deadlines.started_too_late(job, bound, self.clock.now())


def _concerns(plugin: Plugin, job_type: str, subject: object) -> bool:
    fields, types = plugin.fields, plugin.types
    if fields is None and types is None:
        return True
    if types is not None and job_type in types:
        return True
    return bool(fields) and (
        getattr(subject, "has_payload", True) is False
        or any(getattr(subject, name, None) is not None for name in fields or ())
    )


class SupportsKernel(Protocol):
    """An object that builds a kernel: the App (``App.kernel``)."""

    @property
    def kernel(self) -> Kernel:
        """The current kernel."""
        ...


def kernel_of(source: Kernel | SupportsKernel) -> Kernel:
    """``source`` itself, or the kernel it builds: runtime parts accept an App or a Kernel alike."""
    return source if isinstance(source, Kernel) else source.kernel


def locate(path: str | None = None) -> Any:
    """The object at ``module.path:attribute`` (default: ``SQSJOBS_APP``); ``ConfigurationError`` if none."""
    path = path or os.environ.get("SQSJOBS_APP")
    if not path or ":" not in path:
        raise ConfigurationError(
            f"expected an app path like 'shop.jobs:app', got {path!r} (set --app or SQSJOBS_APP)"
        )
    module_name, _, attr = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(f"cannot import {module_name!r} for --app {path}: {exc}") from exc
    return getattr(module, attr, None)


def kernel_from_path(path: str | None = None) -> Kernel:
    """The kernel of the App at ``path`` (default: ``SQSJOBS_APP``): the Lambda entry points' loader."""
    found = locate(path)
    kernel = getattr(found, "kernel", None)
    if not isinstance(kernel, Kernel):
        raise ConfigurationError(
            f"{path or os.environ.get('SQSJOBS_APP')} is not an sqsjobs App (got {type(found).__name__})"
        )
    return kernel


class Namespace:
    """A feature's verbs on the App (``app.chains``, ``app.batches``, ``app.tokens``, ``app.limits``).

    A feature declares its side of the App here, in its own folder, instead of as methods of
    ``App``: each verb is a flow method with twins made by ``sqsjobs._aws.sync_verb`` and
    ``async_verb``. The kernel is read at each call, so ``App.configure`` reaches every namespace.
    """

    def __init__(self, kernel: Callable[[], Kernel]) -> None:
        self._kernel = kernel

    @property
    def kernel(self) -> Kernel:
        """The App's current kernel without plug-ins (what a verb's flow reads)."""
        return self._kernel()

    def run(self, flow: Flow[T], /) -> T:
        """Drive ``flow`` with boto3."""
        return self._kernel().run(flow)

    async def arun(self, flow: Flow[T], /) -> T:
        """Drive ``flow`` with aiobotocore."""
        return await self._kernel().arun(flow)


class FeatureHost(Protocol):
    """What a ``Feature`` needs of the object it is declared on (the App)."""

    def _core_kernel(self) -> Kernel: ...


class Feature(Generic[N]):
    """One feature's line on the App: its plug-in, and its namespace (``app.chains``) if it has one.

    Declared as a class attribute, in the order the kernel consults the plug-ins::

        chains = Feature(chains_plugin, Chains)            # app.chains, a Namespace of verbs
        limits = Feature.declared(limits_plugin, FlowControl)  # its plug-in reads what was declared
        _hooks = Feature(hooks_plugin)                     # a plug-in alone

    The namespace is made on first access, one per App (a ``Namespace`` reads the App's kernel at
    each call, so ``configure`` reaches it). ``built_ins`` are job types the feature registers in
    every App (kept out of the App's own list). An application adds its own feature the same way, in
    a subclass: its folder plus one line (``tests/unit/test_features.py``).
    """

    @overload
    def __init__(
        self: Feature[None],
        plugin: Callable[[Kernel], Plugin],
        namespace: None = None,
        *,
        built_ins: Callable[[Callable[[], Kernel]], HandlerSpec] | None = None,
    ) -> None: ...
    @overload
    def __init__(
        self,
        plugin: Callable[[Kernel], Plugin],
        namespace: type[N],
        *,
        built_ins: Callable[[Callable[[], Kernel]], HandlerSpec] | None = None,
    ) -> None: ...
    def __init__(
        self,
        plugin: Callable[[Kernel], Plugin],
        namespace: type[N] | None = None,
        *,
        built_ins: Callable[[Callable[[], Kernel]], HandlerSpec] | None = None,
    ) -> None:
        self._init(lambda core, _namespace: plugin(core), plugin, namespace, built_ins)

    @classmethod
    def declared(
        cls,
        plugin: Callable[[Kernel, N], Plugin],
        namespace: type[N],
        *,
        built_ins: Callable[[Callable[[], Kernel]], HandlerSpec] | None = None,
    ) -> Feature[N]:
        """A feature whose plug-in reads what was declared in its namespace (limits, schedules)."""
        feature: Feature[N] = cls.__new__(cls)
        feature._init(plugin, plugin, namespace, built_ins)
        return feature

    def _init(
        self,
        plugin: Callable[[Kernel, N], Plugin],
        factory: Callable[..., Plugin],
        namespace: type[N] | None,
        built_ins: Callable[[Callable[[], Kernel]], HandlerSpec] | None,
    ) -> None:
        self._plugin = plugin
        #: The plug-in's factory as declared (where the feature's code lives: its folder).
        self.factory = factory
        self._namespace = namespace
        self.built_ins = built_ins
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, host: None, owner: type | None = None) -> Feature[N]: ...
    @overload
    def __get__(self, host: FeatureHost, owner: type | None = None) -> N: ...
    def __get__(self, host: FeatureHost | None, owner: type | None = None) -> Feature[N] | N:
        if host is None:
            return self
        made: N = self._make(host)
        host.__dict__[self.name] = made  # later reads find the instance's own attribute
        return made

    def _make(self, host: FeatureHost) -> N:
        if self._namespace is None:
            return None  # type: ignore[return-value]  # Feature[None]: no namespace
        if issubclass(self._namespace, Namespace):
            return self._namespace(host._core_kernel)
        return self._namespace()

    def plugin(self, host: FeatureHost, core: Kernel) -> Plugin:
        """The feature's plug-in for ``host``'s kernel (built when the kernel is)."""
        return self._plugin(core, getattr(host, self.name))


def features_of(host_type: type) -> list[Feature[Any]]:
    """The features declared on ``host_type`` and its bases, base first, each in declaration order."""
    return [f for cls in reversed(host_type.__mro__) for f in vars(cls).values() if isinstance(f, Feature)]
