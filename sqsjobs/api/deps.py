"""What the routes share: the App they serve, and the problem responses to list in the OpenAPI document."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Request

from sqsjobs.api.problems import MEDIA_TYPE, PROBLEMS
from sqsjobs.app import App


def sqsjobs_app(request: Request) -> App:
    """The App ``create_app`` was given (``app.state.sqsjobs``); routers added later use it too."""
    app: App = request.app.state.sqsjobs
    return app


#: A route parameter ``app: AppDep`` receives the App.
AppDep = Annotated[App, Depends(sqsjobs_app)]

_PROBLEM_SCHEMA = {
    "type": "object",
    "properties": {
        "type": {"type": "string", "enum": sorted(k.type for k in PROBLEMS.values())},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string"},
        "instance": {"type": "string"},
        "field": {
            "type": "string",
            "description": "What to fix: a body member, query parameter, job_id, body",
        },
        "errors": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "field": {"type": "string"},
                    "in": {"type": "string", "enum": ["body", "query", "path", "header"]},
                    "message": {"type": "string"},
                    "type": {"type": "string"},
                },
            },
        },
    },
    "required": ["type", "title", "status", "detail"],
}


def problems(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` for the problem statuses a route may answer (401 and 503 always)."""
    out: dict[int | str, dict[str, Any]] = {}
    for status in sorted({*statuses, 401, 503}):
        titles = sorted(k.title for k in PROBLEMS.values() if k.status == status)
        out[status] = {
            "description": "; ".join(titles),
            "content": {MEDIA_TYPE: {"schema": _PROBLEM_SCHEMA}},
        }
    return out
