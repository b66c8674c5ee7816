"""Celery 5 on its SQS transport (kombu), configured as its docs recommend for SQS and short tasks.

Run: ``celery -A bench.apps.celery_app worker --pool threads --concurrency 32 --without-gossip
--without-mingle --without-heartbeat --loglevel WARNING``.

Configuration, and why:

- ``broker_url = sqs://KEY:SECRET@127.0.0.1:PORT`` with ``is_secure=False``: kombu builds the
  botocore ``endpoint_url`` from the URL's host and port (``Channel.endpoint_url`` in
  ``kombu/transport/SQS/__init__.py``), so every request goes to the counting proxy.
- ``predefined_queues``: no ListQueues/CreateQueue at start; the queue exists (the harness makes it).
- ``wait_time_seconds=20`` and ``polling_interval=0``: one long poll at a time, no extra client-side
  sleep after an empty poll (kombu's defaults, 10 s + 1 s, add up to 11 s between idle polls).
- ``visibility_timeout=30``: like sqsjobs' default (kombu's is 30 min).
- No result backend, remote control, gossip, mingle or heartbeat: none works over SQS, and each
  would only add requests.
- Everything else (prefetch multiplier 4, early ack) is Celery's default.
"""

from __future__ import annotations

import os
from typing import Any

from celery import Celery

from bench.marker import mark

QUEUE = os.environ.get("BENCH_CELERY_QUEUE", "bench-celery")
_endpoint = os.environ.get("BENCH_ENDPOINT", "http://127.0.0.1:4566").removeprefix("http://")

app = Celery("bench")
app.conf.update(
    broker_url=f"sqs://bench:bench@{_endpoint}",
    broker_transport_options={
        "region": "us-east-1",
        "is_secure": False,
        "wait_time_seconds": 20,
        "polling_interval": 0,
        "visibility_timeout": 30,
        "predefined_queues": {QUEUE: {"url": os.environ.get("BENCH_CELERY_QUEUE_URL", "")}},
    },
    broker_connection_retry_on_startup=True,
    task_default_queue=QUEUE,
    task_ignore_result=True,
    worker_enable_remote_control=False,
    worker_hijack_root_logger=False,
)


@app.task(name="noop")
def noop(payload: dict[str, Any]) -> None:
    """Marks its start and returns."""
    mark(payload)
