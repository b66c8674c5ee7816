"""Publishing events on the bus: ``PutEvents`` ten at a time, each failed entry retried, never dropped.

``PutEvents`` answers 200 with ``FailedEntryCount`` when some entries were refused (throttling, an
internal error): those are sent again with a backoff, and a batch that still fails raises, so that
whoever feeds the publisher (the stream's Lambda, the local relay) does not move past it and sends
it again later. An event may thus be published twice; its ``event_id`` says it is the same.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import tenacity

from sqsjobs._aws import Call, retrying
from sqsjobs.errors import EventsError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sqsjobs._aws import Flow
    from sqsjobs.events.catalogue import Event

#: Entries per ``PutEvents`` request (the API's limit).
#: https://docs.aws.amazon.com/eventbridge/latest/APIReference/API_PutEvents.html
MAX_ENTRIES = 10
_AGAIN = tenacity.Retrying(
    stop=tenacity.stop_after_attempt(5),
    wait=tenacity.wait_exponential(multiplier=0.1, max=2.0),
    retry=tenacity.retry_if_exception_type(EventsError),
    reraise=True,
)


def publish_flow(bus: str, events: Sequence[Event]) -> Flow[int]:
    """Publish ``events`` on ``bus``; how many were sent. ``EventsError`` if some could not be."""
    for start in range(0, len(events), MAX_ENTRIES):
        entries = [e.entry(bus) for e in events[start : start + MAX_ENTRIES]]
        pending = {"entries": entries}
        yield from retrying(lambda pending=pending: _put_flow(pending), _AGAIN)  # type: ignore[misc]
    return len(events)


def _put_flow(pending: dict[str, list[dict[str, Any]]]) -> Flow[None]:
    """One ``PutEvents`` of what is still pending; the refused entries stay pending, and raise."""
    answer = yield Call("events", "put_events", {"Entries": pending["entries"]})
    if not answer.get("FailedEntryCount"):
        return
    results = answer.get("Entries", [])
    refused = [e for e, r in zip(pending["entries"], results, strict=False) if r.get("ErrorCode")]
    pending["entries"] = refused or pending["entries"]
    codes = sorted({str(r.get("ErrorCode")) for r in results if r.get("ErrorCode")})
    raise EventsError(f"PutEvents refused {len(refused)} entries ({', '.join(codes)})", code=",".join(codes))
