"""Dramatiq 2 with dramatiq_sqs, as its README sets it up.

Run: ``dramatiq bench.apps.dramatiq_app --processes 1 --threads 8``.

Configuration, and why:

- ``SQSBroker(endpoint_url=...)``: the README's way to reach a non-AWS endpoint (ElasticMQ there,
  the counting proxy here); extra keyword arguments go to ``boto3.resource("sqs")``.
- ``visibility_timeout=30``: dramatiq_sqs defaults to 12 h, which hides a crashed worker's
  message for half a day; 30 s matches sqsjobs and Celery here and changes no request count.
- Default middleware (age and time limits, retries, callbacks, pipelines, shutdown notices).
- One process with 8 threads: the worker prefetches ``2 x threads``, capped at SQS's 10 per receive.
"""

from __future__ import annotations

import os
from typing import Any

import dramatiq
from dramatiq_sqs import SQSBroker

from bench.marker import mark

NAMESPACE = os.environ.get("BENCH_DRAMATIQ_NAMESPACE", "bench")

broker = SQSBroker(
    namespace=NAMESPACE,
    visibility_timeout=30,
    endpoint_url=os.environ.get("BENCH_ENDPOINT", "http://127.0.0.1:4566"),
    region_name="us-east-1",
)
dramatiq.set_broker(broker)


@dramatiq.actor(queue_name="default")
def noop(payload: dict[str, Any]) -> None:
    """Marks its start and returns."""
    mark(payload)
