"""Every error of the API as an RFC 9457 problem: ``application/problem+json`` naming the field at fault.

::

    {"type": "urn:sqsjobs:problem:payload-invalid", "title": "Payload invalid", "status": 422,
     "detail": "payload for 'orders.charge' does not validate: amount: Input should be a valid integer",
     "instance": "/jobs", "field": "payload",
     "errors": [{"field": "payload.amount", "in": "body", "message": "Input should be a valid integer",
                 "type": "int_parsing"}]}

``type`` is one of ``PROBLEMS`` (docs/api.md lists them); ``field`` names what to fix (a body
member, a query parameter, ``job_id`` from the path, or ``body`` for the body as a whole);
``errors`` lists each validation error. Bodies never carry a traceback, and never the input that
failed validation: a payload is echoed neither in a response nor in a log line. An error nobody
expected is a 500 ``internal-error`` whose body says only that; the server logs its traceback.

Refusals of the library map by class (``_BY_ERROR``): an unknown job type and an invalid payload are
422, a payload over ``max_payload_bytes`` 413, an idempotency conflict or a job whose state refuses
the change 409, an unknown job 404, AWS failures 503 (the request may be repeated).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from sqsjobs import errors

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from fastapi import FastAPI, Request

logger = logging.getLogger("sqsjobs.api")

MEDIA_TYPE = "application/problem+json"
_PREFIX = "urn:sqsjobs:problem:"
#: SQS's codes for a queue that does not exist.
MISSING_QUEUE = ("AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist")


@dataclass(frozen=True)
class Kind:
    """One problem type: its status and title."""

    slug: str
    status: int
    title: str

    @property
    def type(self) -> str:
        """The ``type`` URI of its bodies."""
        return _PREFIX + self.slug


#: Every problem type the API answers with, by slug (docs/api.md has the same table).
PROBLEMS: dict[str, Kind] = {
    k.slug: k
    for k in (
        Kind("malformed-json", 400, "Malformed JSON"),
        Kind("lease-invalid", 400, "Lease altered or not issued by this server"),
        Kind("bad-host", 400, "Host name not served"),
        Kind("unauthorized", 401, "Missing or wrong bearer token"),
        Kind("forbidden", 403, "The token's role does not allow this"),
        Kind("cross-origin", 403, "Cross-origin request refused"),
        Kind("not-found", 404, "Not found"),
        Kind("job-not-found", 404, "No such job"),
        Kind("batch-not-found", 404, "No such batch"),
        Kind("chain-not-found", 404, "No such chain"),
        Kind("limit-not-found", 404, "No such limit"),
        Kind("schedule-not-found", 404, "No such runtime schedule"),
        Kind("worker-not-found", 404, "No such worker"),
        Kind("method-not-allowed", 405, "Method not allowed"),
        Kind("idempotency-conflict", 409, "Idempotency key already used with another payload"),
        Kind("invalid-transition", 409, "The job's state does not allow this"),
        Kind("payload-refused", 409, "The current code refuses the job's payload"),
        Kind("batch-sealed", 409, "The batch takes no more items"),
        Kind("invalid-state", 409, "The current state does not allow this"),
        Kind("schedule-exists", 409, "A runtime schedule of this name exists"),
        Kind("lease-conflict", 409, "The lease no longer holds its job"),
        Kind("body-too-large", 413, "Request body too large"),
        Kind("payload-too-large", 413, "Payload too large"),
        Kind("invalid-request", 422, "Invalid request"),
        Kind("unknown-job-type", 422, "Unknown job type"),
        Kind("not-pausable", 422, "The job type's workers never read a pause"),
        Kind("invalid-schedule", 422, "A schedule AWS or sqsjobs would refuse"),
        Kind("payload-invalid", 422, "Payload invalid"),
        Kind("invalid-cursor", 422, "Cursor from another listing"),
        Kind("no-such-queue", 422, "No such queue"),
        Kind("invalid-routing", 422, "Priority or serialize key the queue cannot take"),
        Kind("internal-error", 500, "Internal error"),
        Kind("aws-unavailable", 503, "AWS call failed"),
    )
}

#: The library's refusals: (error class, problem, field at fault). First match wins.
_BY_ERROR: tuple[tuple[type[errors.SqsJobsError], str, str | None], ...] = (
    (errors.HandlerNotFound, "unknown-job-type", "type"),
    (errors.LeaseInvalid, "lease-invalid", "lease"),
    (errors.LeaseConflict, "lease-conflict", "lease"),  # before JobStateError: its own problem
    (errors.PayloadInvalid, "payload-invalid", "payload"),
    (errors.PayloadTooLarge, "payload-too-large", "payload"),
    (errors.PayloadMissing, "payload-refused", "job_id"),
    (errors.IdempotencyConflict, "idempotency-conflict", "idempotency_key"),
    (errors.BatchNotFound, "batch-not-found", "batch_id"),
    (errors.ChainNotFound, "chain-not-found", "chain_id"),
    (errors.ScheduleNotFound, "schedule-not-found", "name"),
    (errors.ScheduleExists, "schedule-exists", "name"),
    (errors.BatchSealed, "batch-sealed", "batch_id"),
    (errors.JobNotFound, "job-not-found", "job_id"),
    (errors.JobStateError, "invalid-transition", "job_id"),  # InvalidTransition, RecordChanged
    (errors.CursorError, "invalid-cursor", "cursor"),
    (errors.RoutingError, "invalid-routing", None),
    (errors.DedupeInvalid, "invalid-request", None),  # its own ``field`` names the option
    (errors.NotifyInvalid, "invalid-request", None),  # its ``field``: notify
    (errors.AwsError, "aws-unavailable", None),
)


#: Fields of ``_BY_ERROR`` that name a member of the job itself (prefixed by ``from_error``'s ``member``).
_JOB_MEMBERS = ("type", "payload", "idempotency_key", None)


def problem(
    slug: str,
    detail: str,
    *,
    field: str | None = None,
    errors: Sequence[dict[str, Any]] = (),
    instance: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    """The response for problem ``slug`` (a key of ``PROBLEMS``)."""
    kind = PROBLEMS[slug]
    body: dict[str, Any] = {"type": kind.type, "title": kind.title, "status": kind.status, "detail": detail}
    if instance is not None:
        body["instance"] = instance
    if field is not None:
        body["field"] = field
    if errors:
        body["errors"] = list(errors)
    return JSONResponse(
        body, status_code=kind.status, media_type=MEDIA_TYPE, headers=dict(headers) if headers else None
    )


def validation_errors(exc: ValidationError, prefix: str, where: str = "body") -> list[dict[str, Any]]:
    """Pydantic's errors as problem entries, fields prefixed (``payload.amount``); never the input."""
    return [
        {
            "field": ".".join([prefix, *(str(p) for p in e["loc"])]),
            "in": where,
            "message": _message(e["msg"]),
            "type": e["type"],
        }
        for e in exc.errors(include_url=False, include_input=False, include_context=False)
    ]


def from_error(
    exc: errors.SqsJobsError,
    instance: str | None = None,
    *,
    member: str | None = None,
    aliases: Mapping[str, str] | None = None,
) -> JSONResponse:
    """The problem for a refusal or failure the library raised.

    ``member``: the request member the failed operation was for (``items.3`` of a list of jobs): it
    prefixes the detail, and the field when the field is the job's own (``items.3.payload``).
    ``aliases``: what the request calls a job's field (``{"idempotency_key": "dedupe_key"}``).
    """
    for cls, slug, field in _BY_ERROR:
        if isinstance(exc, cls):
            found: list[dict[str, Any]] = []
            field = getattr(exc, "field", None) or field
            where = (aliases or {}).get(field or "", field)
            if member is not None and field in _JOB_MEMBERS:
                where = f"{member}.{where}" if where else member
            if isinstance(exc, errors.PayloadInvalid) and isinstance(exc.__cause__, ValidationError):
                found = validation_errors(exc.__cause__, where or "payload")
            if isinstance(exc, errors.AwsError):
                logger.warning("AWS call failed: %s (%s)", type(exc).__name__, exc.code or "no code")
            detail = _one_line(str(exc))
            if member is not None:
                detail = f"{member}: {detail}"
            return problem(slug, detail, field=where, errors=found, instance=instance)
    # ConfigurationError and the rest: the deployment's to fix, not the caller's; the message says what.
    logger.error("request failed: %s: %s", type(exc).__name__, exc)
    return problem("internal-error", _one_line(str(exc)), instance=instance)


def _message(text: str) -> str:
    """Pydantic's message without its ``Value error, `` prefix (our validators' messages stand alone)."""
    return text.removeprefix("Value error, ")


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _request_errors(raw: Iterable[Any]) -> tuple[list[dict[str, Any]], str | None]:
    """FastAPI's request errors as problem entries, and the JSON syntax error among them, if any."""
    entries: list[dict[str, Any]] = []
    syntax = None
    for e in raw:
        where, *path = [str(p) for p in e.get("loc", ())] or ["body"]
        if e.get("type") == "json_invalid":
            reason = (e.get("ctx") or {}).get("error", "not JSON")
            syntax = f"the body is not JSON: {reason} at character {path[0] if path else '?'}"
            entries.append({"field": "body", "in": "body", "message": syntax, "type": "json_invalid"})
            continue
        entries.append(
            {
                "field": ".".join(path) or where,
                "in": where,
                "message": _message(e.get("msg", "")),
                "type": e.get("type"),
            }
        )
    return entries, syntax


async def _on_request_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    entries, syntax = _request_errors(exc.errors())
    instance = request.url.path
    if syntax is not None:
        return problem("malformed-json", syntax, field="body", instance=instance)
    first = entries[0] if entries else {"field": "body", "message": "invalid request"}
    detail = "; ".join(f"{e['field']}: {e['message']}" for e in entries[:5]) or first["message"]
    return problem("invalid-request", detail, field=first["field"], errors=entries, instance=instance)


async def _on_library_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, errors.SqsJobsError)
    return from_error(exc, request.url.path)


async def _on_http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    slug = {404: "not-found", 405: "method-not-allowed", 401: "unauthorized", 403: "forbidden"}.get(
        exc.status_code
    )
    if slug is None:  # e.g. 400 from a body FastAPI could not read at all
        slug = "malformed-json" if exc.status_code == 400 else "invalid-request"
    field = {"malformed-json": "body", "unauthorized": "Authorization"}.get(slug)
    detail = exc.detail if isinstance(exc.detail, str) else PROBLEMS[slug].title
    headers = exc.headers
    if exc.status_code == 405:  # Starlette names the methods of the first route of the path only
        headers = {**(headers or {}), "Allow": ", ".join(allowed_methods(request))}
    return problem(slug, detail, field=field, instance=request.url.path, headers=headers)


def allowed_methods(request: Request) -> list[str]:
    """Every method some route of ``request``'s path answers (``GET /jobs`` and ``POST /jobs`` are two routes).

    Each method is tried against the routes: FastAPI includes routers lazily, so there is no flat
    list of routes to read the methods from.
    """
    routes = request.app.router.routes
    return [
        method
        for method in _METHODS
        if any(route.matches({**request.scope, "method": method})[0] is Match.FULL for route in routes)
    ]


_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")


async def _on_unexpected(request: Request, exc: Exception) -> JSONResponse:
    # Starlette's ServerErrorMiddleware calls this, then re-raises for the server to log the traceback.
    return problem(
        "internal-error",
        "the server failed to answer this request; its log has the details",
        instance=request.url.path,
    )


def install(app: FastAPI) -> None:
    """Answer every error of ``app`` with a problem body."""
    app.add_exception_handler(RequestValidationError, _on_request_error)
    app.add_exception_handler(errors.SqsJobsError, _on_library_error)
    app.add_exception_handler(StarletteHTTPException, _on_http_error)
    app.add_exception_handler(Exception, _on_unexpected)
