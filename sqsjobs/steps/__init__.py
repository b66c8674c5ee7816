"""Durable steps and sleeps: ``ctx.step(name, fn, *args)`` runs ``fn`` once per job across attempts (docs/steps.md).

``records`` is where a step is kept (an attribute of the job's record, its write fenced by the claim
token), ``book`` what a step does (replay a recorded result, or run and record), ``sleeps`` the end
of a run that sleeps (``ctx.sleep``), and ``steps_plugin`` the one line of ``App._plugins``: it sets
``ctx.steps`` and owns the ``Sleep`` end of a run. A job that takes no step never calls into this
folder: its record has no step, and the kernel asks it about no job (only about a ``Sleep`` raised).
"""

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
