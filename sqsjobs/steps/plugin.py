"""The steps feature as the kernel sees it: ``ctx.steps`` for every run, and the ``Sleep`` end of a run."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqsjobs.errors import Sleep
from sqsjobs.runtime.seams import Plugin
from sqsjobs.steps.book import StepBook
from sqsjobs.steps.sleeps import SleepOutcome

if TYPE_CHECKING:
    from sqsjobs.runtime.kernel import Kernel


def steps_plugin(kernel: Kernel) -> Plugin:
    """Steps: ``ctx.steps`` for every run, and the end of a run that sleeps; no job is this feature's otherwise."""
    return Plugin(
        "steps",
        fields=(),
        types=frozenset(),
        context={"steps": StepBook(kernel)},
        outcomes={Sleep: SleepOutcome()},
    )
