"""Dedup modes: how long an idempotency key names one job (docs/dedupe.md).

A feature that plugs into the producer, not the kernel: each mode is a ``KeyPolicy``
(``sqsjobs.options``) that a type or an enqueue names; the producer asks it for the job's id and,
for the two modes that write before the job, to settle it (``sqsjobs.store.enqueue.KeySettler``).
Nothing below the App names a mode: ``modes.py`` holds the four, ``records.py`` the key items that
``WhileActive`` and ``Debounce`` take, ``debounce.py`` the gathering job's writes.
"""

from __future__ import annotations

from sqsjobs.dedupe.modes import Debounce, Dedupe, DedupeFor, Throttle, WhileActive

__all__ = ["Debounce", "Dedupe", "DedupeFor", "Throttle", "WhileActive"]
