"""A thin producer process (it imports no handler code) that can die at a chosen step of its enqueue.

``python -m tests.apps.producer_script SIZE [--die-before CALL]``: enqueues one ``large.echo`` job
whose blob is SIZE bytes, printing its id; with ``--die-before SendMessageBatch`` (or ``PutItem``,
``PutObject``) it kills itself with SIGKILL just before that request leaves, as a crash would.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import Any

from sqsjobs import App

SERVICE_OF = {"SendMessageBatch": "sqs", "PutItem": "dynamodb", "PutObject": "s3"}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("size", type=int)
    parser.add_argument("--die-before", choices=sorted(SERVICE_OF))
    parser.add_argument("--key")
    args = parser.parse_args()
    app = App(os.environ["TEST_APP_NAME"])
    if args.die_before:
        client = app.sync_clients.get(SERVICE_OF[args.die_before])

        def die(**_: Any) -> None:
            sys.stdout.flush()
            os.kill(os.getpid(), signal.SIGKILL)

        client.meta.events.register(f"before-call.{SERVICE_OF[args.die_before]}.{args.die_before}", die)
    job_id = app.enqueue("large.echo", {"blob": "x" * args.size}, queue="default", idempotency_key=args.key)
    print(job_id, flush=True)


if __name__ == "__main__":
    main()
