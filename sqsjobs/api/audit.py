"""One audit line per state-changing operator request of the HTTP API.

Why a log line and not only the record: pause, resume, a breaker closed by hand, a batch sealed or a
chain cancelled change items that keep no audit list of their own (the job records' audit entries are
for replays and retries, ``ops.requeue``). Each such request therefore writes one JSON line through the
App's logger (``App.logger``, the same stream as the job transitions): what was done, to what, and by
whom: ``<token name>@<client address>`` (``sqsjobs.api.principals``; ``local@...`` when no token is
configured). A request the state refused writes nothing: nothing changed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqsjobs.api.auth import principal_of
from sqsjobs.ops.requeue import KEEP, retry_flow

if TYPE_CHECKING:
    from fastapi import Request

    from sqsjobs._aws import Flow
    from sqsjobs.app import App
    from sqsjobs.job import Job


def actor_of(request: Request) -> str:
    """``<token name>@<client address>``: who asked, as far as the API can tell."""
    host = request.client.host if request.client else "unknown"
    return f"{principal_of(request).name}@{host}"


def retry_by(app: App, job_id: str, by: str, payload: Any = KEEP) -> Flow[Job]:
    """``App.retry``'s flow, its audit entry on the record naming ``by`` (``actor_of``) instead of the server's user."""
    return retry_flow(
        job_id,
        settings=app.settings,
        registry=app.registry,
        queue_urls=app.queue_urls,
        now=app.clock.now(),
        payload=payload,
        by=by,
    )


def audit(app: App, request: Request, action: str, **fields: Any) -> None:
    """Log that ``action`` was done, with ``fields`` (ids, names, counts) and who asked."""
    app.telemetry.logger.info(
        "operator action",
        extra={"action": action, "by": actor_of(request), "route": request.url.path, **fields},
    )
