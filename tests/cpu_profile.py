"""Where the suite's CPU goes: per test, and per kind of process (``make test-profile``).

The suite is CPU-bound on two cores (about 25 minutes of CPU for 13 minutes of wall time), so cutting
its time means cutting CPU, and that starts with knowing whose it is. Two views:

- **per test** (a pytest plugin, ``-p tests.cpu_profile`` with ``SQSJOBS_TEST_CPU=<file>``): the CPU
  the xdist worker's process tree spent from a test's setup to its teardown — the worker itself
  (its threads, the embedded moto), its live descendants (MiniStack, worker subprocesses, pip, node)
  and the children reaped meanwhile (``RUSAGE_CHILDREN``, and each live descendant's own reaped
  children). A session fixture's CPU lands on the test that first asked for it. One JSON line per
  test; ``python -m tests.cpu_profile report <file>`` sums them by file.
- **per kind** (``python -m tests.cpu_profile sample <file> <pid>``): every second, the CPU of
  every process under ``<pid>`` by kind (pytest worker, MiniStack, worker subprocess, pip, node...),
  read from ``/proc``; a process that lives less than a second is counted in its parent's reaped
  children. Prints the totals when ``<pid>`` exits.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

TICK = os.sysconf("SC_CLK_TCK")
#: Process kinds, by the first pattern found in the command line (order matters).
KINDS = (
    ("ministack", "ministack"),
    ("lambda runtime", "bootstrap"),
    ("node (jsii, CDK synth)", "node"),
    ("pip", "pip"),
    ("chromium", "chrom"),
    ("postgres", "postgres"),
    ("pytest worker", "exec(eval(sys.stdin"),  # how execnet starts an xdist worker
    ("mypy", "mypy"),
    ("ruff", "ruff"),
    ("sqsjobs worker/CLI subprocess", "sqsjobs"),
    ("bench peers", "celery"),
    ("bench peers", "dramatiq"),
    ("pytest", "pytest"),
    ("make, shells", "make"),
)


def _stat(pid: int) -> tuple[int, float, float] | None:
    """(ppid, own CPU s, reaped children's CPU s) of ``pid``, or None when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    own = (int(fields[11]) + int(fields[12])) / TICK
    reaped = (int(fields[13]) + int(fields[14])) / TICK
    return int(fields[1]), own, reaped


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _tree(root: int) -> dict[int, tuple[int, float, float]]:
    """Every live process under ``root`` (``root`` excluded), with its ``_stat``."""
    stats = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (stat := _stat(int(entry))) is not None:
            stats[int(entry)] = stat
    below: dict[int, tuple[int, float, float]] = {}
    frontier = [root]
    children: dict[int, list[int]] = defaultdict(list)
    for pid, (ppid, _, _) in stats.items():
        children[ppid].append(pid)
    while frontier:
        for child in children.get(frontier.pop(), []):
            below[child] = stats[child]
            frontier.append(child)
    return below


def kind_of(cmdline: str) -> str:
    """The kind a command line belongs to (``KINDS``), or ``other: <program>``."""
    for kind, pattern in KINDS:
        if pattern in cmdline:
            return kind
    return "other: " + (Path(cmdline.split(" ", 1)[0]).name or "?")


# ── per test ────────────────────────────────────────────────────────────────────────────
def tree_cpu() -> float:
    """CPU seconds of this process, its reaped children and every live descendant (with theirs)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime
    return total + sum(cpu + children for _, cpu, children in _tree(os.getpid()).values())


def pytest_configure(config: Any) -> None:
    """Record per-test CPU when ``SQSJOBS_TEST_CPU`` names the file (appended to, one line a test).

    pytest is imported here, not at the top: the sampler runs on any Python (``make test-profile``
    starts it before the virtualenvs exist).
    """
    import pytest

    path = os.environ.get("SQSJOBS_TEST_CPU")
    if not path:
        return
    out = Path(path)

    class PerTest:
        @pytest.hookimpl(hookwrapper=True)
        def pytest_runtest_protocol(self, item: pytest.Item) -> Any:
            cpu, wall = tree_cpu(), time.monotonic()
            yield
            record = {
                "test": item.nodeid,
                "cpu_s": round(tree_cpu() - cpu, 2),
                "wall_s": round(time.monotonic() - wall, 2),
                "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
            }
            with out.open("a") as handle:
                handle.write(json.dumps(record) + "\n")

    # under xdist only the workers run tests: the controller's instance records nothing
    config.pluginmanager.register(PerTest(), "sqsjobs-test-cpu")


def report(path: Path, top: int = 40) -> str:
    """CPU and wall seconds by test file, the costliest first."""
    by_file: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
    for line in path.read_text().splitlines():
        record = json.loads(line)
        file = record["test"].split("::", 1)[0]
        by_file[file][0] += record["cpu_s"]
        by_file[file][1] += record["wall_s"]
        by_file[file][2] += 1
    total = sum(v[0] for v in by_file.values())
    lines = [f"{'cpu s':>8} {'wall s':>8} {'tests':>5}  file   (total CPU {total:.0f} s)"]
    for file, (cpu, wall, n) in sorted(by_file.items(), key=lambda kv: -kv[1][0])[:top]:
        lines.append(f"{cpu:8.1f} {wall:8.1f} {int(n):5d}  {file}")
    return "\n".join(lines)


# ── per kind ────────────────────────────────────────────────────────────────────────────
def sample(out: Path, root: int, interval_s: float = 1.0) -> str:
    """Sample the tree under ``root`` until it exits; write and return CPU seconds by kind."""
    seen: dict[int, list[Any]] = {}  # pid -> [kind, ppid, own, reaped at first sight, reaped now]
    credited: dict[int, float] = defaultdict(float)  # a parent's reaped CPU of children seen here
    totals: dict[str, float] = defaultdict(float)
    while _stat(root) is not None:
        tree = _tree(root)
        for pid, (ppid, cpu, reaped) in tree.items():
            if pid in seen:
                seen[pid][2:5:2] = [cpu, reaped]
            else:
                seen[pid] = [kind_of(_cmdline(pid)), ppid, cpu, reaped, reaped]
        for pid in [p for p in seen if p not in tree and seen[p][0] is not None]:
            kind, ppid, cpu, first, reaped = seen[pid]
            totals[kind] += cpu  # up to its last sample
            credited[ppid] += cpu + reaped - first
            seen[pid][0] = None  # dead: only its reaped children's account stays
        time.sleep(interval_s)
    for pid, (kind, _, cpu, first, reaped) in seen.items():
        if kind is not None:
            totals[kind] += cpu
        parent_kind = kind or "a process"
        unseen = reaped - first - credited.get(pid, 0.0)
        if unseen > 0.05:  # children that lived less than a sample
            totals[f"short-lived children of {parent_kind}"] += unseen
    rows = sorted(totals.items(), key=lambda kv: -kv[1])
    text = "\n".join(f"{cpu:8.1f}  {kind}" for kind, cpu in rows)
    out.write_text(f"{sum(totals.values()):8.1f}  total (processes under {root})\n{text}\n")
    return out.read_text()


def main(argv: list[str]) -> int:
    """``report <file>`` or ``sample <out> <pid> [<interval s>]``."""
    if len(argv) == 2 and argv[0] == "report":
        print(report(Path(argv[1])))
        return 0
    if len(argv) in (3, 4) and argv[0] == "sample":
        print(sample(Path(argv[1]), int(argv[2]), *(float(a) for a in argv[3:])))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
