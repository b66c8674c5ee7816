"""Launchers for the emulators the test suite runs against.

MiniStack is the suite's main backend (atomic per request, reached over real HTTP). It pins botocore exactly, so it
lives in its own virtualenv and runs as a separate process; this module starts a
private instance per caller on a free loopback port and takes it down again,
Lambda worker children included (they share its process group).

A missing MiniStack is an error with the fix in the message, never a skip: a suite
that silently skips its emulator tests proves nothing.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType

__all__ = ["MiniStack", "free_port", "ministack_python"]

REPO_ROOT = Path(__file__).resolve().parent.parent
LOOPBACK = "127.0.0.1"
HEALTH_TIMEOUT_S = 20.0
STOP_GRACE_S = 5.0


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago.

    The OS picks it (bind to port 0); there is a small window in which someone
    else can take it, which MiniStack.start() covers by retrying.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        port: int = sock.getsockname()[1]
        return port


def _default_binary() -> str:
    # Absolute: the server is started from a private temp directory.
    configured = os.environ.get("SQSJOBS_MINISTACK_BIN")
    return (
        os.path.abspath(configured)
        if configured
        else str(REPO_ROOT / ".venv-ministack" / "bin" / "ministack")
    )


class MiniStack:
    """A private MiniStack server on 127.0.0.1, in its own process group."""

    def __init__(self, binary: str | None = None) -> None:
        path = binary or _default_binary()
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            raise RuntimeError(
                f"MiniStack not found at {path!r}. Build it with `make .venv-ministack/bin/ministack` "
                "(or point SQSJOBS_MINISTACK_BIN at a ministack==1.5.33 executable)."
            )
        self.binary = path
        self.endpoint_url = ""
        self._proc: subprocess.Popen[bytes] | None = None
        self._tmpdir: str | None = None
        self._log_path: Path | None = None

    @property
    def pid(self) -> int:
        """The server's pid, which is also its process-group id."""
        if self._proc is None:
            raise RuntimeError("MiniStack is not started")
        return self._proc.pid

    def start(self) -> str:
        """Launch MiniStack and wait until it answers its health check.

        Returns:
            The endpoint URL, ``http://127.0.0.1:PORT``.
        """
        if self._proc is not None:
            raise RuntimeError("MiniStack is already started")
        self._tmpdir = tempfile.mkdtemp(prefix="sqsjobs-ministack-")
        last_error: RuntimeError | None = None
        for _ in range(3):  # a free port can be taken before MiniStack binds it
            try:
                return self._launch(free_port())
            except _PortTaken as exc:
                last_error = RuntimeError(str(exc))
        self.stop()
        assert last_error is not None
        raise last_error

    def _launch(self, port: int) -> str:
        assert self._tmpdir is not None
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_ENDPOINT_URL")}
        env.update(BIND_HOST=LOOPBACK, GATEWAY_PORT=str(port), TMPDIR=self._tmpdir)
        self._log_path = Path(self._tmpdir) / f"ministack-{port}.log"
        with open(self._log_path, "wb") as log:
            self._proc = subprocess.Popen(
                [self.binary],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=self._tmpdir,
            )
        url = f"http://{LOOPBACK}:{port}"
        deadline = time.monotonic() + HEALTH_TIMEOUT_S
        while time.monotonic() < deadline:
            rc = self._proc.poll()
            if rc is not None:
                tail = self.log_tail()
                self._kill_group()
                if "already in use" in tail:
                    raise _PortTaken(f"port {port} was taken:\n{tail}")
                self.stop()
                raise RuntimeError(f"MiniStack exited with {rc} before it was healthy:\n{tail}")
            if _healthy(url):
                self.endpoint_url = url
                return url
            time.sleep(0.05)
        tail = self.log_tail()
        self.stop()
        raise RuntimeError(f"MiniStack was not healthy on {url} after {HEALTH_TIMEOUT_S:.0f} s:\n{tail}")

    def log_tail(self, lines: int = 40) -> str:
        """The last lines of the server's log, for error messages."""
        if self._log_path is None or not self._log_path.exists():
            return "(no log)"
        text = self._log_path.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:]) or "(log is empty)"

    def reset(self) -> None:
        """Clear every service's state (``POST /_ministack/reset``)."""
        if not self.endpoint_url:
            raise RuntimeError("MiniStack is not started")
        request = urllib.request.Request(f"{self.endpoint_url}/_ministack/reset", data=b"", method="POST")
        with urllib.request.urlopen(request, timeout=30) as answer:
            if answer.status != 200:
                raise RuntimeError(f"MiniStack reset failed with HTTP {answer.status}")

    def stop(self) -> None:
        """SIGTERM the process group, SIGKILL it after 5 s, and remove the temp dir.

        Idempotent. The group, not just the server, because MiniStack runs Lambda
        functions as child processes.
        """
        self._kill_group()
        self._proc = None
        self.endpoint_url = ""
        if self._tmpdir is not None:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            self._tmpdir = None
            self._log_path = None

    def _kill_group(self) -> None:
        proc = self._proc
        if proc is None:
            return
        pgid = proc.pid  # start_new_session=True: the server leads its own group
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        while time.monotonic() < deadline and _group_alive(pgid):
            proc.poll()  # reap the leader so it stops counting as alive
            time.sleep(0.05)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=STOP_GRACE_S)

    def __enter__(self) -> MiniStack:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class _PortTaken(Exception):
    """MiniStack refused to start because its port was taken meanwhile."""


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/_ministack/health", timeout=1) as answer:
            return bool(answer.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def ministack_python() -> str:
    """``3.11``: the Python MiniStack runs Lambda functions on (its own virtualenv's, whatever the runtime says)."""
    python = Path(_default_binary()).parent / "python"
    out = subprocess.run(
        [str(python), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()
