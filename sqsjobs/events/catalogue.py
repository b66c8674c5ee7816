"""Which event a change of the job table is, and what it says: pure, from one change-stream record.

An event is read from the table's change stream (old and new image of one write), not from the
process that wrote it, so every terminal transition is one, whoever made it: a worker's finish, a
reject of an unknown type, the sweeper's expiry, an operator's cancel, a batch's completion. A
refused conditional write leaves no stream record, so a duplicated message or a second worker
never makes a second one.

Each event carries a stable ``event_id`` derived from the transition itself (the record's id, the
state it entered, its attempt and finish time): a stream record delivered twice, or a relay that
restarts from the stream's start, publishes the same id again, and a consumer deduplicates on it.
A replayed job that ends again is a new transition with a new id. The payload is never in an event;
a result is named by its reference (``result_ref``) when it is kept in S3, never copied.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqsjobs.batches import records as batch_records
from sqsjobs.chains import records as chain_records
from sqsjobs.job import JobStatus
from sqsjobs.options import JOB_EVENTS
from sqsjobs.store import codec

if TYPE_CHECKING:
    from collections.abc import Mapping

    from sqsjobs.config import Settings
    from sqsjobs.registry import Registry

#: ``source`` of every event sqsjobs publishes; ``detail-type`` is the event's name.
SOURCE = "sqsjobs"
BATCH_COMPLETED = "BatchCompleted"
CHAIN_COMPLETED = "ChainCompleted"
#: A running job was flagged by the slow-run watch (its record gained ``running_long``).
JOB_RUNNING_LONG = "JobRunningLong"
#: A batch record's id (``batch_records.record_id``; its counter shards' ids add ``#nn``).
BATCH_RECORD_PREFIX = "batch#"
#: Every event name, for ``events=`` and the ``events`` setting.
ALL_EVENTS = frozenset({*JOB_EVENTS.values(), BATCH_COMPLETED, CHAIN_COMPLETED, JOB_RUNNING_LONG})


@dataclass(frozen=True)
class Event:
    """One event to publish."""

    #: ``JobSucceeded``... (EventBridge's ``detail-type``).
    name: str
    #: Stable across re-deliveries of the same transition: deduplicate on it.
    event_id: str
    detail: Mapping[str, Any]

    def entry(self, bus: str) -> dict[str, Any]:
        """The ``PutEvents`` entry for ``bus``."""
        detail = {"event_id": self.event_id, **self.detail}
        return {"Source": SOURCE, "DetailType": self.name, "Detail": json.dumps(detail), "EventBusName": bus}


@dataclass(frozen=True)
class Choice:
    """Which events are published: the App's ``events`` setting, and each type's ``Hooks(events=...)``."""

    app: frozenset[str]
    types: Mapping[str, frozenset[str]]

    def wants(self, name: str, job_type: str | None = None) -> bool:
        """Is ``name`` published (for a job of ``job_type``)?"""
        chosen = self.types.get(job_type, self.app) if job_type is not None else self.app
        return name in chosen

    @property
    def anything(self) -> bool:
        """Is any event published at all?"""
        return bool(self.app) or any(self.types.values())


#: Every event, for every type (the infra filter's test, ``SQSJOBS_EVENTS=all``).
EVERY_EVENT_CHOICE = Choice(ALL_EVENTS, {})


def choice_of(settings: Settings, registry: Registry) -> Choice:
    """The choice an App's settings and registry make; an unknown name is a ``ValueError``."""
    raw = {n.strip() for n in settings.events.split(",") if n.strip()}
    app = ALL_EVENTS if raw == {"all"} else frozenset(raw)
    unknown = app - ALL_EVENTS
    if unknown:
        raise ValueError(
            f"SQSJOBS_EVENTS: unknown events {sorted(unknown)}; choose from {sorted(ALL_EVENTS)}"
        )
    types = {spec.name: spec.events for spec in registry if spec.events is not None}
    return Choice(app, types)


def events_of(record: Mapping[str, Any], choice: Choice) -> list[Event]:
    """The events one change-stream record stands for (none for most: only terminal transitions count)."""
    change = record.get("dynamodb", {})
    new, old = change.get("NewImage"), change.get("OldImage") or {}
    if not new or "id" not in new:
        return []  # a REMOVE (TTL, retention): the end was published when it happened
    key = new["id"]["S"]
    if key.startswith(BATCH_RECORD_PREFIX) and key.count("#") == 1:
        return _batch_event(new, old, choice)
    if key.startswith(chain_records.CHAIN_PREFIX):
        return _chain_event(new, old, choice)
    if "type" not in new or "status" not in new:
        return []  # not a job (a limit's slot, a worker's registry entry, a batch shard)
    return _job_event(new, old, choice)


def _str(image: Mapping[str, Any], name: str) -> str | None:
    value = image.get(name, {}).get("S")
    return None if value is None else str(value)


def _job_event(new: Mapping[str, Any], old: Mapping[str, Any], choice: Choice) -> list[Event]:
    if codec.RUNNING_LONG in new and codec.RUNNING_LONG not in old:
        return _running_long_event(new, choice)
    status = _str(new, "status")
    if status is None or not JobStatus(status).terminal or _str(old, "status") == status:
        return []
    name = JOB_EVENTS[status]
    job = codec.job_from_item(new)
    if not choice.wants(name, job.type):
        return []
    finished = job.finished_at or job.updated_at
    detail = {
        "id": job.id,
        "type": job.type,
        "queue": job.queue,
        "status": status,
        "tenant": job.tenant,
        "attempt": job.attempt,
        "reason": job.reason,
        "error_class": job.last_error.error_class if job.last_error else None,
        "result_ref": job.result_ref,
        "batch_id": job.batch.id if job.batch else None,
        "chain_id": job.chain.id if job.chain else None,
        "finished_at": finished.isoformat(),
    }
    event_id = f"job:{job.id}:{status}:{job.attempt}:{int(finished.timestamp() * 1000)}"
    return [Event(name, event_id, detail)]


def _running_long_event(new: Mapping[str, Any], choice: Choice) -> list[Event]:
    job = codec.job_from_item(new)
    flag = job.running_long
    if flag is None or not choice.wants(JOB_RUNNING_LONG, job.type):
        return []
    detail = {
        "id": job.id,
        "type": job.type,
        "queue": job.queue,
        "tenant": job.tenant,
        "attempt": job.attempt,
        **flag.to_json(),
    }
    return [Event(JOB_RUNNING_LONG, f"job:{job.id}:running_long:{job.attempt}", detail)]


def _batch_event(new: Mapping[str, Any], old: Mapping[str, Any], choice: Choice) -> list[Event]:
    if _str(new, "status") != batch_records.COMPLETE or _str(old, "status") == batch_records.COMPLETE:
        return []
    if not choice.wants(BATCH_COMPLETED):
        return []
    batch = batch_records.read_record(new)
    detail = {
        "id": batch.id,
        "root_id": batch.root_id,
        "parent_id": batch.parent_id,
        "failed": batch.failed,
        "reason": batch.reason,
        "counts": batch.final_counts,
        "callback_id": batch.callback_id,
        "completed_at": batch.completed_at.isoformat() if batch.completed_at else None,
    }
    return [Event(BATCH_COMPLETED, f"batch:{batch.id}:complete", detail)]


def _chain_event(new: Mapping[str, Any], old: Mapping[str, Any], choice: Choice) -> list[Event]:
    state = _str(new, "chain_state")
    if state in (None, chain_records.ChainState.RUNNING) or _str(old, "chain_state") == state:
        return []
    if not choice.wants(CHAIN_COMPLETED):
        return []
    fields = chain_records.chain_fields(new)
    chain_id = new["id"]["S"].removeprefix(chain_records.CHAIN_PREFIX)
    detail = {
        "id": chain_id,
        "status": state,
        "steps": fields["length"],
        "stopped_at": fields["stopped_at"],
        "reason": fields["reason"],
    }
    return [Event(CHAIN_COMPLETED, f"chain:{chain_id}:{state}", detail)]
