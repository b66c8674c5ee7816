"""What the routes share: the App they serve, and the problem responses to list in the OpenAPI document.

A route declares the problems of its own (a 404 for its id, a 409 for its state) with ``problems``;
``declare_shared`` adds, to every documented route, the ones the server's layers answer whatever the
route: a bad ``Host`` (400), no or a wrong token (401), a role or an origin refused on a write (403),
a body too large (413) or not JSON (400), a parameter out of bounds (422), an AWS failure (503). So a
route added later declares them too, without anyone remembering to.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, FastAPI, Request

from sqsjobs.api.document import extend
from sqsjobs.api.problems import MEDIA_TYPE, PROBLEMS
from sqsjobs.api.responses import STREAM_EVENTS
from sqsjobs.app import App


def sqsjobs_app(request: Request) -> App:
    """The App ``create_app`` was given (``app.state.sqsjobs``); routers added later use it too."""
    app: App = request.app.state.sqsjobs
    return app


#: A route parameter ``app: AppDep`` receives the App.
AppDep = Annotated[App, Depends(sqsjobs_app)]

#: The problem body's component: one schema every problem response refers to, so a generated client
#: has one ``Problem`` class, not one per operation and status.
PROBLEM = "Problem"
_PROBLEM_SCHEMA = {
    "title": PROBLEM,
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
            "content": {MEDIA_TYPE: {"schema": {"$ref": f"#/components/schemas/{PROBLEM}"}}},
        }
    return out


#: Methods that change something: the browser guard and the roles refuse them (403).
_WRITES = frozenset({"post", "put", "patch", "delete"})


def shared_statuses(method: str, operation: dict[str, Any]) -> set[int]:
    """The problem statuses an operation may answer whatever it does (see the module's docstring)."""
    statuses = {400, 401, 503}  # bad-host, unauthorized, aws-unavailable
    if method in _WRITES:
        statuses |= {403, 413}  # forbidden, cross-origin; body-too-large
    if operation.get("parameters") or operation.get("requestBody"):
        statuses.add(422)
    return statuses


def declare_shared(api: FastAPI) -> None:
    """Make ``api``'s document list the shared problem responses on every operation (those it lists stay).

    And state what the App's registry decides (``sqsjobs.api.document``).

    Done on the document as FastAPI writes it, once: routers are included lazily, so there is no
    list of routes to change beforehand, and a route added by any router gets them.
    """
    build = api.openapi

    def openapi() -> dict[str, Any]:
        if api.openapi_schema is None:
            document = build()
            extend(document, api.state.sqsjobs.registry, api.state.sqsjobs.settings)
            schemas = document.setdefault("components", {}).setdefault("schemas", {})
            schemas[PROBLEM] = _PROBLEM_SCHEMA
            schemas.update(STREAM_EVENTS)  # the event streams' answers refer to them by name
            for operations in document["paths"].values():
                for method, operation in operations.items():
                    answers = operation.setdefault("responses", {})
                    for answer in answers.values():  # FastAPI merges a streamed answer's "type: string" in
                        for content in answer.get("content", {}).values():
                            if "$ref" in content.get("schema", {}):
                                content["schema"] = {"$ref": content["schema"]["$ref"]}
                    for status, response in problems(*shared_statuses(method, operation)).items():
                        answers.setdefault(str(status), response)
        assert api.openapi_schema is not None
        return api.openapi_schema

    api.openapi = openapi  # type: ignore[method-assign]
