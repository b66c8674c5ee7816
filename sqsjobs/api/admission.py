"""One check for every job a request names (``POST /chains`` steps, ``POST /batches/{id}/items``).

``POST /jobs`` builds its job with ``app.producer.build`` and learns of a missing queue from the send;
a chain or a batch writes records before any message, so an unknown queue would fail inside a
transaction (a 503 "AWS call failed") and an unknown step type would be written and never run. Here
each job is built as ``App.enqueue`` builds it (type registered, payload valid, dedup options and
routing within bounds) and each queue it names is resolved, all before anything is written: a
mistake is a 422 naming the member (``steps.2.queue``), as ``POST /jobs`` names its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqsjobs.api.problems import MISSING_QUEUE, from_error, problem
from sqsjobs.errors import SqsJobsError, TransportError

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from fastapi.responses import JSONResponse

    from sqsjobs.app import App
    from sqsjobs.producer import JobRequest


async def refusal(
    app: App,
    jobs: Sequence[tuple[str, JobRequest[Any]]],
    instance: str,
    *,
    aliases: Mapping[str, str] | None = None,
) -> JSONResponse | None:
    """The problem for the first of ``jobs`` (``(member, request)``) that cannot be enqueued, else None.

    One GetQueueUrl pair per queue not resolved before (the App caches them).
    """
    queues: dict[str, str] = {}
    for member, request in jobs:
        try:
            if isinstance(request.type, str):  # HandlerNotFound: an App that is not strict would take it
                app.registry.get(request.type)
            [job] = app.producer.build([request])
        except SqsJobsError as exc:
            return from_error(exc, instance, member=member, aliases=aliases)
        if request.queue is not None:
            queues.setdefault(job.queue, member)
    for route, member in queues.items():
        try:
            await app.arun(app.queue_urls.flow([route]))
        except TransportError as exc:
            if exc.code not in MISSING_QUEUE:
                raise
            return problem(
                "no-such-queue",
                f"{member}: queue {route.split(chr(0))[0]!r} does not exist for this App; "
                "omit queue to use the handler's",
                field=f"{member}.queue",
                instance=instance,
            )
    return None
