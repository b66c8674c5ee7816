"""A thin producer process: it imports no handler code, so it cannot know a type's ``expires_after``.

``python -m tests.apps.thin_producer TYPE RUNS_DIR [--delay S]``: enqueues one job of TYPE on the
``default`` queue and prints its id.
"""

from __future__ import annotations

import argparse
import os

from sqsjobs import App


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("type")
    parser.add_argument("runs_dir")
    parser.add_argument("--delay", type=float, default=None)
    args = parser.parse_args()
    app = App(os.environ["TEST_APP_NAME"])
    assert args.type not in app.registry, "a thin producer has no handlers"
    print(app.enqueue(args.type, {"runs_dir": args.runs_dir}, queue="default", delay=args.delay), flush=True)


if __name__ == "__main__":
    main()
