"""An App's telemetry: its logger, its metrics and its tracer, each made on first use.

Made late on purpose: a thin producer that only enqueues never loads Powertools' logger, and the
tracer is decided once, when first asked for (the kernel's build, a first enqueue), so an
OpenTelemetry SDK configured before that is the one used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqsjobs.observability.logs import DeferredLogger

if TYPE_CHECKING:
    from collections.abc import Callable

    from sqsjobs.config import Settings
    from sqsjobs.observability.metrics import JobMetrics
    from sqsjobs.observability.spans import JobTracer


class Telemetry:
    """The logger, EMF metrics and OpenTelemetry tracer of the App named ``name``."""

    def __init__(self, name: str, settings: Callable[[], Settings]) -> None:
        self._name = name
        self._settings = settings
        self._logger: Any = None
        self._metrics: JobMetrics | None = None
        self._tracer: JobTracer | None = None
        self._tracer_decided = False
        #: What enqueues log with: the logger only once a refused message needs it.
        self.deferred_logger = DeferredLogger(lambda: self.logger)

    @property
    def logger(self) -> Any:
        """Powertools JSON logger: one line per job transition."""
        if self._logger is None:
            from sqsjobs.observability.logs import make_logger

            self._logger = make_logger(self._name)
        return self._logger

    @property
    def metrics(self) -> JobMetrics:
        """EMF metrics per job type (``sqsjobs.observability.metrics``); flushed by the worker and the Lambda entry."""
        if self._metrics is None:
            from sqsjobs.observability.metrics import JobMetrics

            settings = self._settings()
            self._metrics = JobMetrics(
                self._name, flush_interval_s=settings.metrics_interval_s, tag_dimensions=settings.metric_tags
            )
        return self._metrics

    @property
    def tracer(self) -> JobTracer | None:
        """The App's OpenTelemetry spans (``sqsjobs.observability.spans``); None when no SDK is configured.

        Without one, nothing in the worker's pipeline calls into OpenTelemetry.
        """
        if not self._tracer_decided:
            from sqsjobs.observability.spans import tracer_for

            self._tracer = tracer_for(self._name, lambda: self.logger)
            self.metrics.traced = self._tracer is not None
            self._tracer_decided = True
        return self._tracer
