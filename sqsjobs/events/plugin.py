"""The events feature as the kernel sees it: no seam on a job's path, a sweep pass that relays the change stream locally."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqsjobs.events.catalogue import choice_of
from sqsjobs.events.stream_relay import StreamRelay
from sqsjobs.runtime.seams import Plugin

if TYPE_CHECKING:
    from sqsjobs.runtime.kernel import Kernel


def events_plugin(kernel: Kernel) -> Plugin:
    """Events: no seam on a job's path; the sweeper relays the change stream when ``event_relay`` is set."""
    settings = kernel.settings
    relay = None
    if settings.event_bus and settings.event_relay:
        choice = choice_of(settings, kernel.registry)
        if choice.anything:
            relay = StreamRelay(settings, choice, kernel.arun, kernel.logger)
    # ``fields=()``/``types=frozenset()``: no job is this feature's, so the kernel never calls it for one.
    return Plugin("events", sweep=relay, fields=(), types=frozenset())
