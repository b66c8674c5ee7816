"""``GET /dlq`` and ``POST /dlq/replay``: what the dead-letter queues hold, and requeueing it (``ops.dlq``, ``ops.replay``).

The same flows as ``sqsjobs dlq list --json`` and ``sqsjobs dlq replay --json``. Listing reads the
DLQs without loss: every message it receives is made visible again before it answers (see
``sqsjobs.ops.dlq``). A replay is a dry run unless the body says ``"dry_run": false``, and requeues
at most ``limit`` jobs (100 unless told otherwise) so that one request ends well within API
Gateway's 30 s; send it again to continue: a re-run never requeues a job twice.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request

from sqsjobs.api import responses
from sqsjobs.api.audit import actor_of, audit
from sqsjobs.api.deps import AppDep, problems
from sqsjobs.api.models import ReplayRequest, is_queue, since_seconds
from sqsjobs.api.problems import MISSING_QUEUE, problem
from sqsjobs.errors import TransportError
from sqsjobs.ops import dlq as dlq_ops
from sqsjobs.ops import inspect as inspect_ops
from sqsjobs.ops import replay as replay_ops
from sqsjobs.ops._common import app_queues
from sqsjobs.ops.requeue import KEEP

router = APIRouter(tags=["dlq"])

#: At most this many messages in one listing.
MAX_LIST = 1000


def _no_such_queue(exc: TransportError, queues: list[str] | None, instance: str) -> Any:
    if not queues or exc.code not in MISSING_QUEUE:
        raise exc
    return problem(
        "no-such-queue",
        f"a queue of {sorted(queues)} does not exist for this App ({exc})",
        field="queue",
        instance=instance,
    )


@router.get(
    "/dlq",
    response_model=responses.DlqMessages,
    response_model_exclude_unset=True,
    responses=problems(422),
    summary="Dead-lettered messages",
)
async def list_dlq(
    app: AppDep,
    job_type: Annotated[list[str] | None, Query(alias="type", description="Only these job types")] = None,
    error_class: Annotated[list[str] | None, Query(description="Only these error classes")] = None,
    queue: Annotated[
        list[str] | None, Query(description="These logical queues' DLQs (default: all of the App's)")
    ] = None,
    since: Annotated[
        str | None, Query(max_length=64, description="Only messages dead-lettered this recently")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIST, description="At most this many messages")] = 100,
) -> Any:
    """What is in the DLQs and why, as ``sqsjobs dlq list --json``; ``record_status`` says if the job is still dead."""
    now = app.clock.now()
    bad = [q for q in queue or () if not is_queue(q)]
    if bad:
        return problem("invalid-request", f"not logical queue names: {bad}", field="queue", instance="/dlq")
    try:
        age = None if since is None else since_seconds(since, now)
    except ValueError as exc:
        return problem("invalid-request", str(exc), field="since", instance="/dlq")
    flt = dlq_ops.DlqFilter(
        types=frozenset(job_type or ()),
        error_classes=frozenset(error_class or ()),
        since=None if age is None else now - age,
    )
    try:
        messages = await app.arun(
            dlq_ops.browse_flow(app.queue_urls, app_queues(app.registry, queue), flt, limit=limit)
        )
    except TransportError as exc:
        return _no_such_queue(exc, queue, "/dlq")
    ids = [m.job_id for m in messages if m.job_id]
    items = await app.arun(inspect_ops.batch_get_flow(app.settings.table_name, ids, ("id", "status")))
    statuses = {i: it["status"]["S"] for i, it in items.items()}
    return {"messages": [m.to_dict() | {"record_status": statuses.get(m.job_id or "")} for m in messages]}


@router.post(
    "/dlq/replay",
    response_model=responses.ReplaySummaryBody,
    response_model_exclude_unset=True,
    responses=problems(409, 413, 422),
    summary="Requeue dead-lettered jobs",
)
async def replay_dlq(body: ReplayRequest, app: AppDep, request: Request) -> Any:
    """Requeue matching dead jobs from the DLQs (re-validated, same id and key, attempts reset, audited).

    ``dry_run`` is true unless the body says false: then nothing changes and the answer says what
    would. The answer is ``sqsjobs dlq replay --json``'s: counts and every message's outcome.
    """
    now = app.clock.now()
    age = None if body.since is None else since_seconds(body.since, now)
    flt = dlq_ops.DlqFilter(
        types=frozenset(body.type),
        error_classes=frozenset(body.error_class),
        job_ids=frozenset(body.job_id),
        since=None if age is None else now - age,
    )
    payload = body.payload if "payload" in body.model_fields_set else KEEP
    queues = app_queues(app.registry, body.queue or None)
    try:
        summary: replay_ops.ReplaySummary = await app.arun(
            replay_ops.replay_flow(
                settings=app.settings,
                registry=app.registry,
                queue_urls=app.queue_urls,
                queues=queues,
                flt=flt,
                clock=app.clock,
                dry_run=body.dry_run,
                limit=body.limit,
                rate=body.rate,
                payload=payload,
                by=actor_of(request),
            )
        )
    except TransportError as exc:
        return _no_such_queue(exc, body.queue, "/dlq/replay")
    if not body.dry_run:
        audit(app, request, "replay_dlq", replayed=summary.requeued, queues=queues)
    return summary.to_dict()
