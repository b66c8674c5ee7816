"""cdk-nag acknowledgements: each one names the rule and says why the finding is accepted."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aws_cdk import Acknowledgment, Validations

if TYPE_CHECKING:
    from constructs import IConstruct


def acknowledge(construct: IConstruct, rule: str, reason: str) -> None:
    """Accept ``rule`` (``AwsSolutions-IAM5[Resource::*]`` for one finding) on ``construct`` and below."""
    if len(reason) < 20:
        raise ValueError(f"give {rule} a real reason, not {reason!r}")
    Validations.of(construct).acknowledge(Acknowledgment(id=rule, reason=reason))
