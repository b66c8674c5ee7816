"""``make bench-profile``: where the sqsjobs worker's CPU goes while it drains a backlog (py-spy).

Enqueues a backlog with the worker stopped, then runs ``sqsjobs worker`` under ``py-spy record``
(sampling, no instrumentation overhead, every thread) until the backlog is drained, and prints
the functions that hold the most samples: inclusive ("cumulative") and where the CPU itself is
spent ("self"), plus a breakdown by library. Startup (imports) is left out of both. Idle samples
(threads waiting in ``select``/``epoll``/locks) are dropped: only the thread holding the GIL is sampled (``--gil``).

It also reads the worker's CPU time (``/proc/<pid>/stat``, every thread) from its first job to
its last, so each step's share becomes milliseconds of CPU per job (``step_ms_per_job``). py-spy
reads the worker's memory from outside and does not pause it (``--nonblocking``); the figure is
still best compared with other runs of this script rather than with ``make bench``.

Usage: ``python -m bench.profile [--n 2000] [--concurrency 32] [--latency-ms 0]``.
"""

from __future__ import annotations

import argparse
import collections
import json
import signal
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

from bench import procs
from bench.frameworks import ALL, PEER_VENV, REPO
from bench.harness import Bench, Producer

#: A stack whose frames include one of these is start-up work (imports), not per-job work.
STARTUP_MARKERS = ("_find_and_load",)
#: Library of a frame, by a piece of its file path; the first match wins.
LIBRARIES = (
    ("aiobotocore", "aiobotocore"),
    ("botocore", "botocore"),
    ("aiohttp", "aiohttp"),
    ("asyncio", "asyncio"),
    ("powertools logging", "aws_lambda_powertools/logging"),
    ("powertools metrics", "aws_lambda_powertools/metrics"),
    ("logging", "logging/"),
    ("json", "json/"),
    ("pydantic", "pydantic"),
    ("sqsjobs", "sqsjobs/"),
    ("concurrent.futures", "concurrent/futures"),
    ("threading", "threading.py"),
)


def library(frame: str) -> str:
    """The library a ``function (file:line)`` frame belongs to."""
    for name, piece in LIBRARIES:
        if piece in frame:
            return name
    return "other"


#: Steps of the worker's per-job path, by a frame their stacks contain; the first match wins.
STEPS: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    # (name, frames that must all be in the stack, frames that must not be)
    # Claims and finishes grouped by store/write_batcher.py: one BatchExecuteStatement per group
    # (or the group's single UpdateItem), sent from a task of their own.
    ("claims and finishes, grouped (BatchExecuteStatement or UpdateItem)", ("WriteBatcher._send",), ()),
    ("complete: UpdateItem (fenced)", ("Execution._succeeded", "App.arun"), ()),
    ("claim: UpdateItem, ReturnValues=ALL_NEW", ("Execution.handle", "App.arun"), ("Execution._run",)),
    ("SQS DeleteMessageBatch / ChangeMessageVisibilityBatch", ("MessageOps.",), ()),
    ("SQS ReceiveMessage", ("Worker._receive_loop",), ()),
    ("JSON log lines", ("logging/",), ()),
    ("EMF metrics", ("observability/metrics.py",), ()),
    ("sync handler in a thread (submit, wake-up, run)", ("concurrent/futures",), ()),
    ("sync handler in a thread (submit, wake-up, run)", ("Thread._bootstrap",), ()),
    ("PartiQL twins of the writes (store/statements.py)", ("sqsjobs/store/statements.py",), ()),
    ("request builders and item codec (store/)", ("sqsjobs/store/",), ()),
    ("other sqsjobs work (envelope, validation, tracing, outcome)", ("sqsjobs/runtime/execution.py",), ()),
    ("aiohttp/botocore callbacks on the loop (reading answers)", ("aiohttp/",), ("sqsjobs/",)),
    # SDK frames whose awaiting caller the sampler did not see (a task resumed by the loop).
    ("SDK, caller not sampled", ("botocore/",), ("sqsjobs/runtime/execution.py",)),
    ("event loop and task bookkeeping", ("asyncio/",), ()),
)


def step(frames: list[str]) -> str:
    """The step of the worker's path a sampled stack belongs to."""
    for name, needed, excluded in STEPS:
        if all(any(n in f for f in frames) for n in needed) and not any(
            x in f for f in frames for x in excluded
        ):
            return name
    return "other"


def analyse(raw: Path, top: int = 25) -> dict[str, object]:
    """Self and inclusive sample shares per function and per library, from py-spy's raw output.

    Thread names are dropped, so the handler threads and the event loop add up by function.
    """
    self_counts: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    lib_self: collections.Counter[str] = collections.Counter()
    lib_incl: collections.Counter[str] = collections.Counter()
    steps: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        frames = stack.split(";")[1:]  # the first "frame" names the thread
        if not frames or any(m in f for f in frames for m in STARTUP_MARKERS):
            continue  # imports, or a thread with no Python frame (interpreter start/exit)
        n = int(count)
        total += n
        self_counts[frames[-1]] += n
        steps[step(frames)] += n
        lib_self[library(frames[-1])] += n
        for f in set(frames):
            incl[f] += n
        for lib in {library(f) for f in frames}:
            lib_incl[lib] += n

    def share(counter: collections.Counter[str]) -> list[tuple[str, float]]:
        return [(k, round(100 * v / total, 1)) for k, v in counter.most_common(top)]

    return {
        "samples": total,
        "step_pct": share(steps),
        "self_pct": share(self_counts),
        "inclusive_pct": share(incl),
        "library_self_pct": share(lib_self),
        "library_inclusive_pct": share(lib_incl),
    }


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of one process, all its threads (``/proc/<pid>/stat``)."""
    raw = Path(f"/proc/{pid}/stat").read_text()
    fields = raw[raw.rfind(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / procs.CLOCK_TICKS


def main(argv: list[str] | None = None) -> int:
    """Profile one drain and print the shares."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--latency-ms", type=float, default=0.0)
    parser.add_argument("--rate", type=int, default=500, help="py-spy samples per second")
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "profile"))
    args = parser.parse_args(argv)
    py_spy = PEER_VENV / "bin" / "py-spy"
    fw = next(f for f in ALL if f.kind == "sqsjobs")
    fw = type(fw)(f"sqsjobs c{args.concurrency}", "sqsjobs", args.concurrency)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    raw = out.parent / "tmp" / f"{out.name}-raw.txt"  # py-spy's stacks, ~1 MB: not kept in git
    raw.parent.mkdir(parents=True, exist_ok=True)
    with ExitStack() as stack, tempfile.TemporaryDirectory(prefix="sqsjobs-profile-") as tmp:
        bench = Bench(stack, "ministack", Path(tmp))
        bench.proxy.latency_s = args.latency_ms / 1000
        env = bench.env(fw, "profile", bench.make_queue(fw, "profile"))
        producer = Producer(fw, env, Path(tmp, "producer.log"))
        try:
            producer.command(f"bulk {args.n} 0")
        finally:
            producer.close()
        bench.proxy.reset_counts()
        argv_ = [
            str(py_spy),
            "record",
            "--rate",
            str(args.rate),
            "--format",
            "raw",
            "--nonblocking",
            "--gil",
            "--threads",
            "--output",
            str(raw),
            "--",
            *fw.worker_argv(),
        ]
        spy = procs.start(argv_, env=env, cwd=REPO, log=Path(tmp, "worker.log"))
        try:
            started = time.monotonic()
            # The worker's CPU from its first job on (start-up left out, as in the samples).
            if not bench.markers.wait(range(1), timeout_s=120):
                raise RuntimeError("the worker ran no job")
            worker = next(pid for pid in procs.group_pids(spy.pid) if pid != spy.pid)
            cpu0, jobs0 = _cpu_s(worker), bench.markers.seen(range(args.n))
            if not bench.markers.wait(range(args.n), timeout_s=600):
                raise RuntimeError(f"only {bench.markers.seen(range(args.n))}/{args.n} jobs ran")
            drain_s = time.monotonic() - started
            time.sleep(1.0)  # the last outcomes and acks
            cpu_ms_per_job = 1000 * (_cpu_s(worker) - cpu0) / (args.n - jobs0)
            # SIGINT to the worker only (py-spy's child); py-spy writes its file when the child exits.
            for pid in procs.group_pids(spy.pid):
                if pid != spy.pid:
                    procs.os.kill(pid, signal.SIGINT)
            spy.wait(timeout=60)
        finally:
            if spy.poll() is None:
                procs.stop(spy)
        counts = bench.proxy.snapshot()["requests"]
    shares = analyse(raw)
    step_ms = [(name, round(pct * cpu_ms_per_job / 100, 3)) for name, pct in shares["step_pct"]]  # type: ignore[attr-defined]
    result = {
        "n": args.n,
        "concurrency": args.concurrency,
        "latency_ms": args.latency_ms,
        "drain_s_including_startup": round(drain_s, 2),
        "requests": counts,
        "worker_cpu_ms_per_job": round(cpu_ms_per_job, 3),
        **shares,
        "step_ms_per_job": step_ms,
    }
    out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    print(f"worker CPU per job (from its first job on, under py-spy): {cpu_ms_per_job:.3f} ms")
    print("\nstep_ms_per_job (the step's share of the samples times the CPU per job):")
    for name, ms in step_ms:
        print(f"  {ms:6.3f}  {name}")
    for key in ("step_pct", "library_self_pct", "library_inclusive_pct", "self_pct", "inclusive_pct"):
        print(f"\n{key}:")
        for name, pct in result[key]:  # type: ignore[attr-defined]
            print(f"  {pct:5.1f}%  {name}")
    print(f"\nwrote {raw} and {out.with_suffix('.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
