"""An app for the dedup-mode tests, and the enqueuer processes they race twenty of.

The handler writes each run's payload to ``$DEDUPE_DIR/<job id>.<attempt>``, so a test counts the
runs and reads what ran from outside. ``python -m tests.apps.deduped KEY TAG... --start FILE [--unique
| --dedupe-for S | --throttle S]`` forks one enqueuer process per TAG; each makes its own clients,
touches ``FILE.ready.TAG``, waits for FILE (so twenty processes enqueue at once), enqueues
``{"tag": TAG}`` under KEY and prints what it got back as one JSON line naming its tag.

Forked, not started one by one: an interpreter that imports sqsjobs and boto3 costs about 1.3 s of
CPU, twenty of them per race about 26 s, and the dedupe tests were the suite's costliest file (136 s
of CPU for four tests). The forks import nothing: they race as separate processes all the same.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import traceback
from pathlib import Path

from sqsjobs import App, Debounce, DedupeFor, IdempotencyConflict, JobContext, Throttle, WhileActive
from sqsjobs.dedupe import Dedupe

app = App(os.environ.get("TEST_APP_NAME", "deduped"))


@app.job("dedupe.record", max_attempts=1, timeout=60)
def record(payload: dict[str, object], ctx: JobContext) -> str:
    Path(os.environ["DEDUPE_DIR"], f"{ctx.job_id}.{ctx.attempt}").write_text(json.dumps(payload))
    return str(payload["tag"])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("key")
    parser.add_argument("tags", nargs="+")
    parser.add_argument("--start", required=True)
    parser.add_argument("--payload", help="the payload's tag, when not TAG")
    parser.add_argument("--unique", action="store_true")
    parser.add_argument("--dedupe-for", type=float)
    parser.add_argument("--throttle", type=float)
    parser.add_argument("--debounce", type=float)
    args = parser.parse_args()
    # botocore's JSON is read once, here, into the process's shared loader (sqsjobs._client_config): each
    # fork still makes its own session, clients and connections, without reading it again.
    preload = App("preload")
    preload.clients.boto3.get("dynamodb")
    preload.clients.boto3.get("sqs")
    preload.close()  # its clients go; the loaded data stays in the process's loader
    children = []
    for tag in args.tags:
        pid = os.fork()
        if pid == 0:  # the enqueuer: its own clients and connections, made after the fork
            code = 1
            try:
                enqueue_one(args, tag)
                code = 0
            except BaseException:
                traceback.print_exc()
            finally:
                os._exit(code)
        children.append(pid)
    failed = [pid for pid in children if os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) != 0]
    raise SystemExit(1 if failed else 0)


def dedupe_mode(args: argparse.Namespace) -> Dedupe | None:
    """The mode the command line names (one at most)."""
    if args.unique:
        return WhileActive()
    if args.dedupe_for:
        return DedupeFor(args.dedupe_for)
    if args.throttle:
        return Throttle(args.throttle)
    if args.debounce:
        return Debounce(args.debounce, max=60.0)
    return None


def enqueue_one(args: argparse.Namespace, tag: str) -> None:
    """One enqueuer: ready, then released with the others by the start file; prints what it got."""
    app.settings  # noqa: B018  (resolve the settings and the clients before the start line)
    app.clients.boto3.get("dynamodb")
    app.clients.boto3.get("sqs")
    start = Path(args.start)
    Path(f"{start}.ready.{tag}").touch()
    while not start.exists():
        time.sleep(0.01)
    try:
        got = app.enqueue(
            "dedupe.record",
            {"tag": args.payload or tag},
            idempotency_key=args.key,
            dedupe=dedupe_mode(args),
        )
    except IdempotencyConflict:
        say({"tag": tag, "conflict": True})
        return
    answer = {
        "tag": tag,
        "id": str(got),
        "deduplicated": getattr(got, "deduplicated", None),
        "replaced": getattr(got, "replaced", None),
    }
    say(answer)


def say(answer: dict[str, object]) -> None:
    """One line in one write: twenty forks share the pipe (a write under PIPE_BUF is never interleaved)."""
    os.write(1, (json.dumps(answer) + "\n").encode())


if __name__ == "__main__":
    main()
