"""One line of ``sqsjobs doctor``'s report: what was checked, how it stands, and what to do about it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

#: ``fail``: something will misbehave; ``warn``: it depends on how you run; ``ok``: as it should be.
Level = Literal["ok", "warn", "fail"]


@dataclass(frozen=True)
class Check:
    """One line of the report."""

    name: str
    level: Level
    detail: str
    #: What to do about it ('' for ok).
    fix: str = ""

    def to_dict(self) -> dict[str, str | None]:
        """JSON form."""
        return {"name": self.name, "level": self.level, "detail": self.detail, "fix": self.fix or None}
