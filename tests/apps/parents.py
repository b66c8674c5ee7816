"""An app for the children tests (tests/integration/test_children.py): parents that await children, and evidence.

Every child run appends an ``in`` line when its handler starts and an ``out`` line before it returns,
to ``$TEST_RUNS_DIR/children``; every parent run an ``in`` line at its top (plain code: it runs in
every run), its step ``before`` a line to ``before`` (once per job), and an ``out`` line as the run
leaves (asleep on its children, returned or raised) to ``parents``. O_APPEND: concurrent processes
never tear a line, so a test reads, from outside, which handler ran when and where.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from sqsjobs import App, Child, JobContext, PermanentError
from sqsjobs.errors import Sleep

app = App(os.environ.get("TEST_APP_NAME", "parents"))


def log(name: str, line: dict[str, Any]) -> None:
    """One JSON line appended to ``$TEST_RUNS_DIR/<name>``."""
    path = Path(os.environ["TEST_RUNS_DIR"]) / name
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, (json.dumps(line) + "\n").encode())
    finally:
        os.close(fd)


def read(runs_dir: Path, name: str) -> list[dict[str, Any]]:
    path = runs_dir / name
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _edge(name: str, edge: str, ctx: JobContext, **more: Any) -> None:
    log(name, {"edge": edge, "job": ctx.job_id, "pid": os.getpid(), "at": time.time(), **more})


@app.job("square", max_attempts=3, timeout=60)
def square(payload: dict[str, Any], ctx: JobContext) -> int:
    """``n * n`` after ``sleep_s``; fails for good when ``fail``."""
    n = int(payload["n"])
    _edge("children", "in", ctx, n=n, attempt=ctx.attempt)
    time.sleep(float(payload.get("sleep_s", 0)))
    if payload.get("fail"):
        raise PermanentError(f"child {n} told to fail")
    _edge("children", "out", ctx, n=n)
    return n * n


@app.job("shout", max_attempts=1, timeout=60)
def shout(payload: dict[str, Any], ctx: JobContext) -> str:
    """Another type, for ``ctx.children.all``."""
    return str(payload["word"]).upper()


@app.job("parent", max_attempts=3, timeout=120)
def parent(payload: dict[str, Any], ctx: JobContext) -> Any:
    """Maps ``count`` squares (``fail``: the indexes that fail), then awaits ``words`` shouted together."""
    _edge("parents", "in", ctx)
    try:
        result = _parent(payload, ctx)
    except Sleep:
        _edge("parents", "out", ctx, asleep=True)
        raise
    except BaseException as exc:
        _edge("parents", "out", ctx, raised=type(exc).__name__)
        raise
    _edge("parents", "out", ctx, returned=True)
    return result


def _parent(payload: dict[str, Any], ctx: JobContext) -> Any:
    ctx.step("before", _edge, "before", "step", ctx)
    fail = set(payload.get("fail", ()))
    sleep_s = payload.get("sleep_s", 0)
    work = [{"n": n, "sleep_s": sleep_s, "fail": n in fail} for n in range(payload["count"])]
    policy = payload.get("on_failure", "raise")
    got = ctx.children.map("square", work, on_failure=policy)
    if policy == "return":
        return [[o.status, o.result, o.error] for o in got]
    words = ctx.children.all(*[Child("shout", {"word": w}) for w in payload.get("words", [])])
    return {"squares": got, "words": words}
