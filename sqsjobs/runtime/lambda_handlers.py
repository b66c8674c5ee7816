"""The Lambda entry points, all in one place: the SQS worker and the scheduled sweeper (and the name of the HTTP API's).

Handler strings (``infra/`` and ``sqsjobs package lambda`` use them; the deployment zip carries the
whole ``sqsjobs`` package, so no generated entry file is needed):

- ``sqsjobs.runtime.lambda_handlers.sqs_worker``: the SQS event source mapping's function. The event
  source mapping must report batch item failures (``FunctionResponseTypes=["ReportBatchItemFailures"]``).
- ``sqsjobs.runtime.lambda_handlers.sweeper``: one sweep per scheduled invocation, for deployments
  without an ECS cluster. Without some sweeper, a record whose hint was lost, or a job held beyond
  the SQS delay cap, never runs. Overlapping invocations are safe: every dispatch is a
  conditional write first.

``SQSJOBS_APP`` (e.g. ``shop.jobs:app``) names the App; the runtime takes its kernel
(``runtime/kernel.py``: ``kernel_from_path``), never the App itself. Inside Lambda it is imported when this module
is, during the init phase (cold start), and every invocation reuses it with its clients; elsewhere
(tests, tools that only read the handler names) nothing is loaded until the first call. The sweeper
uses the sync clients: they live as long as the container, where async clients would be bound to
the event loop of one invocation.
"""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING, Any

from sqsjobs.runtime.kernel import Kernel, kernel_from_path
from sqsjobs.runtime.lambda_sqs import handler_from_env
from sqsjobs.runtime.sweeper import sweep

if TYPE_CHECKING:
    from collections.abc import Mapping

    from sqsjobs.runtime.lambda_event import BatchResponse
    from sqsjobs.runtime.lambda_sqs import LambdaContext, LambdaWorker

#: The handler strings to configure on each function.
SQS_WORKER_HANDLER = f"{__name__}.sqs_worker"
SWEEPER_HANDLER = f"{__name__}.sweeper"
#: The HTTP API's function (``sqsjobs.api.lambda_handler``, which needs the ``api`` extra: named here
#: so that infra/ can configure it without importing FastAPI), and its body limit's variable.
API_HANDLER = "sqsjobs.api.lambda_handler.handler"
API_MAX_BODY_ENV = "SQSJOBS_API_MAX_BODY_BYTES"


@functools.cache
def _worker() -> LambdaWorker:
    return handler_from_env()


@functools.cache
def _sweeper_kernel() -> Kernel:
    return kernel_from_path()


def sqs_worker(event: Mapping[str, Any], context: LambdaContext) -> BatchResponse:
    """Run one SQS batch; the response names the records to keep (partial batch response)."""
    return _worker()(event, context)


def sweeper(event: Mapping[str, Any], context: Any) -> dict[str, int]:
    """Sweep once; returns how many hints each case sent."""
    app = _sweeper_kernel()
    report = sweep(app)  # the features' hooks and passes are async: a loop of its own per invocation
    counts = {
        "dispatched_held": len(report.dispatched_held),
        "redispatched": len(report.redispatched),
        "expired": len(report.expired),
        "dlq_redispatched": len(report.dlq.redispatched),
        "dlq_refired": len(report.dlq.refired),
        "dlq_dead": len(report.dlq.dead),
        "dlq_deleted": report.dlq.deleted,
    }
    if report.total or report.dlq.acted:
        app.logger.info("sweep dispatched hints", extra=counts)
    return counts


if os.environ.get("AWS_LAMBDA_FUNCTION_NAME") and os.environ.get("SQSJOBS_APP"):
    # Cold start: import the App during the init phase, not inside the first invocation's deadline.
    if os.environ.get("_HANDLER") == SWEEPER_HANDLER:
        _sweeper_kernel()
    else:
        _worker()
