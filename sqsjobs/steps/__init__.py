"""Durable steps: ``ctx.step(name, fn, *args)`` runs ``fn`` once per job across attempts (docs/steps.md).

``records`` is where a step is kept (an attribute of the job's record, its write fenced by the claim
token), ``book`` what a step does (replay a recorded result, or run and record), and ``steps_plugin``
the one line of ``App._plugins``: it only sets ``ctx.steps``. A job that takes no step never calls
into this folder: its record has no step, and no seam of the kernel names this feature.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqsjobs.runtime.seams import Plugin
from sqsjobs.steps.book import StepBook

if TYPE_CHECKING:
    from sqsjobs.runtime.kernel import Kernel


def steps_plugin(kernel: Kernel) -> Plugin:
    """Steps: ``ctx.steps`` for every run; no seam (``fields=()``, ``types`` empty: no job is its concern)."""
    return Plugin("steps", fields=(), types=frozenset(), context={"steps": StepBook(kernel)})
