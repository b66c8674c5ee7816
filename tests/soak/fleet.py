"""The soak's processes: the worker processes and the sweeper, and the killer that stops workers.

Every 2-5 s (seeded) the killer SIGKILLs a random worker, or SIGTERMs it (a graceful drain it then
times), and starts a replacement. A process that exits without being told to crashed: the soak fails.
Workers load the soak's App, ``tests.soak.soak_app:app``.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.soak.plan import SoakConfig

REPO = Path(__file__).resolve().parents[2]
_CLK = os.sysconf("SC_CLK_TCK")
#: A SIGTERMed worker gets drain_timeout_s plus this to exit before it is SIGKILLed and counted: the
#: worker's own budget is drain_timeout_s + 10 s for handlers to stop + 5 s to flush acks.
DRAIN_GRACE_S = 20.0


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of a live process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLK


class Fleet:
    """The worker processes and the sweeper; kills and replaces workers on a seeded schedule."""

    def __init__(self, config: SoakConfig, env: dict[str, str], log_dir: Path) -> None:
        self.config = config
        self.env = env
        self.log_dir = log_dir
        self.rng = random.Random(config.seed * 7919 + 1)
        self.workers: list[subprocess.Popen[bytes]] = []
        self.draining: list[threading.Thread] = []
        self._lock = threading.Lock()
        self.sweeper: subprocess.Popen[bytes] | None = None
        self.started = 0
        self.sigkills = 0
        self.sigterms = 0
        self.term_exits: Counter[str] = Counter()
        self.drain_s: list[float] = []
        self.kill_log: list[dict[str, Any]] = []
        #: Processes that exited without a signal from the fleet (a worker must never crash).
        self.crashes: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = time.monotonic()

    def _spawn(self, *args: str) -> subprocess.Popen[bytes]:
        self.started += 1
        log = open(self.log_dir / f"{args[0]}-{self.started}.log", "wb")  # noqa: SIM115 (owned by the child)
        try:
            return subprocess.Popen(
                [sys.executable, "-m", "sqsjobs", *args, "--app", "tests.soak.soak_app:app"],
                env=self.env,
                cwd=REPO,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            log.close()

    def start(self) -> None:
        """Start the workers, the sweeper and the killer."""
        for _ in range(self.config.workers):
            self.workers.append(self._spawn("worker", "--concurrency", str(self.config.concurrency)))
        self.sweeper = self._spawn("sweep")
        self._thread = threading.Thread(target=self._kill_loop, name="soak-killer", daemon=True)
        self._thread.start()

    def _kill_loop(self) -> None:
        while not self._stop.wait(self.rng.uniform(self.config.kill_min_s, self.config.kill_max_s)):
            self._replace_crashed()
            victim = self.rng.randrange(len(self.workers))
            proc = self.workers[victim]
            graceful = self.rng.random() < self.config.sigterm_share
            if proc.poll() is None:
                if graceful:
                    proc.send_signal(signal.SIGTERM)
                    watcher = threading.Thread(
                        target=self._watch_exit, args=(proc, time.monotonic()), daemon=True
                    )
                    watcher.start()
                    self.draining.append(watcher)
                    self.sigterms += 1
                else:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    self.sigkills += 1
            self.kill_log.append(
                {
                    "t": round(time.monotonic() - self._t0, 2),
                    "pid": proc.pid,
                    "signal": "TERM" if graceful else "KILL",
                }
            )
            self.workers[victim] = self._spawn("worker", "--concurrency", str(self.config.concurrency))

    def _replace_crashed(self) -> None:
        """A worker that exited without being told to crashed: count it and start another."""
        for i, proc in enumerate(self.workers):
            if proc.poll() is not None:
                self.crashes.append(f"pid {proc.pid} exited {proc.returncode}")
                self.workers[i] = self._spawn("worker", "--concurrency", str(self.config.concurrency))

    def _watch_exit(self, proc: subprocess.Popen[bytes], since: float) -> None:
        """Wait for a SIGTERMed worker in a thread: its exact drain time, or SIGKILL past the budget."""
        try:
            rc = proc.wait(self.config.drain_timeout_s + DRAIN_GRACE_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            with self._lock:
                self.term_exits["killed_after_drain_budget"] += 1
            return
        with self._lock:
            self.term_exits[f"exit:{rc}"] += 1
            self.drain_s.append(round(time.monotonic() - since, 2))

    def stop(self) -> None:
        """Stop killing; SIGTERM everything still running and wait for it (SIGKILL after a grace)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
            self._replace_crashed()
            if self.sweeper is not None and self.sweeper.poll() is not None:
                self.crashes.append(f"sweeper exited {self.sweeper.returncode}")
        procs = [p for p in [*self.workers, self.sweeper] if p is not None and p.poll() is None]
        for p in procs:
            p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.config.drain_timeout_s + DRAIN_GRACE_S
        for p in procs:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        for watcher in self.draining:
            watcher.join()
