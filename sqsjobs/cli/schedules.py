"""``sqsjobs schedules plan|apply|list``: the app's schedule declarations vs EventBridge Scheduler.

``plan`` prints what ``apply`` would change in the app's own schedule group, field by field;
``apply`` makes the group match (it never touches schedules outside that group); ``list`` shows
each schedule's next fire times, computed by sqsjobs in the schedule's time zone.

``create``, ``update``, ``pause``, ``resume``, ``delete`` and ``show`` handle schedules made at runtime
(``app.schedules``, per ``--tenant``), in their own group that ``apply`` never touches; ``runtime``
lists them with their last fire, the job it made and its outcome.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer

from sqsjobs.cli.common import AppOpt, EndpointOpt, JsonOpt, guarded, load_app
from sqsjobs.cli.common import out as console
from sqsjobs.cli.confirm import YesOpt, consent_or_exit
from sqsjobs.cli.render import print_json
from sqsjobs.schedules import expressions
from sqsjobs.schedules.sync import apply_flow, list_flow, plan_flow

if TYPE_CHECKING:
    from sqsjobs.schedules.runtime import ScheduleView
    from sqsjobs.schedules.sync import Plan, ScheduleRow

schedules_cli = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    help="Recurring jobs on EventBridge Scheduler: plan, apply, list; runtime schedules: create, update, "
    "pause, resume, delete, show, runtime.",
)

_MARK = {
    "create": "[green]+ create[/green]",
    "update": "[yellow]~ update[/yellow]",
    "delete": "[red]- delete[/red]",
}
#: A delete shows only what identifies the schedule.
_DELETE_SUMMARY = {"ScheduleExpression", "ScheduleExpressionTimezone", "Target.Arn", "Target.Input.job"}
#: Long values (the fire input's payload) are cut to this in the plan.
_VALUE_CHARS = 120


def _show(value: Any) -> str:
    if value is None:
        return "(none)"
    text = value if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= _VALUE_CHARS else text[: _VALUE_CHARS - 1] + "…"


def print_plan(plan: Plan) -> None:
    """The plan, one block per change and one line per changed field."""
    if not plan.group_exists:
        console.print(f"schedule group [bold]{plan.group}[/bold] does not exist: apply creates it")
    for change in plan.changes:
        console.print(f"{_MARK[change.action]} [bold]{change.name}[/bold]", highlight=False)
        for f in change.fields:
            if change.action == "delete" and f.path not in _DELETE_SUMMARY:
                continue
            if change.action == "update":
                line = f"{_show(f.old)} → {_show(f.new)}"
            else:
                line = _show(f.new if change.action == "create" else f.old)
            console.print(f"    {f.path}: {line}", markup=False, highlight=False, soft_wrap=True)
    for name, reason in plan.skipped.items():
        console.print(f"  skip [bold]{name}[/bold]: {reason}", highlight=False)
    console.print(
        f"group {plan.group}: {plan.count('create')} to create, {plan.count('update')} to update, "
        f"{plan.count('delete')} to delete, {len(plan.unchanged)} unchanged",
        highlight=False,
    )


@schedules_cli.command()
def plan(app: AppOpt, endpoint_url: EndpointOpt = None, json_out: JsonOpt = False) -> None:
    """Show what apply would create, update and delete in the app's schedule group."""
    loaded = load_app(app, endpoint_url)
    with guarded(loaded):
        result: Plan = loaded.run(plan_flow(loaded, now=loaded.clock.now()))
    if json_out:
        typer.echo(json.dumps(_plan_json(result), default=str))
        return
    print_plan(result)


def _plan_json(plan: Plan) -> dict[str, Any]:
    """The plan as data: each change with its fields' old and new values (not the full request)."""
    changes = [
        {
            "action": c.action,
            "name": c.name,
            "fields": [{"path": f.path, "old": f.old, "new": f.new} for f in c.fields],
        }
        for c in plan.changes
    ]
    return {
        "group": plan.group,
        "group_exists": plan.group_exists,
        "changes": changes,
        "unchanged": plan.unchanged,
        "skipped": plan.skipped,
    }


@schedules_cli.command()
def apply(
    app: AppOpt, endpoint_url: EndpointOpt = None, json_out: JsonOpt = False, yes: YesOpt = False
) -> None:
    """Make the app's schedule group match the declarations (deletes undeclared schedules in it).

    The plan is shown first; it is applied on ``--yes`` or a terminal's yes. Without either nothing
    changes (exit 2): a script that means to delete what the code no longer declares says ``--yes``.
    """
    loaded = load_app(app, endpoint_url)
    with guarded(loaded):
        result: Plan = loaded.run(plan_flow(loaded, now=loaded.clock.now()))
        if not json_out:
            print_plan(result)
        if not result.empty:
            consent_or_exit(
                f"apply this plan to group {result.group}?",
                yes=yes,
                refusal="the plan was not applied: pass --yes to apply it without a terminal "
                "(`sqsjobs schedules plan` shows it again)",
            )
            loaded.run(apply_flow(loaded, result))
    if json_out:
        typer.echo(json.dumps(_plan_json(result) | {"applied": not result.empty}, default=str))
    else:
        console.print("nothing to apply" if result.empty else "[green]applied[/green]")


def _when(instant: float, timezone: str) -> str:
    local = datetime.fromtimestamp(instant, expressions.timezone(timezone))
    utc = datetime.fromtimestamp(instant, UTC)
    if timezone == "UTC":
        return utc.strftime("%Y-%m-%d %H:%M UTC")
    return f"{local:%Y-%m-%d %H:%M %Z} ({utc:%H:%M} UTC)"


def _row_json(row: ScheduleRow) -> dict[str, Any]:
    return {
        "name": row.name,
        "expression": row.expression,
        "timezone": row.timezone,
        "job": row.job,
        "status": row.status,
        "next_fires": [expressions.iso_utc(t) for t in row.next_fires],
        "note": row.note,
    }


@schedules_cli.command("list")
def list_schedules(
    app: AppOpt,
    endpoint_url: EndpointOpt = None,
    count: Annotated[int, typer.Option(help="Next fire times to show per schedule")] = 3,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per schedule on stdout")] = False,
) -> None:
    """List declared and deployed schedules with their next fire times."""
    loaded = load_app(app, endpoint_url)
    with guarded(loaded):
        rows: list[ScheduleRow] = loaded.run(list_flow(loaded, now=loaded.clock.now(), count=count))
    if as_json:
        for row in rows:
            typer.echo(json.dumps(_row_json(row)))
        return
    if not rows:
        console.print("no schedules declared or deployed")
    for row in rows:
        console.print(
            f"[bold]{row.name}[/bold]  {row.expression}  {row.timezone}  → {row.job}  ({row.status})",
            highlight=False,
            soft_wrap=True,
        )
        for instant in row.next_fires:
            console.print(f"    {_when(instant, row.timezone)}", highlight=False)
        if not row.next_fires:
            console.print(f"    {row.note or 'no upcoming fire'}", highlight=False)


# ── runtime schedules ────────────────────────────────────────────────────────────────────────
TenantOpt = Annotated[str | None, typer.Option(help="The schedule's tenant")]


def _print_view(view: ScheduleView, as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(view.to_dict(), default=str))
        return
    who = f"{view.tenant}/" if view.tenant else ""
    console.print(
        f"[bold]{who}{view.name}[/bold]  {view.expression}  {view.timezone}  → {view.job}  "
        f"({view.state}, overlap {view.overlap})",
        highlight=False,
        soft_wrap=True,
    )
    last = (
        f"last fire {expressions.iso_utc(view.last_slot)}: {view.last_job} ({view.last_outcome or '?'})"
        if view.last_slot is not None
        else "never fired"
    )
    console.print(
        f"    {last}; {view.fires} made, {view.skipped} skipped, {view.missed} missed",
        highlight=False,
        soft_wrap=True,
    )
    for instant in view.next_fires:
        console.print(f"    {_when(instant, view.timezone)}", highlight=False)


@schedules_cli.command()
def create(
    name: str,
    app: AppOpt,
    job: Annotated[str, typer.Option(help="The job type each fire enqueues")],
    cron: Annotated[str | None, typer.Option(help="cron(...) expression")] = None,
    rate: Annotated[str | None, typer.Option(help="rate(...) expression")] = None,
    at: Annotated[str | None, typer.Option(help="One time: yyyy-mm-ddThh:mm:ss")] = None,
    timezone: Annotated[str, typer.Option(help="IANA time zone of cron and at")] = "UTC",
    payload: Annotated[str | None, typer.Option(help="The jobs' payload, as JSON")] = None,
    tenant: TenantOpt = None,
    overlap: Annotated[
        str, typer.Option(help="allow_all, skip, buffer_one or cancel_previous")
    ] = "allow_all",
    catchup_window: Annotated[
        float | None, typer.Option(help="Seconds a fire may be late and still made")
    ] = None,
    paused: Annotated[bool, typer.Option(help="Make it paused")] = False,
    endpoint_url: EndpointOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Make a schedule at runtime, in the runtime group (``apply`` never touches it)."""
    loaded = load_app(app, endpoint_url)
    with guarded(loaded):
        view = loaded.schedules.create(
            name,
            job=job,
            cron=cron,
            rate=rate,
            at=at,
            timezone=timezone,
            payload=json.loads(payload) if payload is not None else None,
            tenant=tenant,
            overlap=overlap,
            catchup_window=catchup_window,
            paused=paused,
        )
    _print_view(view, json_out)


@schedules_cli.command()
def update(
    name: str,
    app: AppOpt,
    tenant: TenantOpt = None,
    job: Annotated[str | None, typer.Option(help="The job type each fire enqueues")] = None,
    cron: Annotated[str | None, typer.Option(help="cron(...) expression")] = None,
    rate: Annotated[str | None, typer.Option(help="rate(...) expression")] = None,
    payload: Annotated[str | None, typer.Option(help="The jobs' payload, as JSON")] = None,
    overlap: Annotated[
        str | None, typer.Option(help="allow_all, skip, buffer_one or cancel_previous")
    ] = None,
    catchup_window: Annotated[float | None, typer.Option(help="Seconds a fire may be late")] = None,
    endpoint_url: EndpointOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Change a runtime schedule; what is not given stays."""
    given = {"job": job, "cron": cron, "rate": rate, "overlap": overlap, "catchup_window": catchup_window}
    changes: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
    if payload is not None:
        changes["payload"] = json.loads(payload)
    loaded = load_app(app, endpoint_url)
    with guarded(loaded):
        view = loaded.schedules.update(name, tenant=tenant, **changes)
    _print_view(view, json_out)


@schedules_cli.command()
def pause(
    name: str,
    app: AppOpt,
    tenant: TenantOpt = None,
    endpoint_url: EndpointOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Stop a runtime schedule firing until resume."""
    _switch("pause", name, app, tenant, endpoint_url, json_out)


@schedules_cli.command()
def resume(
    name: str,
    app: AppOpt,
    tenant: TenantOpt = None,
    endpoint_url: EndpointOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Fire again, making what it missed within its catch-up window."""
    _switch("resume", name, app, tenant, endpoint_url, json_out)


def _switch(
    verb: Literal["pause", "resume"],
    name: str,
    app: str,
    tenant: str | None,
    endpoint_url: str | None,
    json_out: bool,
) -> None:
    loaded = load_app(app, endpoint_url)
    with guarded(loaded):
        flip = loaded.schedules.pause if verb == "pause" else loaded.schedules.resume
        _print_view(flip(name, tenant=tenant), json_out)


@schedules_cli.command()
def delete(
    name: str,
    app: AppOpt,
    tenant: TenantOpt = None,
    endpoint_url: EndpointOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Delete a runtime schedule."""
    loaded = load_app(app, endpoint_url)
    with guarded(loaded):
        deleted = loaded.schedules.delete(name, tenant=tenant)
    if json_out:
        print_json({"name": name, "tenant": tenant, "deleted": deleted})
        return
    console.print("deleted" if deleted else "no such schedule: nothing changed", highlight=False)


@schedules_cli.command()
def show(
    name: str,
    app: AppOpt,
    tenant: TenantOpt = None,
    endpoint_url: EndpointOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """One runtime schedule: its state, last fire (its job and outcome) and next fires."""
    loaded = load_app(app, endpoint_url)
    with guarded(loaded):
        _print_view(loaded.schedules.describe(name, tenant=tenant), json_out)


@schedules_cli.command("runtime")
def runtime_list(
    app: AppOpt,
    tenant: TenantOpt = None,
    declared: Annotated[bool, typer.Option(help="Show the declared schedules' last fires too")] = False,
    endpoint_url: EndpointOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Runtime schedules (one tenant's with --tenant) with their last fire, its job and outcome."""
    loaded = load_app(app, endpoint_url)
    with guarded(loaded):
        views = loaded.schedules.list(tenant=tenant)
        if declared:
            views += loaded.schedules.declared()
    if not views and not json_out:
        console.print("no runtime schedules")
    for view in views:
        _print_view(view, json_out)
