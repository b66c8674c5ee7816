"""The harness's end of ``bench.marker``: a UDP socket that collects "job SEQ started at T"."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from dataclasses import dataclass

RECV_BUFFER_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class Start:
    """One handler start as its job reported it."""

    #: The producer's wall clock just before the enqueue call (0 for bulk jobs).
    enqueued_at: float
    #: The handler's wall clock at its first line.
    started_at: float
    #: The harness's monotonic clock when the datagram arrived.
    received_mono: float


class Markers:
    """Collects handler starts by sequence number, on a thread, until closed."""

    def __init__(self) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        with contextlib.suppress(OSError):
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECV_BUFFER_BYTES)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.settimeout(0.2)
        self.starts: dict[int, Start] = {}
        #: Datagrams for a sequence number already seen: a job that ran twice.
        self.duplicates = 0
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="bench-markers", daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        """``127.0.0.1:PORT`` for ``BENCH_MARK_ADDR``."""
        host, port = self._sock.getsockname()
        return f"{host}:{port}"

    def _loop(self) -> None:
        while not self._closed:
            try:
                data = self._sock.recv(256)
            except TimeoutError:
                continue
            except OSError:
                return
            now = time.monotonic()
            seq, t0, started = data.decode().split()
            with self._cond:
                if int(seq) in self.starts:
                    self.duplicates += 1
                else:
                    self.starts[int(seq)] = Start(float(t0), float(started), now)
                self._cond.notify_all()

    def wait(self, seqs: range, timeout_s: float) -> bool:
        """Block until every ``seq`` has started; False on timeout."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                if all(s in self.starts for s in seqs):
                    return True
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.5))

    def seen(self, seqs: range) -> int:
        """How many of ``seqs`` have started."""
        with self._cond:
            return sum(1 for s in seqs if s in self.starts)

    def close(self) -> None:
        """Stop the thread and close the socket."""
        self._closed = True
        self._thread.join(1.0)
        self._sock.close()
