"""moto's server embedded in-process, with every request serialised.

``sqsjobs dev`` and :mod:`sqsjobs.testing` need a local AWS endpoint that needs
nothing beyond ``pip install``. moto 5.2.5's server is that, but it is not atomic
under concurrent requests: its werkzeug server runs each request in its own
thread, and the backends check-then-write without locks. Two conditional
``UpdateItem`` claims of one item can both succeed, a cancelled
``TransactWriteItems`` can wipe concurrent writes, and two concurrent SQS
receives can hand one message out twice (``docs/emulators.md``).
sqsjobs' whole correctness story rests on those operations being atomic, as they
are on AWS, so code run against the embedded server must never see such races.

:class:`EmbeddedMoto` therefore wraps moto's WSGI app in a middleware that runs
each request under one process-wide lock. The lock is process-wide, not
per-server, because moto keeps its backends in module globals: two servers in one
process share one state.

Long polling is the exception. A ``ReceiveMessage`` with ``WaitTimeSeconds=N``
would otherwise hold the lock for up to N seconds and stall every other client.
The middleware rewrites it to ``WaitTimeSeconds=0`` and repeats that short
receive under the lock, sleeping ~20 ms outside it between tries, until messages
arrive or N seconds have passed. Both SQS wire formats are handled: the AWS JSON
protocol that boto3 1.43 speaks (``X-Amz-Target: AmazonSQS.ReceiveMessage``) and
the older query protocol (``Action=ReceiveMessage`` in a form body or the query
string).

Limitation: a queue-level ``ReceiveMessageWaitTimeSeconds`` is not rewritten,
because the middleware cannot see it without reaching into moto. A receive that
omits ``WaitTimeSeconds`` on such a queue holds the lock for the whole wait.
Callers must pass ``WaitTimeSeconds`` explicitly (sqsjobs' transport always does).

PartiQL is refused. moto 5.2.5 runs a PartiQL UPDATE whose condition is false
as a silent no-op, with no per-statement ``ConditionalCheckFailed``, and an
``INSERT`` of an existing key overwrites it (``docs/emulators.md``). A
batched claim would then "succeed" twice. The middleware answers every
``ExecuteStatement``, ``BatchExecuteStatement`` and ``ExecuteTransaction`` with
``UnknownOperationException`` (what dynalite answers too): sqsjobs' batched
writes fall back to single conditional writes, which moto does check.

Other limitations: a request that makes moto call its own HTTP endpoint while it
is being handled would deadlock (nothing sqsjobs uses does this), and each request
body and response is buffered in memory, so that a slow client never holds the
lock while its bytes cross the socket.
"""

from __future__ import annotations

import io
import json
import threading
import time
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import parse_qsl, urlencode

from sqsjobs.errors import ConfigurationError

if TYPE_CHECKING:
    from collections.abc import Iterable
    from types import TracebackType
    from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

    from werkzeug.serving import BaseWSGIServer

__all__ = ["EmbeddedMoto"]

#: Serialises every request to every embedded server in this process: moto's
#: backends are module globals, so a per-server lock would not make them atomic.
_REQUEST_LOCK: Final = threading.Lock()

#: Pause between two zero-wait receives of a rewritten long poll. AWS wakes a
#: long poll within milliseconds of a send; 20 ms keeps wake-ups close to that
#: while costing an idle poller ~50 cheap requests a second.
_POLL_INTERVAL_S: Final = 0.02

#: Longest wait SQS accepts. Anything outside 1..20 goes to moto unchanged, so
#: that moto's own validation answers it as AWS would.
_MAX_WAIT_S: Final = 20

_JSON_TARGET: Final = "AmazonSQS.ReceiveMessage"
_FORM_TYPE: Final = "application/x-www-form-urlencoded"


class _Buffered:
    """A complete response captured under the lock, replayed after releasing it."""

    __slots__ = ("body", "exc_info", "headers", "status")

    def __init__(self) -> None:
        self.status = "500 INTERNAL SERVER ERROR"
        self.headers: list[tuple[str, str]] = []
        self.exc_info: Any = None
        self.body = b""

    @property
    def ok(self) -> bool:
        """Whether the status is 2xx: only an empty success is worth polling again."""
        return self.status.startswith("2")


def _read_body(environ: WSGIEnvironment) -> bytes:
    """Read the whole request body before taking the lock.

    Reading it inside the lock would let a slow or stalled client hold up every
    other request; it also lets a long poll be replayed with a fresh stream.
    """
    stream = environ.get("wsgi.input")
    if stream is None:
        return b""
    length = environ.get("CONTENT_LENGTH") or ""
    if length.isdigit():
        data: bytes = stream.read(int(length))
        return data
    if environ.get("wsgi.input_terminated"):
        data = stream.read()
        return data
    return b""


def _with_body(environ: WSGIEnvironment, body: bytes) -> WSGIEnvironment:
    """A shallow copy of ``environ`` whose input stream yields ``body``.

    A copy, so each replay of a long poll starts from the pristine request rather
    than from whatever Flask stashed in the previous attempt's environ.
    """
    env = dict(environ)
    env["wsgi.input"] = io.BytesIO(body)
    env["CONTENT_LENGTH"] = str(len(body))
    env.pop("wsgi.input_terminated", None)
    env.pop("HTTP_TRANSFER_ENCODING", None)
    return env


def _wait_seconds(value: object) -> int | None:
    """Parse a ``WaitTimeSeconds`` worth rewriting (1..20), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        wait = value
    elif isinstance(value, str) and value.strip().isdigit():
        wait = int(value)
    else:
        return None
    return wait if 1 <= wait <= _MAX_WAIT_S else None


class _LongPoll:
    """A long-poll receive split into its zero-wait form and how to read answers."""

    __slots__ = ("body", "environ", "is_json", "wait")

    def __init__(self, environ: WSGIEnvironment, body: bytes, wait: int, *, is_json: bool) -> None:
        self.environ = environ
        self.body = body
        self.wait = wait
        self.is_json = is_json

    def zero_wait_request(self) -> WSGIEnvironment:
        """A fresh copy of the rewritten request, for one more try."""
        return _with_body(self.environ, self.body)

    def has_messages(self, response: _Buffered) -> bool:
        """Whether the answer carries at least one message (either wire format)."""
        if self.is_json:
            try:
                decoded = json.loads(response.body or b"{}")
            except ValueError:
                return True  # not ours to interpret: hand it back as it is
            return isinstance(decoded, dict) and bool(decoded.get("Messages"))
        return b"<Message>" in response.body


def _rewrite_query(query: str) -> tuple[str, int] | None:
    """Rewrite a query-protocol ``ReceiveMessage`` to wait 0, returning the wait."""
    pairs = parse_qsl(query, keep_blank_values=True)
    if ("Action", "ReceiveMessage") not in pairs:
        return None
    waits = [_wait_seconds(v) for k, v in pairs if k == "WaitTimeSeconds"]
    if len(waits) != 1 or waits[0] is None:
        return None
    rewritten = [(k, "0" if k == "WaitTimeSeconds" else v) for k, v in pairs]
    return urlencode(rewritten), waits[0]


def _as_long_poll(environ: WSGIEnvironment, body: bytes) -> _LongPoll | None:
    """Recognise an SQS long poll and build its zero-wait replacement.

    Returns None for every other request, including receives that wait 0 or
    carry an out-of-range wait (moto answers those itself).
    """
    if environ.get("REQUEST_METHOD") not in ("POST", "GET"):
        return None
    if environ.get("HTTP_X_AMZ_TARGET") == _JSON_TARGET:
        try:
            params = json.loads(body)
        except ValueError:
            return None
        if not isinstance(params, dict):
            return None
        wait = _wait_seconds(params.get("WaitTimeSeconds"))
        if wait is None:
            return None
        params["WaitTimeSeconds"] = 0
        return _LongPoll(environ, json.dumps(params).encode(), wait, is_json=True)
    if str(environ.get("CONTENT_TYPE", "")).startswith(_FORM_TYPE):
        found = _rewrite_query(body.decode("utf-8", errors="replace"))
        if found is not None:
            return _LongPoll(environ, found[0].encode(), found[1], is_json=False)
    found = _rewrite_query(str(environ.get("QUERY_STRING", "")))
    if found is not None:
        return _LongPoll(dict(environ) | {"QUERY_STRING": found[0]}, body, found[1], is_json=False)
    return None


#: DynamoDB's PartiQL operations, whose conditions moto ignores (see the module docstring).
_PARTIQL_TARGETS: Final = frozenset(
    f"DynamoDB_20120810.{op}" for op in ("ExecuteStatement", "BatchExecuteStatement", "ExecuteTransaction")
)
_PARTIQL_REFUSAL: Final = json.dumps(
    {
        "__type": "com.amazonaws.dynamodb.v20120810#UnknownOperationException",
        "message": "the embedded emulator refuses PartiQL: moto does not check its conditions",
    }
).encode()


class _SerialisingMiddleware:
    """WSGI middleware that makes each request to moto atomic, as on AWS."""

    def __init__(self, app: WSGIApplication, stopping: threading.Event) -> None:
        self._app = app
        self._stopping = stopping

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        body = _read_body(environ)
        if environ.get("HTTP_X_AMZ_TARGET") in _PARTIQL_TARGETS:
            start_response("400 Bad Request", [("Content-Type", "application/x-amz-json-1.0")])
            return [_PARTIQL_REFUSAL]
        poll = _as_long_poll(environ, body)
        response = self._call_locked(_with_body(environ, body)) if poll is None else self._long_poll(poll)
        start_response(response.status, response.headers, response.exc_info)
        return [response.body]

    def _long_poll(self, poll: _LongPoll) -> _Buffered:
        """Repeat the zero-wait receive until messages arrive or the wait is over.

        The lock is taken only for each short receive, so other clients' requests
        go through while this one waits. Stopping the server ends the wait early.
        """
        deadline = time.monotonic() + poll.wait
        while True:
            response = self._call_locked(poll.zero_wait_request())
            remaining = deadline - time.monotonic()
            if not response.ok or poll.has_messages(response) or remaining <= 0:
                return response
            if self._stopping.wait(min(_POLL_INTERVAL_S, remaining)):
                return response

    def _call_locked(self, environ: WSGIEnvironment) -> _Buffered:
        """Run moto on one request under the lock and buffer its whole answer.

        The body is drained inside the lock too: a WSGI app may do its work while
        its iterable is consumed, so only the finished bytes are safe to send
        after the lock is released.
        """
        captured = _Buffered()
        chunks: list[bytes] = []

        def capture(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            captured.status, captured.headers, captured.exc_info = status, headers, exc_info
            return chunks.append

        with _REQUEST_LOCK:
            result = self._app(environ, capture)
            try:
                chunks.extend(result)
            finally:
                close = getattr(result, "close", None)
                if close is not None:
                    close()
        captured.body = b"".join(chunks)
        return captured


class EmbeddedMoto:
    """moto's server on 127.0.0.1 (free port by default), requests serialised.

    It is built from moto's own parts (``DomainDispatcherApplication``,
    ``create_backend_app``, werkzeug's threaded ``make_server``) exactly as
    ``moto.server.ThreadedMotoServer`` does, with the serialising middleware
    around the app. It binds only to loopback: it is a local emulator with no
    authentication, never a service for other machines.

    Example:
        >>> with EmbeddedMoto() as moto:  # doctest: +SKIP
        ...     boto3.client("sqs", endpoint_url=moto.endpoint_url)
    """

    _HOST: Final = "127.0.0.1"

    def __init__(self, port: int = 0) -> None:
        """Prepare a server; ``port=0`` lets the OS choose a free port at start()."""
        self._port = port
        self._server: BaseWSGIServer | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()

    def start(self) -> str:
        """Bind, start serving in a daemon thread and return the endpoint URL.

        The socket is bound here, on the caller's thread, so a port clash raises
        from start() instead of dying silently in the server thread.

        Returns:
            The endpoint, ``http://127.0.0.1:PORT``.

        Raises:
            RuntimeError: If already started.
            ConfigurationError: If moto's server is missing or too old for it
                (``pip install 'sqsjobs[local]'``).
        """
        if self._server is not None:
            raise RuntimeError("EmbeddedMoto is already started")
        try:
            # Imported lazily: worker images install sqsjobs without moto, and
            # importing this module must not need it.
            from moto.moto_server.werkzeug_app import (
                DomainDispatcherApplication,
                MotoRequestHandler,
                create_backend_app,
            )
            from werkzeug.serving import make_server
        except ImportError as exc:
            # The cause is named too: an installed but older moto fails here as well.
            raise ConfigurationError(
                f"the embedded emulator needs moto[server] 5.2.5 or later ({exc}): "
                "pip install 'sqsjobs[local]'"
            ) from exc

        class _QuietHandler(MotoRequestHandler):
            """moto's request handler without werkzeug's per-request access log line."""

            def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
                return None

        self._stopping.clear()
        app = _SerialisingMiddleware(DomainDispatcherApplication(create_backend_app), self._stopping)
        server = make_server(self._HOST, self._port, app, threaded=True, request_handler=_QuietHandler)
        thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"sqsjobs-moto-{server.port}",
            daemon=True,
        )
        thread.start()
        self._server, self._thread = server, thread
        return self.endpoint_url

    @property
    def endpoint_url(self) -> str:
        """The endpoint to hand to boto3 as ``endpoint_url``.

        Raises:
            RuntimeError: If the server is not running.
        """
        if self._server is None:
            raise RuntimeError("EmbeddedMoto is not started")
        return f"http://{self._HOST}:{self._server.port}"

    def reset(self) -> None:
        """Forget every resource (``POST /moto-api/reset``), for test isolation.

        This resets moto's process-wide state, so it also clears what any other
        embedded server or ``mock_aws`` in this process created.

        Raises:
            RuntimeError: If the server is not running or the reset fails.
        """
        import urllib.request

        request = urllib.request.Request(f"{self.endpoint_url}/moto-api/reset", data=b"", method="POST")
        with urllib.request.urlopen(request, timeout=30) as answer:
            if answer.status != 200:
                raise RuntimeError(f"moto reset failed with HTTP {answer.status}")

    def stop(self) -> None:
        """Stop serving, release the port and end any long polls in progress.

        Idempotent. moto's state survives a stop (it is process-global); call
        reset() first for a clean slate.
        """
        server, thread = self._server, self._thread
        if server is None:
            return
        self._stopping.set()
        server.shutdown()
        server.server_close()
        if thread is not None:
            thread.join(timeout=5)
        self._server = self._thread = None

    def __enter__(self) -> EmbeddedMoto:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
