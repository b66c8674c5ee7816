"""The soak's fault proxy: the bench's counting proxy (``bench/proxy.py``) that also injects AWS faults.

The soak (issue 8) puts it between sqsjobs and MiniStack. The failures that matter most happen *on
the wire* (the write reached the server, the answer never reached the caller), and they must hit
every process the same way — worker subprocesses, the sweeper and the producer — which only a
network hop can do without touching the product.

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

The seed makes the *sequence* of fault draws repeatable; which request receives which draw
still depends on the order in which concurrent requests arrive.

Why the proxy itself stays in ``bench/``: the benchmark needs the same counting and latency hop
for every framework, and ``bench/`` must not import ``tests/``; only the faults are the soak's.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import socket
import struct
import time
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bench.proxy import AwsProxy

if TYPE_CHECKING:
    from collections.abc import Callable

    from bench.proxy import Message, Pending, Step

__all__ = ["FAULT_KINDS", "FaultPlan", "FaultProxy"]

FAULT_KINDS = ("throttle", "http_5xx", "slow", "reset_before", "reset_after")


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


def _is_query_protocol(request: Message) -> bool:
    return request.header("X-Amz-Target") is None


def _error_response(request: Message, service: str, status: int, code: str, message: str) -> bytes:
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


class FaultProxy(AwsProxy):
    """The counting proxy, plus faults drawn per request from a seeded ``FaultPlan``.

    Attributes:
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
        super().__init__(upstream, latency_s=latency_s)
        self.faults = faults or FaultPlan()
        self.seed = seed
        self.on_fault = on_fault
        self._rng = random.Random(seed)
        self.faults_injected: Counter[str] = Counter()
        self.faults_by_action: Counter[tuple[str, str, str]] = Counter()
        self._injected = 0  # never reset: max_faults counts over the proxy's life

    def reset_counts(self) -> None:
        """Zero the request and fault counters (the fault draws continue their sequence)."""
        super().reset_counts()
        with self._lock:
            self.faults_injected.clear()
            self.faults_by_action.clear()

    def snapshot(self) -> dict[str, dict[str, int]]:
        """The counters of ``AwsProxy.snapshot``, plus ``faults`` and ``faults_by_action``."""
        out = super().snapshot()
        with self._lock:
            out["faults"] = dict(sorted(self.faults_injected.items()))
            out["faults_by_action"] = {
                f"{k}:{s}:{a}": n for (k, s, a), n in sorted(self.faults_by_action.items())
            }
        return out

    def _draw(self, service: str, action: str) -> str | None:
        with self._lock:
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

    async def _before_forward(self, pending: Pending, writer: asyncio.StreamWriter) -> Step:
        service, action, request = pending.service, pending.action, pending.message
        fault = pending.fault = self._draw(service, action)
        if fault is None:
            return "forward"
        if self.on_fault is not None:
            self.on_fault(fault, service, action, request.body)
        if fault == "throttle":
            codes = _THROTTLE_CODES.get(service, ("ThrottlingException",))
            code = codes[self._pick(len(codes))]
            writer.write(_error_response(request, service, 400, code, "Rate exceeded (injected)"))
            await writer.drain()
            return "answered"
        if fault == "http_5xx":
            status, code = _5XX[self._pick(len(_5XX))]
            writer.write(_error_response(request, service, status, code, "injected"))
            await writer.drain()
            return "answered"
        if fault == "reset_before":
            _reset(writer)
            return "closed"
        if fault == "slow":
            pending.hold_until = time.monotonic() + self.faults.slow_s
            await asyncio.sleep(self.faults.slow_s * self._fraction())
        return "forward"

    async def _before_answer(self, pending: Pending, writer: asyncio.StreamWriter) -> Step:
        if pending.fault == "reset_after":
            _reset(writer)
            return "closed"
        if pending.hold_until:
            await asyncio.sleep(max(0.0, pending.hold_until - time.monotonic()))
        return "forward"
