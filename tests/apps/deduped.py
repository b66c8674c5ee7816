"""An app for the dedup-mode tests, and the enqueuer process they start twenty of.

The handler writes each run's payload to ``$DEDUPE_DIR/<job id>.<attempt>``, so a test counts the
runs and reads what ran from outside. ``python -m tests.apps.deduped KEY TAG --start FILE [--unique
| --dedupe-for S | --throttle S]`` waits for FILE (so twenty processes enqueue at once), enqueues
``{"tag": TAG}`` under KEY (having touched ``FILE.ready.TAG`` once ready) and prints what it got back as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from sqsjobs import App, IdempotencyConflict, JobContext

app = App(os.environ.get("TEST_APP_NAME", "deduped"))


@app.job("dedupe.record", max_attempts=1, timeout=60)
def record(payload: dict[str, object], ctx: JobContext) -> str:
    Path(os.environ["DEDUPE_DIR"], f"{ctx.job_id}.{ctx.attempt}").write_text(json.dumps(payload))
    return str(payload["tag"])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("key")
    parser.add_argument("tag")
    parser.add_argument("--start", required=True)
    parser.add_argument("--payload", help="the payload's tag, when not TAG")
    parser.add_argument("--unique", action="store_true")
    parser.add_argument("--dedupe-for", type=float)
    parser.add_argument("--throttle", type=float)
    parser.add_argument("--debounce", type=float)
    args = parser.parse_args()
    app.settings  # noqa: B018  (resolve the settings and the clients before the start line)
    app.sync_clients.get("dynamodb")
    app.sync_clients.get("sqs")
    start = Path(args.start)
    Path(f"{start}.ready.{args.tag}").touch()
    while not start.exists():
        time.sleep(0.01)
    try:
        got = app.enqueue(
            "dedupe.record",
            {"tag": args.payload or args.tag},
            idempotency_key=args.key,
            unique="while_active" if args.unique else None,
            dedupe_for=args.dedupe_for,
            throttle=args.throttle,
            debounce=args.debounce,
            debounce_max=60.0 if args.debounce else None,
        )
    except IdempotencyConflict:
        print(json.dumps({"conflict": True}), flush=True)
        return
    answer = {
        "id": str(got),
        "deduplicated": getattr(got, "deduplicated", None),
        "replaced": getattr(got, "replaced", None),
    }
    print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main()
