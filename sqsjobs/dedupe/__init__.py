"""Dedup modes: how long an idempotency key names one job (docs/dedupe.md).

A feature that plugs into the producer, not the kernel: each mode is a ``KeyPolicy``
(``sqsjobs.options``) that a type or an enqueue names; the producer asks it for the job's id and,
for the modes that write before the job, to settle it (``sqsjobs.store.enqueue.KeySettler``).
Nothing below the App names a mode: ``modes.py`` holds the five, ``records.py`` the key items that
``WhileActive``, ``Replace`` and ``Debounce`` take (and ``Replace``'s ``supersede`` row),
``debounce.py`` the gathering job's writes.
"""

from __future__ import annotations

from sqsjobs.dedupe.modes import Debounce, Dedupe, DedupeFor, Replace, Throttle, WhileActive

__all__ = ["Debounce", "Dedupe", "DedupeFor", "Replace", "Throttle", "WhileActive"]
