"""A thin producer process (it imports no handler code) that can die at a chosen step of its enqueue.

``python -m tests.apps.producer_script SIZE [--die-before CALL] [--die-after CALL] [--hold CALL]``:
enqueues one ``large.echo`` job whose blob is SIZE bytes, printing its id; with ``--die-before
SendMessageBatch`` (or ``PutItem``, ``PutObject``) it kills itself with SIGKILL just before that
request leaves, as a crash would; with ``--die-after`` just after its answer came. The message and
the record leave at once, so a crash point between them is made by ``--hold``: that request never
leaves (its thread waits) while the other one goes.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from typing import Any

from sqsjobs import App

SERVICE_OF = {"SendMessageBatch": "sqs", "PutItem": "dynamodb", "PutObject": "s3"}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("size", type=int)
    parser.add_argument("--die-before", choices=sorted(SERVICE_OF))
    parser.add_argument("--die-after", choices=sorted(SERVICE_OF))
    parser.add_argument("--hold", choices=sorted(SERVICE_OF))
    parser.add_argument("--key")
    args = parser.parse_args()
    app = App(os.environ["TEST_APP_NAME"])

    def die(**_: Any) -> None:
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)

    def hold(**_: Any) -> None:
        threading.Event().wait()

    for when, call, act in (
        ("before-call", args.die_before, die),
        ("after-call", args.die_after, die),
        ("before-call", args.hold, hold),
    ):
        if call:
            client = app.clients.boto3.get(SERVICE_OF[call])
            client.meta.events.register(f"{when}.{SERVICE_OF[call]}.{call}", act)
    job_id = app.enqueue("large.echo", {"blob": "x" * args.size}, queue="default", idempotency_key=args.key)
    print(job_id, flush=True)


if __name__ == "__main__":
    main()
