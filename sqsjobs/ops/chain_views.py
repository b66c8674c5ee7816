"""Operator views of a chain (``sqsjobs chains get``, the HTTP API later): its state as plain data.

The reads themselves are ``sqsjobs.chains.namespace.get_flow`` (one GetItem of the chain record,
one BatchGetItem of its steps' states per 100 steps, strongly consistent: 1 read unit per 4 KB
item, so about 1 + n read units for n steps).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqsjobs.ops._common import iso

if TYPE_CHECKING:
    from sqsjobs.chains.namespace import ChainStatus


def chain_to_dict(status: ChainStatus) -> dict[str, Any]:
    """Everything ``chains get`` shows, JSON-ready (step indexes are 0-based, as ``app.chains.start`` took them)."""
    return {
        "id": status.id,
        "status": status.status,
        "current": status.current,
        "stopped_at": status.stopped_at,
        "reason": status.reason,
        "cancel_requested": status.cancel_requested,
        "created_at": iso(status.created_at),
        "finished_at": iso(status.finished_at),
        "steps": [
            {
                "index": s.position,
                "type": s.type,
                "job_id": s.job_id,
                "status": s.status.value if s.status else None,
            }
            for s in status.steps
        ],
    }
