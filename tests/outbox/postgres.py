"""A real PostgreSQL server for the outbox tests: Debian's binaries, a temporary data dir, a unix socket.

``make test`` installs Debian's ``postgresql`` when it is missing (mk/postgres.mk). Postgres refuses
to run as root, and CI runs as root: then the server runs as the ``postgres`` system user the Debian
package creates, with its data dir owned by that user. It listens on a unix socket in its own
directory only (no TCP port, so xdist workers never collide); clients connect as ``postgres`` with
trust authentication, which only processes on this machine can reach.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path


def binaries() -> Path | None:
    """The newest installed PostgreSQL's bin directory, or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"), key=lambda p: int(p.split("/")[4]))
    return Path(found[-1]).parent if found else None


class Postgres:
    """One server: ``start()`` returns the socket directory; ``dsn(db)`` names a database on it."""

    def __init__(self) -> None:
        self.bin = binaries()
        self.root = Path(tempfile.mkdtemp(prefix="sqsjobs-pg-", dir="/tmp"))
        self.data = self.root / "data"
        self.proc: subprocess.Popen[bytes] | None = None

    def _server_user(self) -> dict[str, object]:
        """Popen's arguments that drop root to ``postgres`` (nothing to drop otherwise)."""
        if os.geteuid() != 0:
            return {}
        return {"user": "postgres", "group": "postgres", "extra_groups": []}

    def start(self) -> str:
        assert self.bin is not None
        if os.geteuid() == 0:
            user = pwd.getpwnam("postgres")
            os.chown(self.root, user.pw_uid, user.pw_gid)
        subprocess.run(
            [
                str(self.bin / "initdb"),
                "-D",
                str(self.data),
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
            ],
            check=True,
            cwd=self.root,
            **self._server_user(),  # type: ignore[arg-type]
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        self.proc = subprocess.Popen(
            [
                str(self.bin / "postgres"),
                "-D",
                str(self.data),
                "-k",
                str(self.root),
                "-c",
                "listen_addresses=",
                "-c",
                "fsync=off",  # a test server: nothing here must survive a power cut
                "-c",
                "max_connections=200",
            ],
            cwd=self.root,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            **self._server_user(),  # type: ignore[arg-type]
        )
        deadline = time.monotonic() + 30
        while not (self.root / ".s.PGSQL.5432").exists():
            assert self.proc.poll() is None, "postgres exited at start"
            assert time.monotonic() < deadline, "postgres did not open its socket in 30 s"
            time.sleep(0.05)
        import psycopg

        while True:  # the socket appears a little before the server accepts sessions
            try:
                psycopg.connect(self.dsn("postgres")).close()
                break
            except psycopg.OperationalError:
                assert time.monotonic() < deadline, "postgres did not accept connections in 30 s"
                time.sleep(0.05)
        return str(self.root)

    def dsn(self, database: str) -> str:
        return f"host={self.root} port=5432 user=postgres dbname={database}"

    def create_database(self, name: str) -> str:
        import psycopg

        with psycopg.connect(self.dsn("postgres"), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.dsn(name)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # "fast" shutdown: SIGTERM's "smart" one waits for clients
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        shutil.rmtree(self.root, ignore_errors=True)
