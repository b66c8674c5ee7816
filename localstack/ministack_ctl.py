"""Start and stop a MiniStack on the host: the local stack for machines without Docker.

``make localstack-up`` / ``make localstack-down`` call this (stdlib only)::

    python localstack/ministack_ctl.py up   [--port 4566] [--dir .localstack] [--bin PATH]
    python localstack/ministack_ctl.py down [--dir .localstack]
    python localstack/ministack_ctl.py status [--dir .localstack]

MiniStack (a LocalStack-compatible emulator, the test suite's backend: tests/emulators.py) listens on 127.0.0.1 only (its own default
is 0.0.0.0), on LocalStack's port convention 4566. It runs in its own process group, so ``down``
stops it together with the Lambda workers it forks; its pid, log and scratch files live in
``--dir``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

LOOPBACK = "127.0.0.1"
DEFAULT_PORT = 4566
HEALTH_TIMEOUT_S = 20.0
STOP_GRACE_S = 5.0
REPO_ROOT = Path(__file__).resolve().parent.parent


def _pid_file(state: Path) -> Path:
    return state / "ministack.pid"


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/_ministack/health", timeout=1) as answer:
            return bool(answer.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def _alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _running(state: Path) -> tuple[int, int] | None:
    """(pid, port) of the MiniStack this state dir started, if it still runs."""
    path = _pid_file(state)
    if not path.exists():
        return None
    pid, port = (int(x) for x in path.read_text().split())
    if _alive(pid):
        return pid, port
    path.unlink()
    return None


def up(port: int, state: Path, binary: str) -> str:
    """Start MiniStack (or report the one already running) and wait until it is healthy."""
    state.mkdir(parents=True, exist_ok=True)
    running = _running(state)
    if running is not None:
        url = f"http://{LOOPBACK}:{running[1]}"
        print(f"MiniStack already running (pid {running[0]}) on {url}")
        return url
    if not os.access(binary, os.X_OK):
        raise SystemExit(f"MiniStack not found at {binary}: run `make .venv-ministack/bin/ministack`")
    scratch = state / "tmp"
    scratch.mkdir(exist_ok=True)
    # A foreign AWS_ENDPOINT_URL would be inherited by the Lambda functions MiniStack runs.
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_ENDPOINT_URL")}
    env.update(BIND_HOST=LOOPBACK, GATEWAY_PORT=str(port), TMPDIR=str(scratch.resolve()))
    log = state / "ministack.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [binary],
            env=env,
            cwd=scratch,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: `down` stops its Lambda workers too
        )
    _pid_file(state).write_text(f"{proc.pid} {port}\n")
    url = f"http://{LOOPBACK}:{port}"
    deadline = time.monotonic() + HEALTH_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            _pid_file(state).unlink(missing_ok=True)
            tail = log.read_text(errors="replace").splitlines()[-20:]
            raise SystemExit(f"MiniStack exited with {proc.returncode}:\n" + "\n".join(tail))
        if _healthy(url):
            print(f"MiniStack {proc.pid} listening on {url} (log: {log})")
            return url
        time.sleep(0.05)
    down(state)
    raise SystemExit(f"MiniStack was not healthy on {url} after {HEALTH_TIMEOUT_S:.0f} s (log: {log})")


def down(state: Path) -> None:
    """SIGTERM the process group, SIGKILL it after 5 s; idempotent."""
    running = _running(state)
    if running is None:
        print("MiniStack is not running")
        return
    pgid = running[0]
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    while time.monotonic() < deadline and _alive(pgid):
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pgid, os.WNOHANG)
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
    _pid_file(state).unlink(missing_ok=True)
    print(f"MiniStack {pgid} stopped")


def main(argv: list[str] | None = None) -> None:
    """Command line entry point."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("command", choices=["up", "down", "status"])
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument(
        "--dir", type=Path, default=REPO_ROOT / ".localstack", help="pid, log and scratch files"
    )
    parser.add_argument("--bin", default=str(REPO_ROOT / ".venv-ministack" / "bin" / "ministack"))
    args = parser.parse_args(argv)
    if args.command == "up":
        up(args.port, args.dir, args.bin)
    elif args.command == "down":
        down(args.dir)
    else:
        running = _running(args.dir)
        print(f"running: pid {running[0]} on port {running[1]}" if running else "not running")
        sys.exit(0 if running else 1)


if __name__ == "__main__":
    main()
