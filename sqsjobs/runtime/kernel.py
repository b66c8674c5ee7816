"""The kernel: the frozen context every runtime part reads, built by the App (``App.kernel``).

The App is the root and the façade; below it, the runtime and the features take a ``Kernel``
(or only the part of it they need) instead of the whole App. The App builds one on first use and
builds it again when ``App.configure`` changes the settings, so a kernel never sees half of a
change. Its attribute names are the App's (``settings``, ``clock``, ``registry``, ``run``,
``arun``, ``logger``, ``metrics``, ``tracer``, ``queue_urls``), so code written against either reads
the same. ``plugins`` is the App's ordered list of features (``sqsjobs.runtime.seams``).

The Lambda entry points name the App by dotted path (``SQSJOBS_APP``); ``kernel_from_path`` loads
that object and takes its kernel without this package importing the App.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from sqsjobs.errors import ConfigurationError

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping

    from sqsjobs._aws import AsyncRunner, Flow
    from sqsjobs._clock import Clock
    from sqsjobs.config import Settings
    from sqsjobs.observability.metrics import JobMetrics
    from sqsjobs.observability.tracing import JobTracer
    from sqsjobs.registry import Registry
    from sqsjobs.runtime.seams import AdmissionGuard, FinishHook, MessageKind, Plugin, RunPreparation
    from sqsjobs.transport.queues import QueueUrls

T = TypeVar("T")


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
    #: Run a sans-I/O flow with aioboto3 (the worker's loop).
    arun: AsyncRunner
    #: Close the async clients (a worker's exit).
    aclose: Callable[[], Awaitable[None]]
    logger: Any
    metrics: JobMetrics
    tracer: JobTracer
    queue_urls: QueueUrls
    #: The features, in the App's order (``sqsjobs.runtime.seams.Plugin``).
    plugins: tuple[Plugin, ...] = ()

    @property
    def guards(self) -> list[AdmissionGuard]:
        """The admission guards, in plug-in order."""
        return [p.guard for p in self.plugins if p.guard is not None]

    @property
    def finish_hooks(self) -> list[FinishHook]:
        """The finish hooks, in plug-in order (every finish calls them in this order)."""
        return [p.finish for p in self.plugins if p.finish is not None]

    @property
    def preparations(self) -> list[RunPreparation]:
        """The run preparations, in plug-in order."""
        return [p.prepare for p in self.plugins if p.prepare is not None]

    @property
    def kinds(self) -> Mapping[type, MessageKind]:
        """Envelope class → the feature that handles such messages."""
        return {cls: kind for p in self.plugins for cls, kind in p.kinds.items()}


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
