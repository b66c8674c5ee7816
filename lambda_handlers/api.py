"""The HTTP API's Lambda entry point under the project's ``lambda_handlers`` package.

Functions may name ``lambda_handlers.api.handler``; infra/ uses ``sqsjobs.api.lambda_handler.handler``
(the zip carries the whole ``sqsjobs`` package). See ``sqsjobs.api.lambda_handler``.
"""

from __future__ import annotations

from sqsjobs.api.lambda_handler import handler

__all__ = ["handler"]
