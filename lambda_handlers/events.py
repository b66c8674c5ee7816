"""The job events' Lambda entry point: reads the job table's change stream, publishes on the bus.

infra/ names ``sqsjobs.events.stream_relay.handler`` (the zip carries the whole ``sqsjobs`` package); see
``sqsjobs.events.stream_relay`` and docs/events.md.
"""

from __future__ import annotations

from sqsjobs.events.stream_relay import handler

__all__ = ["handler"]
