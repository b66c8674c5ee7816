"""The request size limit: a body over ``max_body_bytes`` is refused with 413 before anything parses it.

An ASGI middleware, outermost but for Starlette's own: a declared ``Content-Length`` over the limit
is refused before reading it; otherwise the body is read up to the limit (chunked uploads declare no
length) and refused once it passes it, or handed on whole. A refused upload is read to its end and
dropped first (``DRAIN_BYTES`` at most: a client that sends everything before it reads then gets
the 413, not a reset connection), and the connection is closed after the answer. Reading the body
first costs nothing here: every route with a body parses all of it anyway.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from sqsjobs.api.problems import MEDIA_TYPE, PROBLEMS

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, MutableMapping

    Scope = MutableMapping[str, Any]
    Message = MutableMapping[str, Any]
    Receive = Callable[[], Awaitable[Message]]
    Send = Callable[[Message], Awaitable[None]]
    ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: What ``sqsjobs api`` accepts unless told otherwise: 1 MiB, the largest message SQS takes. A
#: larger payload goes to S3 when enqueued from Python (``max_payload_bytes``); over HTTP raise the
#: limit for it (``--max-body-bytes``). API Gateway refuses more than 10 MB before the function runs.
DEFAULT_MAX_BODY_BYTES = 1024 * 1024
#: Before a refusal, read and drop up to this much of the rest of the upload, so that a client that
#: sends it all before reading gets the 413 rather than a reset connection; past it, just close.
DRAIN_BYTES = 16 * 1024 * 1024


class BodyLimit:
    """Refuse bodies over ``max_bytes`` with a ``body-too-large`` problem; pass the rest on whole."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        if max_bytes < 1:
            raise ValueError(f"max_body_bytes must be at least 1, got {max_bytes}")
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The ASGI entry: refuse, or pass the request on with its body read."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            if declared <= DRAIN_BYTES:
                await _drain(receive, DRAIN_BYTES)
            await self._refuse(scope, send, f"the body declares {declared} bytes")
            return
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                await self.app(scope, _replay([], message, receive), send)
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                if message.get("more_body", False):
                    await _drain(receive, DRAIN_BYTES)
                await self._refuse(scope, send, f"the body is over {self.max_bytes} bytes")
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        await self.app(scope, _replay(chunks, None, receive), send)

    async def _refuse(self, scope: Scope, send: Send, what: str) -> None:
        kind = PROBLEMS["body-too-large"]
        body = json.dumps(
            {
                "type": kind.type,
                "title": kind.title,
                "status": kind.status,
                "detail": f"{what}; this API accepts at most {self.max_bytes} bytes (max_body_bytes)",
                "instance": scope.get("path", ""),
                "field": "body",
            }
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": kind.status,
                "headers": [
                    (b"content-type", MEDIA_TYPE.encode()),
                    (b"content-length", str(len(body)).encode()),
                    # The rest of the upload is not read: the client must not reuse the connection.
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


async def _drain(receive: Receive, limit: int) -> None:
    """Read and drop what is left of the body, ``limit`` bytes at most."""
    read = 0
    while read <= limit:
        message = await receive()
        if message["type"] != "http.request":
            return
        read += len(message.get("body", b""))
        if not message.get("more_body", False):
            return


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None  # the server refuses such a request itself
    return None


def _replay(chunks: list[bytes], last: Message | None, server: Receive) -> Receive:
    """A ``receive`` that gives the body read so far as one message, then the server's own messages."""
    pending: list[Message] = [{"type": "http.request", "body": b"".join(chunks), "more_body": False}]
    if last is not None:
        pending = [last]

    async def receive() -> Message:
        if pending:
            return pending.pop(0)
        return await server()

    return receive
