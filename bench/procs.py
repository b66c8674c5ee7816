"""Worker processes: start in their own process group, read the group's CPU time, pause, stop.

CPU is read from ``/proc/<pid>/stat`` for every process whose process group is the worker's
(user + system time, plus that of reaped children), so a framework that forks (Dramatiq's
supervisor and worker process) is counted whole, and nothing else is: not the emulator, the proxy
or the producer.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
STOP_GRACE_S = 5.0


def group_cpu_s(pgid: int) -> float:
    """User + system CPU seconds of every live process in the group (and its reaped children)."""
    ticks = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            raw = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        fields = raw[raw.rfind(")") + 2 :].split()
        if int(fields[2]) != pgid:  # fields: state ppid pgrp session ... utime(11) stime cutime cstime
            continue
        ticks += int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])
    return ticks / CLOCK_TICKS


def machine_cpu_s() -> float:
    """Busy CPU seconds of the whole machine since boot, all CPUs summed (``/proc/stat``).

    Read before and after a measurement, minus the CPU of the processes measured, it is what
    everything else on the machine took meanwhile: the figure that says whether a run was quiet.
    """
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    return (user + nice + system + irq + softirq + steal) / CLOCK_TICKS


def group_pids(pgid: int) -> list[int]:
    """Live processes in the group."""
    pids = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                raw = Path(entry.path, "stat").read_text()
            except OSError:
                continue
            if int(raw[raw.rfind(")") + 2 :].split()[2]) == pgid:
                pids.append(int(entry.name))
    return pids


def start(argv: list[str], *, env: dict[str, str], cwd: Path, log: Path) -> subprocess.Popen[bytes]:
    """Start ``argv`` as the leader of a new process group, output to ``log``."""
    with open(log, "ab") as out:
        return subprocess.Popen(
            argv,
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    """Send ``sig`` to the whole group (SIGSTOP/SIGCONT pause and resume every thread and child)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)


def stop(*procs: subprocess.Popen[bytes], grace_s: float = STOP_GRACE_S) -> None:
    """SIGCONT + SIGTERM every group, SIGKILL what is left after ``grace_s``, reap the leaders.

    The groups are signalled together and share one grace period, so stopping a fleet of N
    workers takes as long as its slowest worker, not N times as long.
    """
    for proc in procs:
        signal_group(proc, signal.SIGCONT)
        signal_group(proc, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        for proc in procs:
            proc.poll()
        if not any(group_pids(proc.pid) for proc in procs):
            break
        time.sleep(0.05)
    for proc in procs:
        signal_group(proc, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace_s)
