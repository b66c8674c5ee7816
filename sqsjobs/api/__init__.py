"""The HTTP API: the producer and operator flows over HTTP, for services that are not written in Python.

One more thin adapter over the flows the CLI uses (``App.aenqueue``/``aget``/``acancel``/``aretry``,
``sqsjobs.ops``), built with FastAPI (the ``api`` extra: ``pip install 'sqsjobs[api]'``). The same
application runs two ways: ``sqsjobs api`` serves it with uvicorn (``sqsjobs.api.server``), and on
Lambda behind API Gateway Mangum adapts the events (``sqsjobs.api.lambda_handler``).

Modules, one concern each: ``app`` (``create_app``), ``auth`` (the bearer token), ``body`` (the
request size limit), ``problems`` (RFC 9457 error bodies), ``models`` (request and response
shapes), ``jobs``, ``queues`` and ``dlq`` (the routes), and the web dashboard (``dashboard``:
server-rendered pages at ``/`` and ``/ui/``, ``dashboard_views`` renders them). See docs/api.md and
docs/dashboard.md.

Only this package imports fastapi: the library, its workers and its CLI run without the extra.
"""

from __future__ import annotations
