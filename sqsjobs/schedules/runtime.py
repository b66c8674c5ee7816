"""Schedules made at runtime (``app.schedules.create``): one per customer, made and changed by the app's code.

A runtime schedule lives in EventBridge Scheduler like a declared one, but in a group of its own
(``Settings.runtime_schedule_group``) that ``schedules apply`` never reads or changes, and it has an
item in the jobs table (``schedules/records.py``) holding its definition and what its last fire did.
The listing reads those items (a Query of the ``tags`` index per tenant, or ListSchedules of the
group for all tenants, then BatchGetItem), never a scan.

What each verb costs (EventBridge Scheduler bills no API request, only invocations: $1.00 per
million after the free tier):

- create: one PutItem (1 write unit, +1 index write unit), one CreateSchedule (a first one also
  CreateScheduleGroup), and the queue ARNs (two GetQueueAttributes);
- update: one GetItem, one UpdateItem (1 write unit), one UpdateSchedule, and the queue ARNs;
- pause / resume: one GetItem, one UpdateItem, one UpdateSchedule (a resume also one SendMessage per
  occurrence caught up, and one UpdateItem counting those missed); delete: one DeleteSchedule and one
  DeleteItem.

A runtime schedule's Scheduler name is ``<tenant>.<name>`` (``.<name>`` without a tenant): a tenant has
no ``.``, so the two parts never run together; its fires name it ``~<tenant>.<name>``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from sqsjobs._aws import Call
from sqsjobs.envelope import SCHEDULED_TIME, Fire
from sqsjobs.errors import (
    ConfigurationError,
    HandlerNotFound,
    PayloadError,
    ScheduleExists,
    ScheduleNotFound,
    SchedulerError,
)
from sqsjobs.schedules import records
from sqsjobs.schedules.expressions import iso_utc
from sqsjobs.schedules.spec import NAME_PATTERN, ScheduleSpec, build_spec, empty_payload
from sqsjobs.schedules.sync import LIST_PAGE, MAX_INPUT_BYTES, queue_arns_flow, role_arn, schedule_request
from sqsjobs.store import batched
from sqsjobs.store.apply import Landed, Refused, apply
from sqsjobs.store.codec import av_s, num_attr, str_attr
from sqsjobs.transport import sqs
from sqsjobs.transport.queues import dlq_key

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from datetime import datetime, timedelta

    from sqsjobs._aws import Flow
    from sqsjobs.runtime.kernel import Kernel
    from sqsjobs.store.codec import Item

#: A tenant: letters, digits, ``-`` and ``_`` (no ``.``: it ends the tenant in the Scheduler name).
TENANT_PATTERN = re.compile(r"^[0-9a-zA-Z_-]{1,48}$")
#: At most this many occurrences are caught up at once (a resume after a long pause of a short rate):
#: older ones in the window are counted missed like those before it.
MAX_CATCHUP_FIRES = 100
#: Missed occurrences are counted up to this many per catch-up.
MAX_COUNTED = 10_000
_NOT_FOUND = "ResourceNotFoundException"


@dataclass(frozen=True)
class ScheduleView:
    """One schedule as ``list`` and ``get`` show it: its definition, its state and its last fire."""

    name: str
    tenant: str | None
    #: ``runtime`` or ``declared``.
    kind: str
    expression: str
    timezone: str
    job: str
    overlap: str
    catchup_s: float | None
    #: ``active`` or ``paused`` (a declared schedule is always active).
    state: str = records.ACTIVE
    payload: Any = None
    created_at: float | None = None
    paused_at: float | None = None
    #: The latest occurrence that made a job, when, and that job's id and status now.
    last_slot: float | None = None
    last_fired_at: float | None = None
    last_job: str | None = None
    last_outcome: str | None = None
    #: Occurrences made, skipped by the overlap policy, missed (past the catch-up window).
    fires: int = 0
    skipped: int = 0
    missed: int = 0
    next_fires: tuple[float, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (times as ISO 8601 UTC)."""
        out = dict(self.__dict__)
        for name in ("created_at", "paused_at", "last_slot", "last_fired_at"):
            out[name] = iso_utc(out[name]) if out[name] is not None else None
        out["next_fires"] = [iso_utc(t) for t in self.next_fires]
        return out


def check_tenant(tenant: str | None) -> None:
    """``ConfigurationError`` for a tenant a Scheduler name cannot carry."""
    if tenant is not None and not TENANT_PATTERN.match(tenant):
        raise ConfigurationError(f"tenant {tenant!r} must be 1-48 letters, digits, '-' or '_'")


def _names(tenant: str | None, name: str) -> str:
    check_tenant(tenant)
    full = records.runtime_name(tenant, name)
    if not NAME_PATTERN.match(name) or not NAME_PATTERN.match(full):
        raise ConfigurationError(
            f"schedule name {name!r} must be letters, digits, '-', '_' or '.', at most 64 with its tenant"
        )
    return records.runtime_key(tenant, name)


def spec_of(fire_key: str, item: Mapping[str, Any]) -> ScheduleSpec:
    """A runtime schedule's definition, read from its item (its name: the fire key)."""
    expression = str_attr(item, "expression") or ""
    kind = expression.partition("(")[0]
    body = expression[len(kind) + 1 : -1]
    spec = build_spec(
        "x",
        job=str_attr(item, "job") or "?",
        when={kind: body},
        timezone=str_attr(item, "timezone") or "UTC",
        payload=records.payload_of(item),
        overlap=str_attr(item, "overlap") or "allow_all",
        catchup_window=num_attr(item, "catchup_s"),
    )
    return replace(spec, name=fire_key)


def next_fires(spec: ScheduleSpec, *, now: float, anchor: float, count: int) -> tuple[float, ...]:
    """The next ``count`` fire instants after ``now``."""
    fires: list[float] = []
    after = now
    while len(fires) < count and (nxt := spec.next_fire(after, anchor=anchor)) is not None:
        fires.append(nxt)
        after = nxt
    return tuple(fires)


def catch_up(spec: ScheduleSpec, *, since: float, now: float, anchor: float) -> tuple[list[float], int]:
    """The occurrences after ``since`` up to ``now``: those in the catch-up window, and how many older.

    Each occurrence in the window is made once (then judged by the overlap policy, as Temporal's
    catch-up does), so ``allow_all`` makes them all and ``skip`` the first: at most the latest
    ``MAX_CATCHUP_FIRES``, the rest counted missed (up to ``MAX_COUNTED``). Walked back from ``now``,
    so a long pause of a short rate costs no more than that.
    """
    low = float("-inf") if spec.catchup_s is None else now - spec.catchup_s
    slots: list[float] = []
    older = 0
    slot = spec.slot_at_or_before(now, anchor=anchor)
    while slot is not None and since < slot <= now and older < MAX_COUNTED:
        if slot >= low and len(slots) < MAX_CATCHUP_FIRES:
            slots.append(slot)
        else:
            older += 1
        slot = spec.slot_at_or_before(slot - 1e-3, anchor=anchor)
    slots.reverse()
    return slots, older


def _request_flow(
    k: Kernel, fire_key: str, spec: ScheduleSpec, payload: Any, *, enabled: bool
) -> Flow[dict[str, Any]]:
    """The CreateSchedule/UpdateSchedule request of a runtime schedule."""
    queue = k.registry.get(spec.job).queue
    arns = yield from queue_arns_flow(k.queue_urls, {queue})
    body = Fire(schedule=fire_key, at=SCHEDULED_TIME, job_type=spec.job, payload=payload).to_body()
    if len(body.encode()) > MAX_INPUT_BYTES:
        raise ConfigurationError(
            f"schedule {fire_key!r}: its input is over Scheduler's {MAX_INPUT_BYTES} bytes"
        )
    return schedule_request(
        spec,
        name=fire_key.removeprefix(records.RUNTIME_MARK),
        group=k.settings.runtime_schedule_group,
        input_body=body,
        arns=(arns[queue], arns[dlq_key(queue)]),
        role=role_arn(k.settings),
        description=f"sqsjobs app {k.name}: runtime schedule, enqueues {spec.job}",
        enabled=enabled,
    )


def _stored_payload(k: Kernel, spec: ScheduleSpec) -> Any:
    try:
        handler = k.registry.get(spec.job)
        return empty_payload(handler) if spec.payload is None else handler.dump(spec.payload)
    except (HandlerNotFound, PayloadError) as exc:
        raise ConfigurationError(f"schedule {spec.name!r}: {exc}") from None


def _scheduler_write(k: Kernel, call: Call) -> Flow[None]:
    """Create or update a schedule, making the runtime group on the first one (an emulator's; infra makes it)."""
    try:
        yield call
    except SchedulerError as exc:
        if exc.code != _NOT_FOUND or call.operation != "create_schedule":
            raise
        try:
            yield Call("scheduler", "create_schedule_group", {"Name": k.settings.runtime_schedule_group})
        except SchedulerError as again:
            if again.code != "ConflictException":
                raise
        yield call


def create_flow(
    k: Kernel,
    name: str,
    *,
    job: str,
    cron: str | None = None,
    rate: str | None = None,
    at: str | datetime | None = None,
    timezone: str = "UTC",
    payload: Any = None,
    tenant: str | None = None,
    overlap: str = "allow_all",
    catchup_window: timedelta | float | None = None,
    paused: bool = False,
) -> Flow[ScheduleView]:
    """Make a runtime schedule: its item first (refused if it exists), then the Scheduler schedule."""
    key = _names(tenant, name)
    spec = replace(
        build_spec(
            name,
            job=job,
            when={"cron": cron, "rate": rate, "at": at},
            timezone=timezone,
            payload=payload,
            overlap=overlap,
            catchup_window=catchup_window,
        ),
        name=key,
    )
    stored = _stored_payload(k, spec)
    request = yield from _request_flow(k, key, spec, stored, enabled=not paused)
    table, now = k.settings.table_name, k.clock.now()
    attrs = records.definition(
        expression=spec.expression,
        timezone=spec.timezone,
        job=spec.job,
        payload=stored,
        overlap=spec.overlap,
        catchup_s=spec.catchup_s,
    )
    made = yield from apply(records.create(table, tenant, name, attrs, paused=paused, now=now))
    if isinstance(made, Refused):
        raise ScheduleExists(f"a runtime schedule {name!r} exists already for tenant {tenant!r}")
    try:
        yield from _scheduler_write(k, Call("scheduler", "create_schedule", request))
    except BaseException:
        yield from apply(records.delete(table, key))  # no item without its schedule
        raise
    return (yield from get_flow(k, name, tenant=tenant))


def _item_flow(k: Kernel, tenant: str | None, name: str) -> Flow[tuple[str, Item]]:
    key = _names(tenant, name)
    found = yield Call("dynamodb", "get_item", records.get(k.settings.table_name, key))
    if "Item" not in found:
        raise ScheduleNotFound(f"no runtime schedule {name!r} for tenant {tenant!r}")
    return key, dict(found["Item"])


class _Unchanged:
    """``update``'s default for an option that may be set to None (``payload``, ``catchup_window``)."""

    def __repr__(self) -> str:
        return "UNCHANGED"


#: What ``update`` leaves as it is.
UNCHANGED: Any = _Unchanged()


def update_flow(
    k: Kernel,
    name: str,
    *,
    tenant: str | None = None,
    job: str | None = None,
    cron: str | None = None,
    rate: str | None = None,
    at: str | datetime | None = None,
    timezone: str | None = None,
    payload: Any = UNCHANGED,
    overlap: str | None = None,
    catchup_window: timedelta | float | None = UNCHANGED,
) -> Flow[ScheduleView]:
    """Change a runtime schedule's definition; what is not given stays, and so do its history and state.

    One of ``cron``/``rate``/``at`` replaces the schedule's expression; ``payload`` and
    ``catchup_window`` may be set to None (no payload, no window), so they default to ``UNCHANGED``.
    """
    key, item = yield from _item_flow(k, tenant, name)
    old = spec_of(key, item)
    when: dict[str, Any] = {w: v for w, v in (("cron", cron), ("rate", rate), ("at", at)) if v is not None}
    if not when:
        when = {old.kind: old.expression[len(old.kind) + 1 : -1]}
    spec = replace(
        build_spec(
            name,
            job=job or old.job,
            when=when,
            timezone=timezone or old.timezone,
            payload=old.payload if payload is UNCHANGED else payload,
            overlap=overlap or old.overlap,
            catchup_window=old.catchup_s if catchup_window is UNCHANGED else catchup_window,
        ),
        name=key,
    )
    stored = _stored_payload(k, spec)
    paused = str_attr(item, "state") == records.PAUSED
    request = yield from _request_flow(k, key, spec, stored, enabled=not paused)
    attrs = records.definition(
        expression=spec.expression,
        timezone=spec.timezone,
        job=spec.job,
        payload=stored,
        overlap=spec.overlap,
        catchup_s=spec.catchup_s,
    )
    done = yield from apply(records.redefine(k.settings.table_name, key, attrs))
    if isinstance(done, Refused):
        raise ScheduleNotFound(f"no runtime schedule {name!r} for tenant {tenant!r}")
    yield from _scheduler_write(k, Call("scheduler", "update_schedule", request))
    return (yield from get_flow(k, name, tenant=tenant))


def pause_flow(k: Kernel, name: str, *, tenant: str | None = None) -> Flow[ScheduleView]:
    """Stop a runtime schedule firing (Scheduler's state DISABLED); what it misses a resume may catch up."""
    key, item = yield from _item_flow(k, tenant, name)
    if str_attr(item, "state") != records.PAUSED:
        spec = spec_of(key, item)
        request = yield from _request_flow(k, key, spec, records.payload_of(item), enabled=False)
        yield from apply(records.set_state(k.settings.table_name, key, paused=True, now=k.clock.now()))
        yield from _scheduler_write(k, Call("scheduler", "update_schedule", request))
    return (yield from get_flow(k, name, tenant=tenant))


def resume_flow(k: Kernel, name: str, *, tenant: str | None = None) -> Flow[ScheduleView]:
    """Fire again; the occurrences missed while paused that are within the catch-up window are sent now.

    Each is sent as the fire Scheduler would have sent (its time filled in), so the worker makes it
    through the overlap policy and a repeated resume makes nothing twice (one job per occurrence).
    """
    key, item = yield from _item_flow(k, tenant, name)
    if str_attr(item, "state") != records.PAUSED:
        return (yield from get_flow(k, name, tenant=tenant))
    spec, now, table = spec_of(key, item), k.clock.now(), k.settings.table_name
    paused_at = num_attr(item, "paused_at") or now
    since = max(paused_at, records.last_slot(item) or paused_at)
    slots, older = catch_up(spec, since=since, now=now, anchor=num_attr(item, "created_at") or now)
    request = yield from _request_flow(k, key, spec, records.payload_of(item), enabled=True)
    yield from _scheduler_write(k, Call("scheduler", "update_schedule", request))
    yield from apply(records.set_state(table, key, paused=False, now=now))
    if slots:
        queue = k.registry.get(spec.job).queue
        urls = yield from k.queue_urls.flow([queue])
        for slot in slots:
            body = Fire(key, iso_utc(slot), spec.job, records.payload_of(item)).to_body()
            yield Call("sqs", "send_message", sqs.send_one(urls[queue], body))
    if older:
        yield from apply(records.count(table, key, "missed", older, runtime=True))
    k.logger.info(
        "runtime schedule resumed",
        extra={"schedule": key, "caught_up": len(slots), "missed": older},
    )
    return (yield from get_flow(k, name, tenant=tenant))


def delete_flow(k: Kernel, name: str, *, tenant: str | None = None) -> Flow[bool]:
    """Delete a runtime schedule (Scheduler's, then its item); False if there was none."""
    key = _names(tenant, name)
    try:
        yield Call(
            "scheduler",
            "delete_schedule",
            {"Name": records.runtime_name(tenant, name), "GroupName": k.settings.runtime_schedule_group},
        )
        existed = True
    except SchedulerError as exc:
        if exc.code != _NOT_FOUND:
            raise
        existed = False
    gone = yield from apply(records.delete(k.settings.table_name, key))
    return existed or (isinstance(gone, Landed) and bool(gone.attributes))


def get_flow(k: Kernel, name: str, *, tenant: str | None = None, count: int = 3) -> Flow[ScheduleView]:
    """One runtime schedule with its last fire and the next ``count`` fire times."""
    key, item = yield from _item_flow(k, tenant, name)
    (view,) = yield from views_flow(k, {key: item}, count=count)
    return view


def list_flow(k: Kernel, *, tenant: str | None = None, count: int = 3) -> Flow[list[ScheduleView]]:
    """The runtime schedules of ``tenant``, or of every tenant, by name.

    A tenant's are a Query of the ``tags`` index; every tenant's, ListSchedules of the runtime group.
    """
    items = yield from items_flow(k, tenant=tenant)
    return (yield from views_flow(k, items, count=count))


def items_flow(k: Kernel, *, tenant: str | None = None) -> Flow[dict[str, Item]]:
    """The items of the runtime schedules of ``tenant`` (every tenant's when None), by fire key."""
    table = k.settings.table_name
    keys: list[str] = []
    if tenant is not None:
        check_tenant(tenant)
        start: Mapping[str, Any] | None = None
        while True:
            page = yield Call("dynamodb", "query", records.query_tenant(table, tenant, start))
            keys += [i["id"]["S"].removeprefix(records.PREFIX) for i in page.get("Items", [])]
            start = page.get("LastEvaluatedKey")
            if not start:
                break
    else:
        keys = yield from _group_keys(k.settings.runtime_schedule_group)
    return (yield from records.batch_get(table, keys))


def _group_keys(group: str) -> Flow[list[str]]:
    keys: list[str] = []
    token: str | None = None
    while True:
        params: dict[str, Any] = {"GroupName": group, "MaxResults": LIST_PAGE}
        if token:
            params["NextToken"] = token
        try:
            page = yield Call("scheduler", "list_schedules", params)
        except SchedulerError as exc:
            if exc.code != _NOT_FOUND:  # no runtime schedule was ever made
                raise
            return []
        keys += [
            records.RUNTIME_MARK + s["Name"]
            for s in page.get("Schedules", [])
            if s.get("GroupName", group) == group  # some emulators ignore the filter
        ]
        token = page.get("NextToken")
        if not token:
            return keys


def views_flow(k: Kernel, items: Mapping[str, Item], *, count: int) -> Flow[list[ScheduleView]]:
    """Views of runtime schedules' items, with each last job's status (one BatchGetItem per 100)."""
    jobs = [j for item in items.values() if (j := str_attr(item, "last_job"))]
    found = yield from batched.get_items(
        k.settings.table_name, [{"id": av_s(j)} for j in jobs], attributes=("id", "status")
    )
    status = {i["id"]["S"]: str_attr(i, "status") for i in found}
    now = k.clock.now()
    views = []
    for key, item in sorted(items.items()):
        spec = spec_of(key, item)
        tenant, name = records.split_key(key)
        state = str_attr(item, "state") or records.ACTIVE
        anchor = num_attr(item, "created_at") or now
        views.append(
            view_of(
                item,
                spec,
                name=name,
                tenant=tenant,
                kind="runtime",
                state=state,
                outcome=status.get(str_attr(item, "last_job") or ""),
                next_fires=()
                if state == records.PAUSED
                else next_fires(spec, now=now, anchor=anchor, count=count),
            )
        )
    return views


def view_of(
    item: Mapping[str, Any] | None,
    spec: ScheduleSpec,
    *,
    name: str,
    tenant: str | None,
    kind: str,
    state: str,
    outcome: str | None,
    next_fires: Sequence[float],
) -> ScheduleView:
    """A view of a schedule (declared or runtime) and its item (None: it never fired)."""
    item = item or {}
    return ScheduleView(
        name=name,
        tenant=tenant,
        kind=kind,
        expression=spec.expression,
        timezone=spec.timezone,
        job=spec.job,
        overlap=spec.overlap,
        catchup_s=spec.catchup_s,
        state=state,
        payload=spec.payload,
        created_at=num_attr(item, "created_at"),
        paused_at=num_attr(item, "paused_at") if state == records.PAUSED else None,
        last_slot=num_attr(item, "last_slot"),
        last_fired_at=num_attr(item, "last_fired_at"),
        last_job=str_attr(item, "last_job"),
        last_outcome=outcome,
        fires=int(num_attr(item, "fires") or 0),
        skipped=int(num_attr(item, "skipped") or 0),
        missed=int(num_attr(item, "missed") or 0),
        next_fires=tuple(next_fires),
    )


def declared_flow(k: Kernel, specs: Sequence[ScheduleSpec], *, count: int = 3) -> Flow[list[ScheduleView]]:
    """The declared schedules with their last fire (their items: one BatchGetItem per 100)."""
    items = yield from records.batch_get(k.settings.table_name, [s.name for s in specs])
    jobs = [j for item in items.values() if (j := str_attr(item, "last_job"))]
    found = yield from batched.get_items(
        k.settings.table_name, [{"id": av_s(j)} for j in jobs], attributes=("id", "status")
    )
    status = {i["id"]["S"]: str_attr(i, "status") for i in found}
    now = k.clock.now()
    return [
        view_of(
            items.get(s.name),
            s,
            name=s.name,
            tenant=None,
            kind="declared",
            state=records.ACTIVE,
            outcome=status.get(str_attr(items.get(s.name) or {}, "last_job") or ""),
            next_fires=next_fires(s, now=now, anchor=now, count=count),
        )
        for s in specs
    ]
