"""Plan and apply: make the app's EventBridge Scheduler group match its schedule declarations.

Sans-I/O flows like ``sqsjobs.producer``: ``plan_flow`` reads the group and returns a ``Plan``
(create / update / delete, field by field); ``apply_flow`` carries a plan out. Only schedules
inside the app's own group (``Settings.schedule_group``) are ever changed or deleted, so other
apps and hand-made schedules are safe.

Each schedule targets the SQS queue of the job it names. Its input is a ``Fire`` envelope carrying
the schedule name, ``<aws.scheduler.scheduled-time>``, the job type and the payload; a retry
policy and the queue's DLQ catch fires SQS would not take. The worker turns each fire into one
job per occurrence (``sqsjobs.schedules.plugin``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, Protocol

from sqsjobs._aws import Call
from sqsjobs.envelope import SCHEDULED_TIME, Fire
from sqsjobs.errors import (
    ConfigurationError,
    ExpressionError,
    HandlerNotFound,
    PayloadError,
    SchedulerError,
    TransportError,
)
from sqsjobs.schedules import expressions
from sqsjobs.schedules.spec import NAME_PATTERN, ScheduleSpec, empty_payload
from sqsjobs.transport.queues import dlq_key

if TYPE_CHECKING:
    from collections.abc import Mapping

    from sqsjobs._aws import Flow
    from sqsjobs.config import Settings
    from sqsjobs.registry import Registry
    from sqsjobs.runtime.kernel import Kernel
    from sqsjobs.schedules.spec import Declarations as Schedules
    from sqsjobs.transport.queues import QueueUrls


class Scheduling(Protocol):
    """What plan/apply and the local loop read: the declarations, the handlers and the kernel (an App)."""

    @property
    def schedules(self) -> Schedules:
        """The schedule declarations."""
        ...

    @property
    def registry(self) -> Registry:
        """The handlers the schedules fire."""
        ...

    @property
    def kernel(self) -> Kernel:
        """Settings, queue URLs, logger and flow runners."""
        ...


#: Scheduler retries a fire SQS did not take for up to a day, up to 185 times: the AWS maxima
#: (https://docs.aws.amazon.com/scheduler/latest/APIReference/API_RetryPolicy.html). A fire that
#: still fails goes to the queue's DLQ.
RETRY_MAX_EVENT_AGE_S = 86_400
RETRY_MAX_ATTEMPTS = 185
#: Scheduler's largest schedule payload (https://docs.aws.amazon.com/scheduler/latest/UserGuide/scheduler-quotas.html).
MAX_INPUT_BYTES = 256 * 1024
#: ``Target.RoleArn`` pattern (API reference).
ROLE_ARN_PATTERN = re.compile(r"^arn:aws(-[a-z]+)?:iam::\d{12}:role/[\w+=,.@/-]+$")
#: ListSchedules page size (its maximum).
LIST_PAGE = 100
#: Top-level schedule fields sqsjobs owns; anything else Scheduler reports (ARN, dates) is ignored.
MANAGED_FIELDS = (
    "ScheduleExpression",
    "ScheduleExpressionTimezone",
    "FlexibleTimeWindow",
    "Target",
    "State",
    "ActionAfterCompletion",
    "Description",
)
#: What Scheduler assumes for a field it does not return.
_DEFAULTS = {"ScheduleExpressionTimezone": "UTC", "ActionAfterCompletion": "NONE", "Description": ""}
_NOT_FOUND = "ResourceNotFoundException"


@dataclass(frozen=True)
class FieldChange:
    """One field that differs: dotted path, value in Scheduler (None: absent), declared value."""

    path: str
    old: Any
    new: Any


@dataclass(frozen=True)
class Change:
    """One schedule to create, update or delete."""

    action: Literal["create", "update", "delete"]
    name: str
    fields: tuple[FieldChange, ...] = ()
    #: The full CreateSchedule/UpdateSchedule request (empty for a delete).
    request: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)


@dataclass
class Plan:
    """What apply would do to the app's schedule group."""

    group: str
    group_exists: bool
    changes: list[Change] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    #: Declared schedules left alone, with the reason (a one-time schedule already past).
    skipped: dict[str, str] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        """True when apply has nothing to do."""
        return not self.changes and self.group_exists

    def count(self, action: str) -> int:
        """How many changes of one kind."""
        return sum(1 for c in self.changes if c.action == action)


# ── what is declared ─────────────────────────────────────────────────────────────────────────
def fire_input(spec: ScheduleSpec, payload: Any) -> str:
    """The target input: a Fire envelope whose time Scheduler substitutes at each occurrence."""
    return Fire(schedule=spec.name, at=SCHEDULED_TIME, job_type=spec.job, payload=payload).to_body()


def check_declarations(app: Scheduling) -> dict[str, Any]:
    """Validate every declaration against the registry; returns each schedule's stored payload.

    A schedule without a payload gets the empty payload its handler accepts (``empty_payload``).

    Raises:
        ConfigurationError: naming the schedule whose job is unknown or whose payload does not fit.
    """
    payloads: dict[str, Any] = {}
    for spec in app.schedules:
        try:
            handler = app.registry.get(spec.job)
            payloads[spec.name] = (
                empty_payload(handler) if spec.payload is None else handler.dump(spec.payload)
            )
        except (HandlerNotFound, PayloadError) as exc:
            raise ConfigurationError(f"schedule {spec.name!r}: {exc}") from None
        size = len(fire_input(spec, payloads[spec.name]).encode())
        if size > MAX_INPUT_BYTES:
            raise ConfigurationError(
                f"schedule {spec.name!r}: its input is {size} bytes, over Scheduler's {MAX_INPUT_BYTES}; "
                "pass a key to the data instead of the data"
            )
    return payloads


def role_arn(settings: Settings) -> str:
    """The role Scheduler assumes to send fires (``SQSJOBS_SCHEDULER_ROLE_ARN``), checked."""
    role = settings.scheduler_role_arn
    if not role:
        raise ConfigurationError(
            "schedules need the IAM role EventBridge Scheduler assumes to send to SQS: "
            "set SQSJOBS_SCHEDULER_ROLE_ARN (infra creates the role)"
        )
    if not ROLE_ARN_PATTERN.match(role):
        raise ConfigurationError(f"SQSJOBS_SCHEDULER_ROLE_ARN={role!r} is not an IAM role ARN")
    return role


def queue_arns_flow(queue_urls: QueueUrls, queues: set[str]) -> Flow[dict[str, str]]:
    """Queue ARN by logical queue, and for its DLQ under the key ``App.queue_urls_flow`` uses."""
    try:
        urls = yield from queue_urls.flow(sorted(queues))
    except TransportError as exc:
        raise ConfigurationError(
            f"a schedule's queue does not exist ({exc}); run `sqsjobs provision` or deploy infra first"
        ) from exc
    arns: dict[str, str] = {}
    for queue in sorted(queues):
        for key in (queue, dlq_key(queue)):
            response = yield Call(
                "sqs", "get_queue_attributes", {"QueueUrl": urls[key], "AttributeNames": ["QueueArn"]}
            )
            arns[key] = response["Attributes"]["QueueArn"]
    return arns


def desired_flow(app: Scheduling) -> Flow[dict[str, dict[str, Any]]]:
    """The CreateSchedule request for every declaration, by name (validates everything first)."""
    group = _group(app)
    payloads = check_declarations(app)
    if not len(app.schedules):
        return {}
    role = role_arn(app.kernel.settings)
    queue_of = {spec.name: app.registry.get(spec.job).queue for spec in app.schedules}
    arns = yield from queue_arns_flow(app.kernel.queue_urls, set(queue_of.values()))
    requests: dict[str, dict[str, Any]] = {}
    for spec in app.schedules:
        queue = queue_of[spec.name]
        requests[spec.name] = schedule_request(
            spec,
            name=spec.name,
            group=group,
            input_body=fire_input(spec, payloads[spec.name]),
            arns=(arns[queue], arns[dlq_key(queue)]),
            role=role,
            description=f"sqsjobs app {app.kernel.name}: enqueues {spec.job}",
        )
    return requests


def schedule_request(
    spec: ScheduleSpec,
    *,
    name: str,
    group: str,
    input_body: str,
    arns: tuple[str, str],
    role: str,
    description: str,
    enabled: bool = True,
) -> dict[str, Any]:
    """The CreateSchedule (and UpdateSchedule) request of one schedule; ``arns``: its queue's and DLQ's."""
    window: dict[str, Any] = (
        {"Mode": "FLEXIBLE", "MaximumWindowInMinutes": spec.flexible_window_minutes}
        if spec.flexible_window_minutes
        else {"Mode": "OFF"}
    )
    return {
        "Name": name,
        "GroupName": group,
        "ScheduleExpression": spec.expression,
        "ScheduleExpressionTimezone": spec.timezone,
        "FlexibleTimeWindow": window,
        "Target": {
            "Arn": arns[0],
            "RoleArn": role,
            "Input": input_body,
            "RetryPolicy": {
                "MaximumEventAgeInSeconds": RETRY_MAX_EVENT_AGE_S,
                "MaximumRetryAttempts": RETRY_MAX_ATTEMPTS,
            },
            "DeadLetterConfig": {"Arn": arns[1]},
        },
        "State": "ENABLED" if enabled else "DISABLED",
        # A one-time schedule removes itself after its fire, keeping the account's quota clean.
        "ActionAfterCompletion": "DELETE" if spec.kind == "at" else "NONE",
        "Description": description[:512],
    }


def _group(app: Scheduling) -> str:
    group = app.kernel.settings.schedule_group
    if not NAME_PATTERN.match(group):
        raise ConfigurationError(
            f"schedule group {group!r} must be 1-64 characters of letters, digits, '-', '_' or '.' "
            "(set SQSJOBS_SCHEDULE_GROUP)"
        )
    return group


# ── what is deployed ─────────────────────────────────────────────────────────────────────────
def current_flow(group: str) -> Flow[tuple[bool, dict[str, dict[str, Any]]]]:
    """Whether the group exists, and each of its schedules (GetSchedule output) by name."""
    try:
        yield Call("scheduler", "get_schedule_group", {"Name": group})
    except SchedulerError as exc:
        if exc.code != _NOT_FOUND:
            raise
        return False, {}
    names: list[str] = []
    token: str | None = None
    while True:
        params: dict[str, Any] = {"GroupName": group, "MaxResults": LIST_PAGE}
        if token:
            params["NextToken"] = token
        page = yield Call("scheduler", "list_schedules", params)
        # Emulators ignore the filter in some versions: keep only this group's schedules.
        names += [s["Name"] for s in page.get("Schedules", []) if s.get("GroupName", group) == group]
        token = page.get("NextToken")
        if not token:
            break
    found: dict[str, dict[str, Any]] = {}
    for name in names:
        try:
            found[name] = yield Call("scheduler", "get_schedule", {"Name": name, "GroupName": group})
        except SchedulerError as exc:
            if exc.code != _NOT_FOUND:  # deleted meanwhile (a one-time schedule that fired)
                raise
    return True, found


# ── comparing ────────────────────────────────────────────────────────────────────────────────
def flatten(schedule: Mapping[str, Any]) -> dict[str, Any]:
    """The managed fields as ``{"Target.Input.payload": ...}``; the JSON input is compared by key."""
    out: dict[str, Any] = {}
    for name in MANAGED_FIELDS:
        value = schedule.get(name, _DEFAULTS.get(name))
        if value is not None:
            _flatten_into(out, name, value)
    return out


def _flatten_into(out: dict[str, Any], path: str, value: Any) -> None:
    if path == "Target.Input" and isinstance(value, str):
        try:
            parsed = json.loads(value)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            value = {
                k: json.dumps(v, sort_keys=True) if isinstance(v, dict | list) else v
                for k, v in parsed.items()
            }
        else:
            out[path] = value
            return
    if isinstance(value, dict):
        for key, inner in value.items():
            _flatten_into(out, f"{path}.{key}", inner)
    else:
        out[path] = value


def diff(current: Mapping[str, Any] | None, desired: Mapping[str, Any] | None) -> tuple[FieldChange, ...]:
    """Field-by-field differences between a deployed schedule and a declared one (either may be absent)."""
    old = flatten(current) if current is not None else {}
    new = flatten(desired) if desired is not None else {}
    return tuple(
        FieldChange(path, old.get(path), new.get(path))
        for path in sorted(set(old) | set(new))
        if old.get(path) != new.get(path)
    )


# ── plan and apply ───────────────────────────────────────────────────────────────────────────
def plan_flow(app: Scheduling, *, now: float) -> Flow[Plan]:
    """Compare the declarations with the app's schedule group."""
    desired = yield from desired_flow(app)
    group = _group(app)
    exists, current = yield from current_flow(group)
    plan = Plan(group=group, group_exists=exists)
    for name, request in sorted(desired.items()):
        spec = app.schedules.get(name)
        assert spec is not None
        if name not in current:
            if spec.kind == "at" and spec.next_fire(now, anchor=now) is None:
                plan.skipped[name] = "one-time schedule whose time has passed"
                continue
            plan.changes.append(Change("create", name, diff(None, request), request))
            continue
        changed = diff(current[name], request)
        if changed:
            plan.changes.append(Change("update", name, changed, request))
        else:
            plan.unchanged.append(name)
    for name in sorted(set(current) - set(desired)):
        plan.changes.append(Change("delete", name, diff(current[name], None)))
    return plan


def apply_flow(app: Scheduling, plan: Plan) -> Flow[Plan]:
    """Carry out ``plan``: create the group if needed, then create, update and delete schedules."""
    if not plan.group_exists:
        try:
            yield Call("scheduler", "create_schedule_group", {"Name": plan.group})
        except SchedulerError as exc:
            if exc.code != "ConflictException":
                raise
    for change in plan.changes:
        if change.action == "create":
            yield Call("scheduler", "create_schedule", dict(change.request))
        elif change.action == "update":
            yield Call("scheduler", "update_schedule", dict(change.request))
        else:
            try:
                yield Call("scheduler", "delete_schedule", {"Name": change.name, "GroupName": plan.group})
            except SchedulerError as exc:
                if exc.code != _NOT_FOUND:
                    raise
    # Not "created": LogRecord reserves it, and logging raises building the record.
    app.kernel.logger.info(
        "schedules applied",
        extra={
            "group": plan.group,
            "schedules_created": plan.count("create"),
            "schedules_updated": plan.count("update"),
            "schedules_deleted": plan.count("delete"),
        },
    )
    return plan


# ── listing ──────────────────────────────────────────────────────────────────────────────────
@dataclass(frozen=True)
class ScheduleRow:
    """One schedule for ``sqsjobs schedules list``."""

    name: str
    expression: str
    timezone: str
    job: str
    #: ``applied`` (in the group and declared), ``not applied`` (declared only), ``not declared``
    #: (in the group only: the next apply deletes it).
    status: str
    #: Upcoming fire instants (epoch seconds), computed by sqsjobs in the schedule's time zone.
    next_fires: tuple[float, ...] = ()
    #: Why no fire times could be computed (an expression sqsjobs cannot read).
    note: str = ""


def list_flow(app: Scheduling, *, now: float, count: int = 3) -> Flow[list[ScheduleRow]]:
    """Declared and deployed schedules with their next ``count`` fires, deployed definitions first."""
    _, current = yield from current_flow(_group(app))
    rows: list[ScheduleRow] = []
    for name in sorted(set(current) | {s.name for s in app.schedules}):
        declared = app.schedules.get(name)
        deployed = current.get(name)
        if deployed is None:
            assert declared is not None
            rows.append(_row(declared, "not applied", now=now, anchor=now, count=count))
            continue
        status = "applied" if declared is not None else "not declared"
        try:
            spec = _deployed_spec(name, deployed)
        except ExpressionError as exc:
            rows.append(
                ScheduleRow(
                    name,
                    str(deployed.get("ScheduleExpression", "")),
                    str(deployed.get("ScheduleExpressionTimezone", "UTC")),
                    "?",
                    status,
                    note=str(exc),
                )
            )
            continue
        start = deployed.get("StartDate") or deployed.get("CreationDate")
        anchor = start.timestamp() if isinstance(start, datetime) else now
        rows.append(_row(spec, status, now=now, anchor=anchor, count=count))
    return rows


def _deployed_spec(name: str, deployed: Mapping[str, Any]) -> ScheduleSpec:
    expression = str(deployed.get("ScheduleExpression", ""))
    timezone = str(deployed.get("ScheduleExpressionTimezone") or "UTC")
    expressions.timezone(timezone)
    try:
        job = str(json.loads(deployed.get("Target", {}).get("Input", "{}")).get("job", "?"))
    except (ValueError, AttributeError):
        job = "?"
    return ScheduleSpec(
        name=name, expression=expression, job=job, parsed=expressions.parse(expression), timezone=timezone
    )


def _row(spec: ScheduleSpec, status: str, *, now: float, anchor: float, count: int) -> ScheduleRow:
    fires: list[float] = []
    after = now
    while len(fires) < count:
        nxt = spec.next_fire(after, anchor=anchor)
        if nxt is None:
            break
        fires.append(nxt)
        after = nxt
    return ScheduleRow(spec.name, spec.expression, spec.timezone, spec.job, status, tuple(fires))
