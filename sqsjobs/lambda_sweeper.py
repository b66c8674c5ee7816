"""The sweeper as a scheduled Lambda function: one sweep per invocation (handler ``sqsjobs.lambda_sweeper.handler``).

For deployments without an ECS cluster, infra/ schedules this function every few minutes from the
Lambda worker's own deployment zip (which carries the whole ``sqsjobs`` package). Without some
sweeper, a record whose hint was lost, or a job held beyond the SQS delay cap, never runs
(DESIGN §3.1). Overlapping invocations are safe: every dispatch is a conditional write first.

It uses the sync clients: they live as long as the container, where async clients would be bound
to the event loop of one invocation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqsjobs.app import App
from sqsjobs.sweeper import sweep_flow

if TYPE_CHECKING:
    from collections.abc import Mapping

    from sqsjobs.sweeper import SweepReport

_app: App | None = None


def handler(event: Mapping[str, Any], context: Any) -> dict[str, int]:
    """Sweep once; returns how many hints each case sent."""
    global _app
    if _app is None:
        _app = App.from_path()  # SQSJOBS_APP, once per container
    report: SweepReport = _app.run(sweep_flow(_app, _app.clock.now()))
    counts = {
        "dispatched_held": len(report.dispatched_held),
        "redispatched": len(report.redispatched),
        "rescued": len(report.rescued),
    }
    if report.total:
        _app.logger.info("sweep dispatched hints", extra=counts)
    return counts
