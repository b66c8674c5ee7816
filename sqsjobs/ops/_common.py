"""Small helpers the operator flows share: durations, the app's queues, who is acting."""

from __future__ import annotations

import getpass
import re
import socket
from datetime import UTC, datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqsjobs.registry import Registry

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86_400.0, "w": 604_800.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")


def parse_duration(text: str) -> float:
    """``90``, ``90s``, ``15m``, ``2h``, ``7d``, ``1w`` → seconds; ``ValueError`` says the accepted form."""
    match = _DURATION.match(text.lower())
    if not match:
        raise ValueError(f"expected a duration like 90s, 15m, 2h or 7d, got {text!r}")
    return float(match.group(1)) * _UNITS[match.group(2) or "s"]


def app_queues(registry: Registry, only: list[str] | None = None) -> list[str]:
    """The logical queues to look at: ``only`` if given, else every queue of the registry's handlers."""
    if only:
        return sorted(set(only))
    return registry.queues() or ["default"]


def actor() -> str:
    """``user@host`` for audit entries."""
    try:
        user = getpass.getuser()
    except (OSError, KeyError):  # containers without a passwd entry
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def iso(ts: float | datetime | None) -> str | None:
    """ISO 8601 in UTC, or None."""
    if ts is None:
        return None
    if isinstance(ts, datetime):
        return ts.astimezone(UTC).isoformat()
    return datetime.fromtimestamp(ts, UTC).isoformat()
