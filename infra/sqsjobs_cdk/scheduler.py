"""The App's EventBridge Scheduler group and the role Scheduler assumes to deliver fires to SQS.

The schedules themselves are not in the template: ``sqsjobs schedules apply`` owns every schedule
in this group (it deletes the ones no longer declared), reading the role ARN from
``SQSJOBS_SCHEDULER_ROLE_ARN`` (a stack output).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aws_cdk import Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_scheduler as scheduler

from sqsjobs.deploy.rules import SCHEDULER_ACTIONS

from .iam import allow

if TYPE_CHECKING:
    from collections.abc import Sequence

    from constructs import Construct


def schedule_group(scope: Construct, name: str) -> scheduler.CfnScheduleGroup:
    """The group ``sqsjobs schedules apply`` manages (``Settings.schedule_group``)."""
    return scheduler.CfnScheduleGroup(scope, "ScheduleGroup", name=name)


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
