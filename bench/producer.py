"""The producer side of one framework, driven line by line over stdin by the harness.

Runs in the framework's own virtualenv (sqsjobs: the project's; Celery and Dramatiq: the bench
one), so each framework enqueues with its own client code. Commands (one per line) and answers
(one JSON line each on stdout):

``bulk N SEQ0``  enqueue N jobs (seq SEQ0..) the framework's fastest documented way
                 → ``{"wall_s", "cpu_s"}``
``one SEQ``      enqueue one job, stamped with the wall clock just before the call
                 → ``{"call_s", "cpu_s"}`` (the call's wall time and the producer's CPU for it)
``quit``         exit

Usage: ``python -m bench.producer sqsjobs|celery|dramatiq`` (it prints ``{"ready": true}`` first).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any

from bench.marker import make_payload

Enqueue = Callable[[list[dict[str, Any]]], None]


def _sqsjobs() -> tuple[Enqueue, Enqueue]:
    from bench.apps.sqsjobs_app import app

    # Clients and queue URLs are made before the clock starts, as in a long-lived producer.
    app.clients.boto3.get("dynamodb")
    app.clients.boto3.get("sqs")
    app.run(app.queue_urls.flow(["default"]))

    def bulk(payloads: list[dict[str, Any]]) -> None:
        app.enqueue_many([{"type": "noop", "payload": p} for p in payloads])

    def one(payloads: list[dict[str, Any]]) -> None:
        app.enqueue("noop", payloads[0])

    return bulk, one


def _celery() -> tuple[Enqueue, Enqueue]:
    from bench.apps.celery_app import app, noop

    with app.producer_or_acquire() as producer:  # opens the broker connection and its SQS client
        producer.channel.sqs(queue=app.conf.task_default_queue)

    def bulk(payloads: list[dict[str, Any]]) -> None:
        # Celery has no batch publish on SQS: one SendMessage per task, on one pooled producer.
        with app.producer_or_acquire() as producer:
            for p in payloads:
                noop.apply_async((p,), producer=producer)

    def one(payloads: list[dict[str, Any]]) -> None:
        noop.apply_async((payloads[0],))

    return bulk, one


def _dramatiq() -> tuple[Enqueue, Enqueue]:
    from bench.apps.dramatiq_app import broker, noop

    broker._ensure_queue("default")  # GetQueueUrl once, before the clock starts

    def bulk(payloads: list[dict[str, Any]]) -> None:
        # dramatiq_sqs sends one message per call (its broker has no batch enqueue).
        for p in payloads:
            noop.send(p)

    def one(payloads: list[dict[str, Any]]) -> None:
        noop.send(payloads[0])

    return bulk, one


FRAMEWORKS: dict[str, Callable[[], tuple[Enqueue, Enqueue]]] = {
    "sqsjobs": _sqsjobs,
    "celery": _celery,
    "dramatiq": _dramatiq,
}


def _answer(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main(argv: list[str]) -> int:
    """Make the framework's clients, say ready, then serve commands until ``quit`` or EOF."""
    bulk, one = FRAMEWORKS[argv[0]]()
    _answer({"ready": True})
    for line in sys.stdin:
        cmd, *args = line.split()
        if cmd == "bulk":
            n, seq0 = int(args[0]), int(args[1])
            payloads = [make_payload(seq0 + i, 0.0) for i in range(n)]
            cpu0, wall0 = time.process_time(), time.perf_counter()
            bulk(payloads)
            _answer({"wall_s": time.perf_counter() - wall0, "cpu_s": time.process_time() - cpu0})
        elif cmd == "one":
            payload = make_payload(int(args[0]), 0.0)
            cpu0, start = time.process_time(), time.perf_counter()
            payload["t0"] = time.time()
            one([payload])
            _answer({"call_s": time.perf_counter() - start, "cpu_s": time.process_time() - cpu0})
        elif cmd == "quit":
            break
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
