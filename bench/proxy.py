"""A counting, latency-adding HTTP reverse proxy between AWS clients and an emulator, on 127.0.0.1.

The benchmark (issue 7) puts it between every framework and MiniStack, and the chaos soak extends
it with fault injection (``tests/soak/faults.py``, ``FaultProxy``):

```
 boto3 / aiobotocore ──HTTP/1.1──▶ AwsProxy (127.0.0.1:PORT, own thread + asyncio loop) ──▶ emulator
                                     │ counts every request by (service, action), and the write units
                                     │ adds latency; times every exchange while tracing
```

Why a proxy and not botocore event hooks: it must see every process the same way — worker
subprocesses, the sweeper and the producer, of sqsjobs and of its peers — which only a network hop
can do without touching the product; and the failures the soak injects happen *on the wire*.

Every AWS protocol botocore uses for DynamoDB and SQS is recognised: JSON 1.0 (``X-Amz-Target``,
SQS's query-compatible JSON included) and the query protocol (``Action=`` in the form body or the
URL). The proxy is transparent: it keeps the ``Host`` header so SigV4 signatures still match.

Long polls pass untouched: there is no proxy-side timeout on an upstream answer, so a
``ReceiveMessage`` with ``WaitTimeSeconds=20`` returns when the emulator answers.

Requests are parsed by hand on asyncio streams (no aiohttp) to keep per-request overhead at a
fraction of a millisecond; each client connection gets its own upstream keep-alive connection.

A subclass may interfere with an exchange at two points (``_before_forward``, ``_before_answer``):
answer it itself, hold it, or end the connection. The bench never does; this module imports
nothing from ``tests/``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Literal
from urllib.parse import parse_qs, urlsplit

from sqsjobs.observability.metrics import consumed_units

__all__ = ["WRITE_ACTIONS", "AwsProxy", "Exchange", "Message", "Pending", "Step"]

LOOPBACK = "127.0.0.1"
#: Largest request/response head accepted; AWS heads are a few hundred bytes.
MAX_HEAD_BYTES = 64 * 1024
#: Stream buffer limit; ReceiveMessage answers can reach 10 x 256 KiB.
STREAM_LIMIT = 4 * 1024 * 1024
_STOP_TIMEOUT_S = 5.0


#: DynamoDB's write actions: those whose ConsumedCapacity the proxy adds up.
WRITE_ACTIONS = frozenset(
    {
        "PutItem",
        "UpdateItem",
        "DeleteItem",
        "BatchWriteItem",
        "TransactWriteItems",
        "BatchExecuteStatement",
        "ExecuteStatement",
    }
)
#: In a write's request body, the key of a worker registry item (``sqsjobs.store.workers``): botocore
#: writes ``{"S": "worker#..."}``; job ids never contain ``#``.
_REGISTRY_KEY = b'"S": "worker#'


@dataclass(frozen=True)
class Exchange:
    """One forwarded request, timed on the wall clock (``AwsProxy.exchanges``, for ``bench/idle_trace.py``).

    The clock is ``time.time()``, the one the bench's producers and handlers stamp, so a trace can
    put the proxy's view of each request between the enqueue call and the handler's first line.
    """

    service: str
    action: str
    #: The whole request was read from the client (it left the client a few microseconds earlier).
    received: float
    #: Forwarded to the emulator (after the added latency).
    forwarded: float
    #: The emulator's whole answer was read.
    answered: float
    #: The answer was handed back to the client (recorded just before it is written, so a caller
    #: that stops the trace once it has the answer finds the exchange recorded).
    returned: float
    #: The answer carried at least one message (a ReceiveMessage that delivered something).
    delivered: bool


class _Closed(Exception):
    """The peer went away; end this connection quietly."""


class _NoAnswer(Exception):
    """The upstream connection ended before any answer began."""


@dataclass
class Message:
    """One HTTP/1.1 request or response, fully buffered (AWS bodies are small)."""

    start_line: str
    headers: list[tuple[str, str]]
    body: bytes

    def header(self, name: str) -> str | None:
        """The first header of that name, case-insensitively."""
        lname = name.lower()
        for key, value in self.headers:
            if key.lower() == lname:
                return value
        return None

    def encode(self) -> bytes:
        """The message as it goes on the wire."""
        lines = [self.start_line, *(f"{k}: {v}" for k, v in self.headers)]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + self.body


#: What a subclass decides at an interference point: go on, the answer was written already (next
#: request on this connection), or the connection ended.
Step = Literal["forward", "answered", "closed"]


@dataclass
class Pending:
    """One request on its way through the proxy, as a subclass that interferes sees it."""

    message: Message
    service: str
    action: str
    #: Set by a subclass that interferes with this exchange; such exchanges stay out of the trace.
    fault: str | None = None
    #: A subclass may hold the answer back until this ``time.monotonic()`` instant.
    hold_until: float = 0.0


async def _read_head(reader: asyncio.StreamReader) -> tuple[str, list[tuple[str, str]]]:
    try:
        raw = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError) as exc:
        raise _Closed from exc
    except asyncio.LimitOverrunError as exc:
        raise _Closed from exc
    if len(raw) > MAX_HEAD_BYTES:
        raise _Closed
    lines = raw[:-4].decode("latin-1").split("\r\n")
    headers: list[tuple[str, str]] = []
    for line in lines[1:]:
        key, _, value = line.partition(":")
        headers.append((key.strip(), value.strip()))
    return lines[0], headers


async def _read_body(
    reader: asyncio.StreamReader, headers: list[tuple[str, str]], *, until_eof: bool
) -> tuple[bytes, list[tuple[str, str]]]:
    """Read a body by Content-Length, chunked framing, or (responses only) until EOF.

    Returns the body and the headers rewritten to a plain Content-Length, since the body is
    relayed whole.
    """
    lower = {k.lower(): v for k, v in headers}
    try:
        if "chunked" in lower.get("transfer-encoding", "").lower():
            parts: list[bytes] = []
            while True:
                size_line = await reader.readuntil(b"\r\n")
                size = int(size_line.split(b";")[0].strip(), 16)
                if size == 0:
                    while (await reader.readuntil(b"\r\n")) != b"\r\n":  # trailers
                        pass
                    break
                parts.append(await reader.readexactly(size))
                await reader.readexactly(2)
            body = b"".join(parts)
        elif "content-length" in lower:
            body = await reader.readexactly(int(lower["content-length"]))
            return body, headers
        elif until_eof:
            body = await reader.read()
        else:
            return b"", headers
    except (asyncio.IncompleteReadError, ConnectionError, ValueError) as exc:
        raise _Closed from exc
    kept = [(k, v) for k, v in headers if k.lower() not in ("transfer-encoding", "content-length")]
    kept.append(("Content-Length", str(len(body))))
    return body, kept


def _classify(request: Message) -> tuple[str, str]:
    """(service, action) of an AWS request; ("", "") for anything else (health checks)."""
    target = request.header("X-Amz-Target")
    if target:
        prefix, _, action = target.partition(".")
        if prefix.startswith("DynamoDB"):
            return "dynamodb", action
        if prefix.startswith("AmazonSQS"):
            return "sqs", action
        return prefix.lower(), action
    service = ""
    auth = request.header("Authorization") or ""
    if "Credential=" in auth:  # .../<date>/<region>/<service>/aws4_request
        scope = auth.split("Credential=", 1)[1].split(",", 1)[0].split("/")
        if len(scope) >= 4:
            service = scope[3]
    target_path = request.start_line.split(" ")[1] if " " in request.start_line else ""
    query = parse_qs(urlsplit(target_path).query)
    action = (query.get("Action") or [""])[0]
    if not action and request.body and "x-www-form-urlencoded" in (request.header("Content-Type") or ""):
        form = parse_qs(request.body.decode("utf-8", "replace"))
        action = (form.get("Action") or [""])[0]
    return service, action


class AwsProxy:
    """A reverse proxy on 127.0.0.1 that counts AWS requests and adds latency.

    It runs its own asyncio loop in a daemon thread, so sync and async callers, and
    subprocesses pointed at its URL, all go through it.

    Attributes:
        counts: requests by ``(service, action)``, e.g. ``("dynamodb", "UpdateItem")``;
            requests a subclass answered itself included.
    """

    def __init__(self, upstream: str, *, latency_s: float = 0.0) -> None:
        """Configure (nothing listens until ``start``).

        Args:
            upstream: the emulator, ``http://127.0.0.1:PORT``.
            latency_s: added before forwarding each request.
        """
        parts = urlsplit(upstream)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"upstream must be an http:// URL, got {upstream!r}")
        if parts.hostname not in (LOOPBACK, "localhost"):
            raise ValueError(f"upstream must be on loopback, got {upstream!r}")
        self.upstream = upstream
        self._up_host = parts.hostname
        self._up_port = parts.port or 80
        self.latency_s = latency_s
        self.counts: Counter[tuple[str, str]] = Counter()
        #: DynamoDB write capacity the answers report (``table``, ``indexes``), for clients that ask
        #: ``ReturnConsumedCapacity=INDEXES`` (sqsjobs with ``SQSJOBS_MEASURE_CAPACITY=1``).
        self.write_units: Counter[str] = Counter()
        self._lock = threading.Lock()
        #: Every forwarded exchange, timed, while not None (``trace``); faulted ones are left out.
        self.exchanges: list[Exchange] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._conns: set[asyncio.Task[None]] = set()
        self.url = ""

    # ---- lifecycle -------------------------------------------------------------------------
    def start(self) -> str:
        """Start serving; returns ``http://127.0.0.1:PORT``."""
        if self._thread is not None:
            raise RuntimeError("proxy already started")
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                self._server = loop.run_until_complete(
                    asyncio.start_server(self._serve, LOOPBACK, 0, limit=STREAM_LIMIT, backlog=512)
                )
            except BaseException as exc:
                failure.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                loop.run_until_complete(self._shutdown())
                loop.close()

        self._thread = threading.Thread(target=run, name="aws-proxy", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            self._thread = None
            raise failure[0]
        assert self._server is not None
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://{LOOPBACK}:{port}"
        return self.url

    def stop(self) -> None:
        """Stop serving and close every connection. Idempotent."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(loop.stop)
        thread.join(_STOP_TIMEOUT_S)
        self._thread = None
        self._loop = None
        self.url = ""

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._conns):
            task.cancel()
        if self._conns:
            await asyncio.wait(self._conns, timeout=_STOP_TIMEOUT_S)

    def __enter__(self) -> AwsProxy:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- counters --------------------------------------------------------------------------
    def reset_counts(self) -> None:
        """Zero the request counters."""
        with self._lock:
            self.counts.clear()
            self.write_units.clear()

    def snapshot(self) -> dict[str, dict[str, int]]:
        """A consistent copy of the counters, JSON-ready (keys ``service:action``)."""
        with self._lock:
            return {
                "requests": {f"{s}:{a}": n for (s, a), n in sorted(self.counts.items())},
                "write_units": dict(sorted(self.write_units.items())),
            }

    def _add_write_units(self, response: bytes, *, registry: bool = False) -> None:
        """Add what a DynamoDB write's answer says it consumed (a list for batch calls).

        A write of a worker's registry item goes to ``registry``: a cost per worker and interval,
        not per job (docs/operations.md, "Workers"), so it stays out of the per-job figures.
        """
        body = response.partition(b"\r\n\r\n")[2]
        if b"ConsumedCapacity" not in body:
            return
        consumed = json.loads(body).get("ConsumedCapacity") or []
        with self._lock:
            for part, units in consumed_units(consumed):
                self.write_units["registry" if registry else "table" if part == "table" else "indexes"] += (
                    units
                )

    def trace(self, on: bool = True) -> list[Exchange]:
        """Start (or stop) timing every forwarded exchange; returns what was recorded so far."""
        with self._lock:
            recorded = self.exchanges or []
            self.exchanges = [] if on else None
            return recorded

    # ---- serving ---------------------------------------------------------------------------
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._conns.add(task)
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        try:
            while True:
                start, headers = await _read_head(reader)
                body, headers = await _read_body(reader, headers, until_eof=False)
                received = time.time()
                request = Message(start, headers, body)
                service, action = _classify(request)
                with self._lock:
                    self.counts[(service, action)] += 1
                pending = Pending(request, service, action)
                keep_alive = (request.header("Connection") or "").lower() != "close"
                step = await self._before_forward(pending, writer)
                if step == "answered":
                    continue
                if step == "closed":
                    return
                if self.latency_s > 0:
                    await asyncio.sleep(self.latency_s)
                forwarded = time.time()
                response, up_keep, upstream = await self._exchange(upstream, request)
                answered = time.time()
                if not up_keep:
                    upstream[1].close()
                    upstream = None
                if await self._before_answer(pending, writer) == "closed":
                    return
                if service == "dynamodb" and action in WRITE_ACTIONS:
                    self._add_write_units(response, registry=_REGISTRY_KEY in body)
                # Recorded before the caller can see the answer.
                if self.exchanges is not None and pending.fault is None:
                    delivered = b"ReceiptHandle" in response
                    self._record(
                        Exchange(service, action, received, forwarded, answered, time.time(), delivered)
                    )
                writer.write(response)
                await writer.drain()
                if not keep_alive:
                    break
        except (_Closed, ConnectionError, OSError):
            pass
        except asyncio.CancelledError:
            pass
        finally:
            self._conns.discard(task)
            if upstream is not None:
                upstream[1].close()
            with contextlib.suppress(Exception):
                writer.close()

    async def _before_forward(self, pending: Pending, writer: asyncio.StreamWriter) -> Step:
        """Called once the request is read and counted; a subclass may answer it or end the connection."""
        return "forward"

    async def _before_answer(self, pending: Pending, writer: asyncio.StreamWriter) -> Step:
        """Called once the emulator answered, before the answer is relayed; a subclass may hold or drop it."""
        return "forward"

    def _record(self, exchange: Exchange) -> None:
        with self._lock:
            if self.exchanges is not None:
                self.exchanges.append(exchange)

    async def _exchange(
        self, upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None, request: Message
    ) -> tuple[bytes, bool, tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
        """Forward on the kept upstream connection, or a new one.

        The emulator closes idle keep-alive connections (hypercorn: after 5 s); a request sent on
        one that closed meanwhile gets no answer at all, so it is sent once more on a fresh
        connection. That replay is safe: a server that closes an idle connection never read it.
        """
        if upstream is not None and not upstream[0].at_eof():
            try:
                response, keep = await self._forward(upstream, request)
                return response, keep, upstream
            except _NoAnswer:
                pass
        if upstream is not None:
            upstream[1].close()
        upstream = await asyncio.open_connection(self._up_host, self._up_port, limit=STREAM_LIMIT)
        try:
            response, keep = await self._forward(upstream, request)
        except BaseException as exc:
            # The caller only closes a connection it was handed back: this one, cancelled at the
            # proxy's stop (a long poll on a fresh connection) or cut mid-answer, is closed here.
            upstream[1].close()
            if isinstance(exc, _NoAnswer):
                raise _Closed from exc
            raise
        return response, keep, upstream

    async def _forward(
        self, upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter], request: Message
    ) -> tuple[bytes, bool]:
        """Send the request upstream and read its whole answer (no timeout: long polls wait)."""
        up_reader, up_writer = upstream
        try:
            up_writer.write(request.encode())
            await up_writer.drain()
            start, headers = await _read_head(up_reader)
        except (_Closed, ConnectionError, OSError) as exc:
            raise _NoAnswer from exc
        method = request.start_line.split(" ", 1)[0].upper()
        while True:
            status = int(start.split(" ")[1])
            if not 100 <= status < 200:
                break
            start, headers = await _read_head(up_reader)  # interim (100 Continue): keep reading
        no_body = method == "HEAD" or status in (204, 304)
        lower = {k.lower(): v for k, v in headers}
        keep = lower.get("connection", "").lower() != "close"
        if no_body:
            body = b""
        else:
            framed = "content-length" in lower or "chunked" in lower.get("transfer-encoding", "").lower()
            body, headers = await _read_body(up_reader, headers, until_eof=not framed)
            keep = keep and framed
        if not keep:  # only the upstream side closes; the caller's connection stays open
            headers = [(k, v) for k, v in headers if k.lower() != "connection"]
        return Message(start, headers, body).encode(), keep
