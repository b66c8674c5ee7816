"""The current code of a job type whose payload schema changed twice (for tests/integration/test_upcasting.py).

Version 1 was ``{"name": "Ada Lovelace", "email": ...}``; version 2 split the name; version 3 (the
handler here) holds a list of emails. ``profile.update`` reads every version; ``profile.retired``
stopped reading version 1 (its steps start at 2). Each handler returns the payload it was given,
so the record's result shows what the handler saw. ``producer(app, version)`` registers the same
job types as an older deploy did (no model, an older version, a handler that was broken).
"""

from __future__ import annotations

import os
from typing import Any

from pydantic import BaseModel

from sqsjobs import App, JobContext, PayloadVersion, PermanentError


class Profile(BaseModel):
    first: str
    last: str
    emails: list[str]


def v1_to_v2(p: dict[str, Any]) -> dict[str, Any]:
    first, _, last = p.pop("name").partition(" ")
    return {**p, "first": first, "last": last}


def v2_to_v3(p: dict[str, Any]) -> dict[str, Any]:
    return {"first": p["first"], "last": p["last"], "emails": [p["email"]]}


def register(app: App) -> App:
    @app.job("profile.update", version=PayloadVersion(3, upcast={1: v1_to_v2, 2: v2_to_v3}), max_attempts=2)
    def update(payload: Profile, ctx: JobContext) -> dict[str, Any]:
        return payload.model_dump()

    @app.job("profile.retired", version=PayloadVersion(3, upcast={2: v2_to_v3}), max_attempts=2)
    def retired(payload: Profile, ctx: JobContext) -> dict[str, Any]:
        return payload.model_dump()

    return app


def producer(app: App, version: int) -> App:
    """``app`` with both job types registered as a deploy at ``version`` did (dict payloads)."""
    for name in ("profile.update", "profile.retired"):
        app.job(name, version=version, max_attempts=2)(_broken)
    return app


def _broken(payload: dict[str, Any], ctx: JobContext) -> None:
    raise PermanentError("the old deploy's handler was broken")


app = register(App(os.environ.get("TEST_APP_NAME", "upcasting")))
