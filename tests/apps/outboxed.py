"""An app whose jobs are written into a Postgres outbox, and the processes the outbox tests run.

The handler appends the job's id to ``<dir>/<n>``: a file with two lines is a job that ran twice.

``python -m tests.apps.outboxed produce DSN DIR FIRST COUNT``: COUNT transactions, each an order row
and its job; every fourth (n % 4 == 0) rolls back. Prints nothing until the end, then ``done``.
``python -m tests.apps.outboxed hang DSN DIR``: writes one job in an open transaction, prints its id,
and sleeps (to be SIGKILLed before it commits).
``python -m tests.apps.outboxed crash-relay DSN BATCH AFTER``: a relay whose process SIGKILLs itself
right after its AFTER-th enqueue, before that pass deletes its rows (between send and delete).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from sqsjobs import App, JobContext

app = App(os.environ.get("TEST_APP_NAME", "outboxed"))


class Work(BaseModel):
    n: int
    dir: str


@app.job("outboxed", max_attempts=3, timeout=30)
def outboxed(payload: Work, ctx: JobContext) -> int:
    with Path(payload.dir, str(payload.n)).open("a") as runs:
        runs.write(ctx.job_id + "\n")
    return payload.n


def produce(dsn: str, runs_dir: str, first: int, count: int) -> None:
    import psycopg

    with psycopg.connect(dsn) as conn:
        for n in range(first, first + count):
            with conn.transaction():
                conn.execute("INSERT INTO orders (id, total) VALUES (%s, %s)", (f"o{n}", n))
                app.enqueue(outboxed, Work(n=n, dir=runs_dir), connection=conn)
                if n % 4 == 0:
                    raise psycopg.Rollback()
    print("done", flush=True)


def hang(dsn: str, runs_dir: str) -> None:
    import psycopg

    conn = psycopg.connect(dsn)
    with conn.transaction():
        conn.execute("INSERT INTO orders (id, total) VALUES ('hung', 1)")
        print(app.enqueue(outboxed, Work(n=-1, dir=runs_dir), connection=conn), flush=True)
        time.sleep(600)


def crash_relay(dsn: str, batch: int, after: int) -> None:
    from sqsjobs.outbox import OutboxRelay

    calls = 0

    def enqueue_then_die(requests: list[Any]) -> list[str]:
        nonlocal calls
        ids = app.enqueue_many(requests)
        calls += 1
        if calls == after:
            print(f"killed after {len(ids)}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        return ids

    OutboxRelay(dsn, enqueue_then_die, batch_size=batch, poll_s=0.5).run(threading.Event())


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    if command == "produce":
        produce(args[0], args[1], int(args[2]), int(args[3]))
    elif command == "hang":
        hang(args[0], args[1])
    else:
        crash_relay(args[0], int(args[1]), int(args[2]))
