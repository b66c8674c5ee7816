"""Compatibility entry point for functions configured with ``lambda_handlers.worker.handler``.

New deployments use ``sqsjobs.runtime.lambda_handlers.sqs_worker`` directly (see that module).
"""

from __future__ import annotations

from sqsjobs.runtime.lambda_handlers import sqs_worker as handler

__all__ = ["handler"]
