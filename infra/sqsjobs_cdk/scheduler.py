"""The App's EventBridge Scheduler groups and the role Scheduler assumes to deliver fires to SQS.

The schedules themselves are not in the template: ``sqsjobs schedules apply`` owns every schedule
in the declared group (it deletes the ones no longer declared), reading the role ARN from
``SQSJOBS_SCHEDULER_ROLE_ARN`` (a stack output). The runtime group holds the schedules the app makes
at runtime (``app.schedules.create``, ``POST /schedules``); apply never reads it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aws_cdk import Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_scheduler as scheduler

from sqsjobs.deploy.rules import RUNTIME_SCHEDULE_PASS_ROLE, SCHEDULER_ACTIONS

from .iam import allow

if TYPE_CHECKING:
    from collections.abc import Sequence

    from constructs import Construct


def schedule_group(scope: Construct, name: str) -> scheduler.CfnScheduleGroup:
    """The group ``sqsjobs schedules apply`` manages (``Settings.schedule_group``)."""
    return scheduler.CfnScheduleGroup(scope, "ScheduleGroup", name=name)


def runtime_schedule_group(scope: Construct, name: str) -> scheduler.CfnScheduleGroup:
    """The group of the schedules made at runtime (``Settings.runtime_schedule_group``)."""
    return scheduler.CfnScheduleGroup(scope, "RuntimeScheduleGroup", name=name)


def runtime_schedule_arns(scope: Construct, group: str) -> list[str]:
    """The runtime group and its schedules: what the API's scheduler actions are granted on."""
    stack = Stack.of(scope)
    base = f"arn:{stack.partition}:scheduler:{stack.region}:{stack.account}"
    return [f"{base}:schedule-group/{group}", f"{base}:schedule/{group}/*"]


def grant_pass_role(principal: iam.IPrincipal, role: iam.IRole) -> None:
    """Let ``principal`` name ``role`` in a schedule it makes (``RUNTIME_SCHEDULE_PASS_ROLE``), to Scheduler only."""
    principal.add_to_principal_policy(
        iam.PolicyStatement(
            actions=list(RUNTIME_SCHEDULE_PASS_ROLE),
            resources=[role.role_arn],
            conditions={"StringEquals": {"iam:PassedToService": "scheduler.amazonaws.com"}},
        )
    )


def scheduler_role(scope: Construct, queue_arns: Sequence[str]) -> iam.Role:
    """SendMessage to the job queues (fires) and their DLQs (fires Scheduler could not deliver).

    Only Scheduler acting for this account may assume it (confused-deputy guard).
    """
    account = Stack.of(scope).account
    role = iam.Role(
        scope,
        "SchedulerRole",
        description="EventBridge Scheduler delivers sqsjobs schedule fires to SQS",
        assumed_by=iam.ServicePrincipal(
            "scheduler.amazonaws.com", conditions={"StringEquals": {"aws:SourceAccount": account}}
        ),
    )
    allow(role, SCHEDULER_ACTIONS, queue_arns=queue_arns)
    return role
