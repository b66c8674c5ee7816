"""The handlers' one side effect: a UDP datagram saying "job SEQ started at T" to the harness.

Every framework's no-op handler calls :func:`mark` first, so the harness learns when each job
started (enqueue→start latency) and when a backlog is drained, without reading any framework's
state. One ``sendto`` on loopback costs a few microseconds, the same for every framework.
Standard library only: this module is imported by the sqsjobs app and by the peers' apps, which
live in another virtualenv.
"""

from __future__ import annotations

import os
import socket
import time
from typing import Any

#: ``host:port`` of the harness's marker socket.
ADDR_ENV = "BENCH_MARK_ADDR"

_sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
_addr: tuple[str, int] | None = None


def _target() -> tuple[str, int]:
    global _addr
    if _addr is None:
        host, _, port = os.environ.get(ADDR_ENV, "127.0.0.1:9").rpartition(":")
        _addr = (host or "127.0.0.1", int(port))
    return _addr


def mark(payload: dict[str, Any]) -> None:
    """Tell the harness that the job ``payload["seq"]`` (enqueued at ``payload["t0"]``) started now."""
    now = time.time()
    _sock.sendto(f"{payload['seq']} {payload['t0']} {now}".encode(), _target())


def make_payload(seq: int, t0: float, blob_bytes: int = 1024) -> dict[str, Any]:
    """The job payload: a sequence number, the producer's clock at enqueue, and ~1 KB of filler."""
    return {"seq": seq, "t0": t0, "blob": "x" * blob_bytes}
