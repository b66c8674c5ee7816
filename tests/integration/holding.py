"""A proxy that holds one chosen request until the test lets it through: an interleaving, forced.

A race between a worker's write and another client's (an operator's retry, a token's answer) is
one round trip wide. Holding the worker's request on the wire, between two real processes, makes
the other write land first every time, without touching the product.
"""

from __future__ import annotations

import asyncio
import threading
from typing import TYPE_CHECKING

from bench.proxy import AwsProxy, Pending, Step

if TYPE_CHECKING:
    from collections.abc import Callable


class HoldFirst(AwsProxy):
    """Holds the first DynamoDB request that ``matches`` until ``release`` is set.

    ``held`` is set once that request arrived (the test then makes its own write); every other
    request passes at once.
    """

    def __init__(self, upstream: str, matches: Callable[[Pending, str], bool]) -> None:
        """``matches(pending, body)``: whether this request, its body decoded, is the one to hold."""
        super().__init__(upstream)
        self.matches = matches
        self.held = threading.Event()
        self.release = threading.Event()

    async def _before_forward(self, pending: Pending, writer: asyncio.StreamWriter) -> Step:
        if pending.service != "dynamodb" or self.held.is_set():
            return "forward"
        if self.matches(pending, pending.message.body.decode(errors="replace")):
            self.held.set()
            while not self.release.is_set():
                await asyncio.sleep(0.02)
        return "forward"
