"""The API as a Lambda function behind API Gateway: Mangum turns REST (v1) and HTTP API (v2) events into ASGI.

Handler string: ``sqsjobs.api.lambda_handler.handler`` (``HANDLER``), in the same deployment zip as
the worker (``sqsjobs package lambda`` bundles fastapi and mangum). ``SQSJOBS_APP`` names the App;
``SQSJOBS_API_TOKENS`` (named tokens with roles) or ``SQSJOBS_API_TOKEN``, when set, makes every
request carry one too (in AWS, IAM on the API already authorises each request, so any ``Host`` is
answered); the console's session cookie is ``Secure`` (API Gateway serves HTTPS only);
``SQSJOBS_API_MAX_BODY_BYTES`` changes the body limit, ``SQSJOBS_API_MAX_STREAM_S`` how long an
event stream runs (25 s: under API Gateway's 29 s, each stream arrives whole).

Inside Lambda the App and the FastAPI application are built during the init phase (cold start).
Every invocation runs on one event loop of this module's, made current before Mangum runs, so the
App's async clients, bound to the loop that opened them, serve every invocation of the container.
"""

from __future__ import annotations

import asyncio
import functools
import os
from typing import Any

from mangum import Mangum
from mangum.adapter import DEFAULT_TEXT_MIME_TYPES

from sqsjobs.api.body import DEFAULT_MAX_BODY_BYTES
from sqsjobs.api.http_app import create_app
from sqsjobs.api.principals import tokens_from_env
from sqsjobs.api.problems import MEDIA_TYPE
from sqsjobs.app import App
from sqsjobs.errors import ConfigurationError
from sqsjobs.runtime.lambda_handlers import API_HANDLER, API_MAX_BODY_ENV

#: The handler string to configure on the function (``sqsjobs.runtime.lambda_handlers.API_HANDLER``).
HANDLER = API_HANDLER
MAX_BODY_ENV = API_MAX_BODY_ENV
#: How long an event stream (``GET /jobs/{id}/events``) runs here: API Gateway buffers the answer
#: and cuts it at 29 s, so a stream ends before that and arrives whole; ``EventSource`` asks again.
STREAM_CAP_ENV = "SQSJOBS_API_MAX_STREAM_S"
DEFAULT_STREAM_CAP_S = 25.0


@functools.cache
def _loop() -> asyncio.AbstractEventLoop:
    return asyncio.new_event_loop()


@functools.cache
def _adapter() -> Mangum:
    app = App.from_path()
    raw = os.environ.get(MAX_BODY_ENV)
    try:
        max_body = int(raw) if raw else DEFAULT_MAX_BODY_BYTES
    except ValueError:
        raise ConfigurationError(f"{MAX_BODY_ENV} must be a number of bytes, got {raw!r}") from None
    api = create_app(
        app,
        tokens=tokens_from_env(),
        max_body_bytes=max_body,
        allowed_hosts=("*",),
        secure_cookies=True,
        max_stream_s=_seconds(STREAM_CAP_ENV, DEFAULT_STREAM_CAP_S),
    )
    asyncio.set_event_loop(_loop())
    # lifespan off: nothing to start, and the App's clients live as long as the container. Problem
    # bodies are text too (Mangum would base64 them: their type does not contain application/json).
    return Mangum(api, lifespan="off", text_mime_types=[*DEFAULT_TEXT_MIME_TYPES, MEDIA_TYPE])


def _seconds(name: str, default: float) -> float:
    raw = os.environ.get(name)
    try:
        return float(raw) if raw else default
    except ValueError:
        raise ConfigurationError(f"{name} must be a number of seconds, got {raw!r}") from None


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Answer one API Gateway request (REST or HTTP API payload format 1.0 or 2.0)."""
    adapter = _adapter()
    asyncio.set_event_loop(_loop())
    return adapter(event, context)


if os.environ.get("AWS_LAMBDA_FUNCTION_NAME") and os.environ.get("SQSJOBS_APP"):
    _adapter()  # cold start: import the App and build the routes during the init phase
