"""Following a job, a batch or a chain live (Server-Sent Events), and a read token scoped to one job.

A page that shows a long job wants each progress report and the end as they happen, without
reading the table itself. The server reads the record for it (one strongly consistent GetItem per
``poll_s``, default 1 s: 1 read unit for a record under 4 KB, so an hour of watching costs 3,600
read units, about $0.0009 on demand) and sends what changed as SSE events: ``status`` (the
status and attempt), ``progress`` (``ctx.progress``, as the lease renewal wrote it), and, once the
job ended, ``end`` (the whole record, as ``GET /jobs/{id}``), after which the stream closes. A
stream also closes after ``max_s`` (a browser's ``EventSource`` then reconnects by itself); a
comment line every 15 s keeps proxies from closing an idle one. ``GET /batches/{id}/events`` and
``GET /chains/{id}/events`` do the same for a workflow: a ``status`` event with the whole view
(``GET /batches/{id}``: counts, state, the tree; ``GET /chains/{id}``: each step) whenever it
changed, and ``end`` with the last one (a batch complete, a chain no longer running). Every stream
is one loop (``_follow``) over what it follows (``Followed``); one whose record went meanwhile
(its retention ran out) ends with ``gone``. Behind API Gateway, which buffers
an answer and cuts it at 29 s, the Lambda API caps a stream at ``STREAM_CAP_ENV`` (25 s): each
stream then arrives whole and the ``EventSource`` asks again, a long poll of the same events.

A browser's ``EventSource`` cannot send an ``Authorization`` header, so a backend that holds an API
token asks ``GET /jobs/{id}/watch-token`` and hands the browser the token it answers: signed
(itsdangerous, HMAC-SHA256 with the key HTTP workers' leases use, under a salt of its own),
naming one job and an expiry, and good for nothing but reading that job (``GET /jobs/{id}`` and
``GET /jobs/{id}/events``, with ``?watch=<token>``). Nothing is stored: a token cannot be revoked
before it expires, so keep ``ttl_s`` short. A request it authenticates is answered with
``Access-Control-Allow-Origin: *`` (no cookie rides on it), so a page on another origin can follow.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Generic, TypeVar
from urllib.parse import quote

from fastapi import APIRouter, Query, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field

from sqsjobs.api.deps import AppDep, problems
from sqsjobs.api.models import BatchId, ChainId, JobId  # noqa: TC001 (FastAPI reads the annotations at runtime)
from sqsjobs.batches import namespace as batches_namespace
from sqsjobs.errors import ChainNotFound, JobNotFound, StoreError
from sqsjobs.job import TERMINAL
from sqsjobs.ops import batch_views, job_views
from sqsjobs.ops._common import iso
from sqsjobs.ops.chain_views import chain_to_dict

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable

    from sqsjobs.job import Job

#: The query parameter a watch token travels in.
WATCH_PARAM = "watch"
SALT = "sqsjobs.watch.v1"
#: The longest a watch token lives (a day); the default is ten minutes.
MAX_TTL_S = 86_400.0
#: A comment line this often keeps an idle stream open through proxies.
KEEPALIVE_S = 15.0
#: Every stream's two query parameters: how often it reads, and how long it stays open.
PollS = Annotated[float, Query(ge=0.2, le=30, description="How often the record is read (s)")]
MaxS = Annotated[float, Query(ge=1, le=3600, description="The stream closes after this long (s)")]

#: What a stream follows: a job's record, or a workflow's view.
S = TypeVar("S")

router = APIRouter(tags=["jobs"])


class EventStream(StreamingResponse):
    """An answer of Server-Sent Events (``text/event-stream``), as the OpenAPI document says it."""

    media_type = "text/event-stream"


def stream_answer(description: str, event: str) -> dict[int | str, dict[str, Any]]:
    """The documented answers of an event stream: 200 with the schema of one event, and the problems."""
    schema = {"$ref": f"#/components/schemas/{event}"}  # responses.STREAM_EVENTS
    return {
        200: {"description": description, "content": {"text/event-stream": {"schema": schema}}},
        **problems(404, 422),
    }


class WatchTokens:
    """Signs tokens that read one job, and reads them back; it keeps nothing."""

    def __init__(self, key: str) -> None:
        """Sign with ``key`` (the lease key: the same on every instance that serves the App)."""
        from itsdangerous import URLSafeSerializer

        self._serializer = URLSafeSerializer(key, salt=SALT)

    def issue(self, job_id: str, ttl_s: float, now: float) -> tuple[str, float]:
        """A token that reads ``job_id`` until ``now + ttl_s``, and that expiry."""
        expires = now + ttl_s
        return str(self._serializer.dumps({"job": job_id, "exp": round(expires, 3)})), expires

    def job_of(self, token: str, now: float) -> str | None:
        """The job ``token`` reads, or None: not signed by this key, altered, or expired."""
        from itsdangerous import BadSignature

        try:
            data = self._serializer.loads(token)
        except BadSignature:
            return None
        if not isinstance(data, dict) or not isinstance(data.get("exp"), int | float):
            return None
        job = data.get("job")
        return job if isinstance(job, str) and data["exp"] > now else None


def scope_paths(job_id: str) -> frozenset[str]:
    """The paths a watch token of ``job_id`` may read."""
    base = f"/jobs/{quote(job_id, safe='')}"
    return frozenset({base, f"{base}/events"})


class WatchToken(BaseModel):
    """A token that reads one job, for a browser: pass it as ``?watch=`` (an ``EventSource`` sends no header)."""

    token: str
    job_id: str
    expires_at: str = Field(description="After this instant the token reads nothing")
    events: str = Field(description="The job's event stream, token included: new EventSource(events)")
    job: str = Field(description="The job's record, token included")


@router.get(
    "/jobs/{job_id}/watch-token",
    response_model=WatchToken,
    responses=problems(404, 422),
    summary="A read token scoped to one job (for a browser)",
)
async def watch_token(
    job_id: JobId,
    app: AppDep,
    request: Request,
    ttl_s: Annotated[float, Query(ge=10, le=MAX_TTL_S, description="How long it lives (s)")] = 600.0,
) -> WatchToken:
    """A token that reads this job only, and only until it expires: hand it to a browser to follow the job.

    The job must exist (404). See ``GET /jobs/{job_id}/events``.
    """
    await app.aget(job_id, load_result=False)
    token, expires = watch_tokens(request).issue(job_id, ttl_s, time.time())
    path = f"/jobs/{quote(job_id, safe='')}"
    return WatchToken(
        token=token,
        job_id=job_id,
        expires_at=str(iso(expires)),
        events=f"{path}/events?{WATCH_PARAM}={token}",
        job=f"{path}?{WATCH_PARAM}={token}",
    )


@router.get(
    "/jobs/{job_id}/events",
    response_class=EventStream,
    responses=stream_answer(
        "Server-Sent Events, each with JSON data: status, progress, then end (the record)", "JobStreamEvent"
    ),
    summary="Follow one job live (Server-Sent Events)",
)
async def job_events(
    job_id: JobId,
    app: AppDep,
    request: Request,
    poll_s: PollS = 1.0,
    max_s: MaxS = 900.0,
) -> EventStream:
    """The job's changes as they happen: ``status``, ``progress``, then ``end`` with the record, and the stream closes.

    Each event's data is JSON. The first events describe the job as it is when the stream opens.
    Authenticate with a token, a console session, or ``?watch=`` (``GET /jobs/{job_id}/watch-token``).
    A job that does not exist is 404 before the stream starts.
    """

    async def read() -> Job:
        return await app.aget(job_id, load_result=False)

    async def final(job: Job) -> dict[str, Any]:
        return job_views.job_to_dict(await app.aget(job.id))  # the result read too

    followed = Followed(job_id, read, _job_changes, lambda job: job.status in TERMINAL, final)
    return await _answer(request, followed, poll_s, max_s)


def _job_changes(before: Job | None, job: Job) -> list[tuple[str, Any]]:
    """A job's events between two reads: its status (or attempt) moved, a new progress report."""
    changes: list[tuple[str, Any]] = []
    if before is None or (before.status, before.attempt) != (job.status, job.attempt):
        changes.append(("status", {"status": job.status.value, "attempt": job.attempt, "reason": job.reason}))
    if job.progress is not None and (before is None or before.progress != job.progress):
        changes.append(("progress", job_views.progress_to_dict(job.progress)))
    return changes


_STREAM = stream_answer(
    "Server-Sent Events, each with JSON data: status (the whole view), then end", "WorkflowStreamEvent"
)


@router.get(
    "/batches/{batch_id}/events",
    response_class=EventStream,
    responses=_STREAM,
    summary="Follow a batch live (Server-Sent Events)",
    tags=["workflows"],
)
async def batch_events(
    batch_id: BatchId,
    app: AppDep,
    request: Request,
    poll_s: PollS = 1.0,
    max_s: MaxS = 900.0,
) -> EventStream:
    """The batch as ``GET /batches/{batch_id}`` shows it, each time it changed; ``end`` once it is complete.

    Each read is the batch's tree (its record, and its child batches'). A batch that does not exist
    is 404 before the stream starts.
    """

    async def read() -> dict[str, Any]:
        node = await app.arun(batch_views.tree_flow(batches_namespace.env_of(app.kernel), batch_id))
        return batch_views.node_to_dict(node)

    return await _answer(
        request, _view(batch_id, read, lambda view: view["status"] == "complete"), poll_s, max_s
    )


@router.get(
    "/chains/{chain_id}/events",
    response_class=EventStream,
    responses=_STREAM,
    summary="Follow a chain live (Server-Sent Events)",
    tags=["workflows"],
)
async def chain_events(
    chain_id: ChainId,
    app: AppDep,
    request: Request,
    poll_s: PollS = 1.0,
    max_s: MaxS = 900.0,
) -> EventStream:
    """The chain as ``GET /chains/{chain_id}`` shows it, each time it changed; ``end`` once it stopped running.

    A chain that does not exist is 404 before the stream starts.
    """

    async def read() -> dict[str, Any]:
        return chain_to_dict(await app.chains.aget(chain_id))

    return await _answer(
        request, _view(chain_id, read, lambda view: view["status"] != "running"), poll_s, max_s
    )


@dataclass(frozen=True)
class Followed(Generic[S]):
    """What one stream follows: how to read it, its events between two reads, when it ended and what its end says."""

    id: str
    read: Callable[[], Awaitable[S]]
    changes: Callable[[S | None, S], list[tuple[str, Any]]]
    ended: Callable[[S], bool]
    final: Callable[[S], Awaitable[Any]]


def _view(
    view_id: str, read: Callable[[], Awaitable[dict[str, Any]]], ended: Callable[[dict[str, Any]], bool]
) -> Followed[dict[str, Any]]:
    """A workflow's stream: ``status`` with the whole view each time it changed, then ``end`` with the last."""

    def changes(before: dict[str, Any] | None, view: dict[str, Any]) -> list[tuple[str, Any]]:
        return [("status", view)] if view != before and not ended(view) else []

    async def final(view: dict[str, Any]) -> dict[str, Any]:
        return view

    return Followed(view_id, read, changes, ended, final)


async def _answer(request: Request, followed: Followed[S], poll_s: float, max_s: float) -> EventStream:
    """The stream of ``followed``, read once first (a 404 before the stream starts), capped as the API says."""
    first = await followed.read()
    cap: float | None = request.app.state.sqsjobs_max_stream_s
    return EventStream(
        _follow(request, followed, first, poll_s=poll_s, max_s=max_s if cap is None else min(max_s, cap)),
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


async def _follow(
    request: Request, followed: Followed[S], state: S, *, poll_s: float, max_s: float
) -> AsyncIterator[str]:
    """Read every ``poll_s`` and say what changed, until it ends, the client goes, or ``max_s``."""
    started = last_sent = time.monotonic()
    before: S | None = None
    yield "retry: 2000\n\n"  # an EventSource that lost the stream comes back after 2 s
    while True:
        for name, data in followed.changes(before, state):
            yield _event(name, data)
            last_sent = time.monotonic()
        before = state
        if followed.ended(state):
            yield _event("end", await followed.final(state))
            return
        remaining = started + max_s - time.monotonic()
        if remaining <= 0 or await request.is_disconnected():
            return
        await asyncio.sleep(min(poll_s, remaining))  # a stream ends at max_s, however slow its polls
        if time.monotonic() - last_sent >= KEEPALIVE_S:
            yield ": keep-alive\n\n"
            last_sent = time.monotonic()
        try:
            state = await followed.read()
        except (JobNotFound, ChainNotFound):  # its retention ran out while it was watched
            yield _event("gone", {"id": followed.id})
            return
        except StoreError:  # a throttled or failed read: the next one tells
            continue


def _event(name: str, data: Any) -> str:
    """One SSE event: its name and its JSON data on one line (JSON never holds a raw newline)."""
    return f"event: {name}\ndata: {json.dumps(data, default=str, separators=(',', ':'))}\n\n"


def watch_tokens(request: Request) -> WatchTokens:
    """The API's watch-token signer (``create_app`` sets it up with the lease key)."""
    signer: WatchTokens = request.app.state.sqsjobs_watch
    return signer
