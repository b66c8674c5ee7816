"""A fault-injecting HTTP reverse proxy between AWS clients and an emulator, on 127.0.0.1.

The soak (issue 8) and the benchmark (issue 7) put it between sqsjobs and MiniStack:

```
 boto3 / aiobotocore ──HTTP/1.1──▶ AwsProxy (127.0.0.1:PORT, own thread + asyncio loop) ──▶ emulator
                                     │ counts every request by (service, action)
                                     │ adds latency; injects faults with seeded per-request probabilities
```

Why a proxy and not botocore event hooks: the failures that matter most happen *on the wire*
(the write reached the server, the answer never reached the caller), and they must hit every
process the same way — worker subprocesses, the sweeper and the producer — which only a network
hop can do without touching the product.

Fault kinds (at most one per request, drawn from one uniform number):

```
 throttle      answer 400 with the protocol's throttling error; nothing is forwarded
 http_5xx      answer 500 or 503; nothing is forwarded
 slow          forward after a random part of slow_s, answer after slow_s in all: the caller's read
               timeout fires first, and the write may land *after* the caller's retry (a late write)
 reset_before  reset the connection (RST) before forwarding: nothing happened
 reset_after   forward, read the whole answer, then reset the connection: the write happened
               but the caller never heard — the hardest case
```

Every AWS protocol botocore uses for DynamoDB and SQS is recognised: JSON 1.0 (``X-Amz-Target``,
SQS's query-compatible JSON included) and the query protocol (``Action=`` in the form body or the
URL). The proxy is transparent: it keeps the ``Host`` header so SigV4 signatures still match.

Long polls pass untouched: there is no proxy-side timeout on an upstream answer, so a
``ReceiveMessage`` with ``WaitTimeSeconds=20`` returns when the emulator answers.

Requests are parsed by hand on asyncio streams (no aiohttp) to keep per-request overhead at a
fraction of a millisecond; each client connection gets its own upstream keep-alive connection.

The seed makes the *sequence* of fault draws repeatable; which request receives which draw
still depends on the order in which concurrent requests arrive.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import socket
import struct
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, urlsplit

from sqsjobs._aws import consumed_units

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["FAULT_KINDS", "AwsProxy", "Exchange", "FaultPlan"]

LOOPBACK = "127.0.0.1"
#: Largest request/response head accepted; AWS heads are a few hundred bytes.
MAX_HEAD_BYTES = 64 * 1024
#: Stream buffer limit; ReceiveMessage answers can reach 10 x 256 KiB.
STREAM_LIMIT = 4 * 1024 * 1024
FAULT_KINDS = ("throttle", "http_5xx", "slow", "reset_before", "reset_after")
_STOP_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class FaultPlan:
    """Per-request fault probabilities (each in 0..1, their sum at most 1).

    Attributes:
        throttle: answer with the protocol's throttling error (DynamoDB
            ``ProvisionedThroughputExceededException``/``ThrottlingException``, SQS
            ``ThrottlingException``/``RequestThrottled``), HTTP 400.
        http_5xx: answer HTTP 500 or 503 with the protocol's error body.
        slow: hold the exchange for ``slow_s`` so the caller's read timeout fires (botocore's
            read timeout in sqsjobs is 30 s, hence the 35 s default).
        reset_before: reset the connection before forwarding.
        reset_after: forward, then reset the connection without answering.
        slow_s: how long a slow exchange takes.
        only_actions: when set, faults hit only these actions (``"UpdateItem"`` or
            ``"dynamodb:UpdateItem"``); other requests are forwarded untouched.
        max_faults: stop injecting after this many faults (None: no limit); with probability 1
            this faults exactly the first N matching requests, e.g. one lost answer and then a
            clean retry.
    """

    throttle: float = 0.0
    http_5xx: float = 0.0
    slow: float = 0.0
    reset_before: float = 0.0
    reset_after: float = 0.0
    slow_s: float = 35.0
    only_actions: frozenset[str] | None = None
    max_faults: int | None = None

    def __post_init__(self) -> None:
        probs = [getattr(self, kind) for kind in FAULT_KINDS]
        if any(p < 0 or p > 1 for p in probs) or sum(probs) > 1 + 1e-9:
            raise ValueError(f"fault probabilities must be in 0..1 and sum to at most 1, got {probs}")

    @classmethod
    def uniform(cls, total: float, **overrides: object) -> FaultPlan:
        """A plan that spreads ``total`` evenly over the five kinds."""
        share = total / len(FAULT_KINDS)
        values: dict[str, object] = dict.fromkeys(FAULT_KINDS, share)
        values.update(overrides)
        return cls(**values)  # type: ignore[arg-type]

    @property
    def total(self) -> float:
        """Probability that a request gets some fault."""
        return float(sum(getattr(self, kind) for kind in FAULT_KINDS))

    def applies_to(self, service: str, action: str) -> bool:
        """Whether faults may hit this action at all."""
        if self.only_actions is None:
            return True
        return action in self.only_actions or f"{service}:{action}" in self.only_actions


_WRITE_ACTIONS = frozenset(
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
class _Message:
    """One HTTP/1.1 request or response, fully buffered (AWS bodies are small)."""

    start_line: str
    headers: list[tuple[str, str]]
    body: bytes

    def header(self, name: str) -> str | None:
        lname = name.lower()
        for key, value in self.headers:
            if key.lower() == lname:
                return value
        return None

    def encode(self) -> bytes:
        lines = [self.start_line, *(f"{k}: {v}" for k, v in self.headers)]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + self.body


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


def _classify(request: _Message) -> tuple[str, str]:
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


def _is_query_protocol(request: _Message) -> bool:
    return request.header("X-Amz-Target") is None


def _error_response(request: _Message, service: str, status: int, code: str, message: str) -> bytes:
    """An error answer in the shape botocore parses for the request's protocol."""
    headers: list[tuple[str, str]]
    if _is_query_protocol(request):
        body = (
            '<?xml version="1.0"?><ErrorResponse><Error><Type>'
            + ("Sender" if status < 500 else "Receiver")
            + f"</Type><Code>{code}</Code><Message>{message}</Message></Error>"
            + "<RequestId>00000000-0000-0000-0000-000000000000</RequestId></ErrorResponse>"
        ).encode()
        headers = [("Content-Type", "text/xml")]
    else:
        namespace = {
            "dynamodb": "com.amazonaws.dynamodb.v20120810",
            "sqs": "com.amazonaws.sqs",
        }.get(service, "com.amazon.coral.service")
        if code == "ThrottlingException" and service == "dynamodb":
            namespace = "com.amazon.coral.availability"
        body = json.dumps({"__type": f"{namespace}#{code}", "message": message}).encode()
        headers = [("Content-Type", "application/x-amz-json-1.0"), ("x-amzn-ErrorType", code)]
        if service == "sqs":
            # SQS's JSON protocol is query-compatible: botocore takes the code from this header.
            fault = "Sender" if status < 500 else "Receiver"
            headers.append(("x-amzn-query-error", f"{code};{fault}"))
    reason = {400: "Bad Request", 500: "Internal Server Error", 503: "Service Unavailable"}[status]
    head = [f"HTTP/1.1 {status} {reason}", *(f"{k}: {v}" for k, v in headers)]
    head += ["x-amzn-RequestId: 00000000-0000-0000-0000-000000000000", f"Content-Length: {len(body)}"]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body


_THROTTLE_CODES = {
    "dynamodb": ("ProvisionedThroughputExceededException", "ThrottlingException"),
    "sqs": ("ThrottlingException", "RequestThrottled"),
}
_5XX = ((500, "InternalFailure"), (503, "ServiceUnavailable"))


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with RST (SO_LINGER 0), as a crashed load balancer or server does."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class AwsProxy:
    """A reverse proxy on 127.0.0.1 that counts AWS requests and injects faults.

    It runs its own asyncio loop in a daemon thread, so sync and async callers, and
    subprocesses pointed at its URL, all go through it.

    Attributes:
        counts: requests by ``(service, action)``, e.g. ``("dynamodb", "UpdateItem")``;
            faulted requests included.
        faults_injected: faults by kind (``FAULT_KINDS``).
        faults_by_action: faults by ``(kind, service, action)``.
    """

    def __init__(
        self,
        upstream: str,
        *,
        latency_s: float = 0.0,
        faults: FaultPlan | None = None,
        seed: int = 0,
        on_fault: Callable[[str, str, str, bytes], None] | None = None,
    ) -> None:
        """Configure (nothing listens until ``start``).

        Args:
            upstream: the emulator, ``http://127.0.0.1:PORT``.
            latency_s: added before forwarding each request.
            faults: what to inject; None injects nothing.
            seed: seeds the fault draws.
            on_fault: called in the proxy's thread with (kind, service, action, request body) for
                every fault, so a caller can tell which operation it hit (keep it quick).
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
        self.faults = faults or FaultPlan()
        self.seed = seed
        self.on_fault = on_fault
        self._rng = random.Random(seed)
        self.counts: Counter[tuple[str, str]] = Counter()
        #: DynamoDB write capacity the answers report (``table``, ``indexes``), for clients that ask
        #: ``ReturnConsumedCapacity=INDEXES`` (sqsjobs with ``SQSJOBS_MEASURE_CAPACITY=1``).
        self.write_units: Counter[str] = Counter()
        self.faults_injected: Counter[str] = Counter()
        self.faults_by_action: Counter[tuple[str, str, str]] = Counter()
        self._lock = threading.Lock()
        self._injected = 0  # never reset: max_faults counts over the proxy's life
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
        """Zero the request and fault counters (the fault draws continue their sequence)."""
        with self._lock:
            self.counts.clear()
            self.write_units.clear()
            self.faults_injected.clear()
            self.faults_by_action.clear()

    def snapshot(self) -> dict[str, dict[str, int]]:
        """A consistent copy of the counters, JSON-ready (keys ``service:action``)."""
        with self._lock:
            return {
                "requests": {f"{s}:{a}": n for (s, a), n in sorted(self.counts.items())},
                "write_units": dict(sorted(self.write_units.items())),
                "faults": dict(sorted(self.faults_injected.items())),
                "faults_by_action": {
                    f"{k}:{s}:{a}": n for (k, s, a), n in sorted(self.faults_by_action.items())
                },
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

    def _draw(self, service: str, action: str) -> str | None:
        with self._lock:
            self.counts[(service, action)] += 1
            plan = self.faults
            if not action or plan.total <= 0 or not plan.applies_to(service, action):
                return None
            if plan.max_faults is not None and self._injected >= plan.max_faults:
                return None
            u = self._rng.random()
            for kind in FAULT_KINDS:
                p = float(getattr(plan, kind))
                if u < p:
                    self._injected += 1
                    self.faults_injected[kind] += 1
                    self.faults_by_action[(kind, service, action)] += 1
                    return kind
                u -= p
            return None

    def _pick(self, options: int) -> int:
        with self._lock:
            return self._rng.randrange(options)

    def _fraction(self) -> float:
        with self._lock:
            return self._rng.random()

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
                request = _Message(start, headers, body)
                service, action = _classify(request)
                fault = self._draw(service, action)
                if fault is not None and self.on_fault is not None:
                    self.on_fault(fault, service, action, body)
                keep_alive = (request.header("Connection") or "").lower() != "close"
                if fault == "throttle":
                    codes = _THROTTLE_CODES.get(service, ("ThrottlingException",))
                    code = codes[self._pick(len(codes))]
                    writer.write(_error_response(request, service, 400, code, "Rate exceeded (injected)"))
                    await writer.drain()
                    continue
                if fault == "http_5xx":
                    status, code = _5XX[self._pick(len(_5XX))]
                    writer.write(_error_response(request, service, status, code, "injected"))
                    await writer.drain()
                    continue
                if fault == "reset_before":
                    _reset(writer)
                    return
                slow_until = 0.0
                if fault == "slow":
                    slow_until = time.monotonic() + self.faults.slow_s
                    await asyncio.sleep(self.faults.slow_s * self._fraction())
                if self.latency_s > 0:
                    await asyncio.sleep(self.latency_s)
                forwarded = time.time()
                response, up_keep, upstream = await self._exchange(upstream, request)
                answered = time.time()
                if not up_keep:
                    upstream[1].close()
                    upstream = None
                if fault == "reset_after":
                    _reset(writer)
                    return
                if slow_until:
                    await asyncio.sleep(max(0.0, slow_until - time.monotonic()))
                if service == "dynamodb" and action in _WRITE_ACTIONS:
                    self._add_write_units(response, registry=_REGISTRY_KEY in body)
                if self.exchanges is not None and fault is None:  # before the caller can see the answer
                    self._record(
                        Exchange(
                            service,
                            action,
                            received,
                            forwarded,
                            answered,
                            time.time(),
                            delivered=b"ReceiptHandle" in response,
                        ),
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

    def _record(self, exchange: Exchange) -> None:
        with self._lock:
            if self.exchanges is not None:
                self.exchanges.append(exchange)

    async def _exchange(
        self, upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None, request: _Message
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
        self, upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter], request: _Message
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
        return _Message(start, headers, body).encode(), keep
