"""``app.slow_runs``: a type's own factor, declared in code, and the baselines as the workers read them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqsjobs._aws import async_verb, sync_verb
from sqsjobs.errors import ConfigurationError
from sqsjobs.runtime.kernel import Namespace
from sqsjobs.slow_runs import records

if TYPE_CHECKING:
    from collections.abc import Callable

    from sqsjobs._aws import Flow
    from sqsjobs.runtime.kernel import Kernel


class SlowRuns(Namespace):
    """Each type's factor (``Settings.slow_factor`` unless declared), and ``baselines()``."""

    def __init__(self, kernel: Callable[[], Kernel]) -> None:
        super().__init__(kernel)
        self._factors: dict[str, float] = {}

    def watch(self, job_type: str, *, factor: float) -> None:
        """Flag ``job_type``'s runs past ``factor`` x its p95 (0: never flag this type).

        A report that usually takes a minute and may take ten: ``factor=10``. Declared at import,
        beside the type, so every worker reads the same.
        """
        if factor != 0 and factor <= 1:
            raise ConfigurationError(
                f"slow-run factor of {job_type!r} must be more than 1 (or 0: off), got {factor}"
            )
        self._factors[job_type] = factor

    def factor(self, job_type: str, default: float) -> float:
        """The factor ``job_type``'s runs are measured against (``default``: the App's)."""
        return self._factors.get(job_type, default)

    def _baselines(self) -> Flow[dict[str, records.Baseline]]:
        """Every registered type's baseline the sweeper has written, by type (one BatchGetItem per 100)."""
        kernel = self.kernel
        return records.read_baselines(kernel.settings.table_name, [spec.name for spec in kernel.registry])

    baselines, abaselines = sync_verb(_baselines), async_verb(_baselines)
