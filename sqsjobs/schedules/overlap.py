"""A fire's turn: the catch-up window and the overlap policy, decided from the previous fire's job.

At fire time, before its job is enqueued::

    fire(slot) ──▶ older than catchup_s? ── yes ──▶ not made, counted ``missed``
                        │ no
                        ▼
        the schedule's item: last_slot, last_job (strongly consistent read, 1 read unit)
          last_slot == slot  ──▶ its own turn, taken by an earlier delivery: enqueue again (idempotent)
          last_slot >  slot  ──▶ a later occurrence made its job already: not made, ``skipped``
        the previous job's record (1 read unit): ended, or still queued / running / waiting to retry?
          ended (or none)    ──▶ take the turn, enqueue
          not ended, and the policy is
            skip             ──▶ not made, ``skipped``
            buffer_one       ──▶ the first such fire waits (its message re-armed, the item's
                                 ``buffered``), later ones are skipped; it is made once the previous ends
            cancel_previous  ──▶ cancel it (queued: cancelled; running: asked to stop at its next
                                 heartbeat, the operator's cancel path), then take the turn, enqueue

Taking the turn is one write conditional on the item's version as read, so of two fires of one
schedule handled at once, one takes the turn and the other decides again on what it wrote. The turn
is taken before the enqueue: a crash between them leaves a turn whose fire, delivered again, finds
it its own and enqueues. ``allow_all`` reads nothing: it enqueues, then records the fire (1 write
unit) unless a later occurrence was recorded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqsjobs._aws import Call
from sqsjobs.job import JobStatus
from sqsjobs.schedules import records
from sqsjobs.schedules.spec import ALLOW_ALL, BUFFER_ONE, CANCEL_PREVIOUS, SKIP
from sqsjobs.store import operator, requests
from sqsjobs.store.apply import Landed, Refused, apply
from sqsjobs.store.codec import num_attr, str_attr

if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from sqsjobs._aws import Flow
    from sqsjobs.config import Settings

#: Tries to take a turn while other fires of the schedule take theirs.
TURN_TRIES = 5
#: A buffered fire comes back this often to see whether the previous job ended.
BUFFER_RECHECK_S = 10.0
MAKE, SKIPPED, MISSED, WAIT, GONE = "make", "skipped", "missed", "wait", "gone"


@dataclass(frozen=True)
class Turn:
    """What a fire does: ``make`` its job, not (``skipped``, ``missed``, ``gone``: no such schedule), or ``wait``."""

    verdict: str
    #: The previous job this fire's policy cancelled (``cancel_previous``).
    cancelled: str | None = None
    #: A runtime schedule's tenant (its jobs carry it).
    tenant: str | None = None
    #: A runtime schedule's policy and payload, read from its item.
    item: Mapping[str, Any] | None = None


def _previous_active(settings: Settings, job_id: str | None) -> Flow[bool]:
    if not job_id:
        return False
    found = yield Call("dynamodb", "get_item", requests.get(settings.table_name, job_id))
    status = str_attr(found.get("Item") or {}, "status")
    return status is not None and not JobStatus(status).terminal


def _cancel(settings: Settings, job_id: str, now: float) -> Flow[None]:
    """The operator's cancel: a waiting job is cancelled, a running one asked to stop."""
    done = yield from apply(
        operator.cancel(settings.table_name, job_id, now=now, retention_s=settings.retention_s, untold=True)
    )
    if isinstance(done, Refused):
        yield from apply(operator.request_cancel(settings.table_name, job_id, now=now))


def turn_flow(
    settings: Settings,
    fire_key: str,
    *,
    slot: float,
    job_id: str,
    now: float,
    declared: tuple[str, float | None] | None,
) -> Flow[Turn]:
    """Decide whether the occurrence ``slot`` makes ``job_id`` (see the module docstring).

    ``declared``: a declared schedule's overlap and catch-up window; None for a runtime schedule,
    whose item says them.
    """
    overlap, catchup_s = declared if declared is not None else (None, None)
    table, runtime = settings.table_name, records.is_runtime(fire_key)
    tenant = records.split_key(fire_key)[0] if runtime else None
    name = records.split_key(fire_key)[1] if runtime else fire_key
    if declared is not None and overlap == ALLOW_ALL:
        if catchup_s is not None and now - slot > catchup_s:
            yield from apply(records.count(table, fire_key, "missed", 1, runtime=False))
            return Turn(MISSED)
        return Turn(MAKE)
    cancelled: str | None = None
    for _ in range(TURN_TRIES):
        found = yield Call("dynamodb", "get_item", records.get(table, fire_key))
        item = found.get("Item")
        if runtime:
            if item is None:
                return Turn(GONE)
            overlap = str_attr(item, "overlap") or ALLOW_ALL
            catchup_s = num_attr(item, "catchup_s")
            if str_attr(item, "state") == records.PAUSED:
                yield from apply(records.count(table, fire_key, "skipped", 1, runtime=True))
                return Turn(SKIPPED, item=item)
        assert overlap is not None
        last = records.last_slot(item)
        if last is not None and last == slot:
            return Turn(MAKE, tenant=tenant, item=item)
        late = catchup_s is not None and now - slot > catchup_s
        if late or (last is not None and last > slot):
            what = "missed" if late else "skipped"
            yield from apply(records.count(table, fire_key, what, 1, runtime=runtime))
            return Turn(MISSED if what == "missed" else SKIPPED, item=item)
        previous = str_attr(item, "last_job") if item else None
        busy = overlap != ALLOW_ALL and (yield from _previous_active(settings, previous))
        if busy and overlap == SKIP:
            yield from apply(records.count(table, fire_key, "skipped", 1, runtime=runtime))
            return Turn(SKIPPED, item=item)
        version = records.version_of(item)
        if busy and overlap == BUFFER_ONE:
            buffered = num_attr(item, "buffered") if item else None
            if buffered is not None and buffered != slot:
                yield from apply(records.count(table, fire_key, "skipped", 1, runtime=runtime))
                return Turn(SKIPPED, item=item)
            if buffered == slot:
                return Turn(WAIT, item=item)
            marked = yield from apply(records.buffer(table, fire_key, version=version, slot=slot))
            if isinstance(marked, Landed):
                return Turn(WAIT, item=item)
            continue
        if busy and overlap == CANCEL_PREVIOUS and previous is not None and cancelled != previous:
            yield from _cancel(settings, previous, now)
            cancelled = previous
        taken = yield from apply(
            records.take_turn(table, fire_key, version=version, slot=slot, job_id=job_id, now=now, name=name)
        )
        if isinstance(taken, Landed):
            return Turn(MAKE, cancelled=cancelled, tenant=tenant, item=item)
    return Turn(WAIT)  # still contended: the message comes back and decides again


def recorded_flow(settings: Settings, fire_key: str, *, slot: float, job_id: str, now: float) -> Flow[None]:
    """After an ``allow_all`` enqueue: the item shows this fire (unless a later one was recorded)."""
    yield from apply(
        records.record_fire(settings.table_name, fire_key, slot=slot, job_id=job_id, now=now, name=fire_key)
    )
