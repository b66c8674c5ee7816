"""A webhook receiver for the notify tests: a real HTTP server on 127.0.0.1 that records every request.

Its answers are scripted per ``webhook-id`` (e.g. 500, 500, then 200 for every delivery), so a test
sees retries exactly as a flaky receiver causes them.
"""

from __future__ import annotations

import json
import threading
from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Received:
    """What the receiver was sent, in order."""

    requests: list[tuple[dict[str, str], str, int]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def by_id(self) -> dict[str, list[tuple[dict[str, str], str, int]]]:
        """Each webhook-id's requests: headers, body, and the status it was answered."""
        grouped: dict[str, list[tuple[dict[str, str], str, int]]] = defaultdict(list)
        with self.lock:
            for headers, body, status in self.requests:
                grouped[headers.get("webhook-id", "")].append((headers, body, status))
        return dict(grouped)

    def accepted(self) -> dict[str, dict[str, Any]]:
        """The events a receiver that deduplicates by webhook-id keeps: the first accepted of each id."""
        kept: dict[str, dict[str, Any]] = {}
        for webhook_id, requests in self.by_id().items():
            for _, body, status in requests:
                if 200 <= status < 300 and webhook_id not in kept:
                    kept[webhook_id] = json.loads(body)
        return kept


@contextmanager
def receiving(answers: Sequence[int] = (200,)) -> Iterator[tuple[str, Received]]:
    """Serve until the block ends; yields its URL and what it received. The n-th request of one
    webhook-id is answered ``answers[n]`` (the last one from then on)."""
    received = Received()
    seen: dict[str, int] = defaultdict(int)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", "0"))).decode()
            headers = {k.lower(): v for k, v in self.headers.items()}
            with received.lock:
                n = seen[headers.get("webhook-id", "")]
                seen[headers.get("webhook-id", "")] += 1
                status = answers[min(n, len(answers) - 1)]
                received.requests.append((headers, body, status))
            self.send_response(status)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hooks/jobs", received
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
