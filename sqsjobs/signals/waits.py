"""``ctx.signals``: a handler waits for a signal without holding a slot (a wait token a matching send answers).

A wait is made of parts that exist (``sqsjobs.steps``), told apart by the token's number ``n``::

    step:token-<n>    the wait token (its id ``<job id>.t<n>`` and timeout): made once per job
    sig#<digest>      w:<job id>.t<n>   the waiter, on the signal item of (name, match) (``records``)
    step:signal-<n>   {"key": <item id>}: the waiter was registered (never registered twice)
    tok:<n>           the answer: the signal's data, written by the send that found the waiter

The run then ends like ``ctx.wait_for_token``: asleep until the token's timeout (no slot, no
attempt used), woken at once by the answer, and the woken run replays to here and returns the
data; at the timeout it raises ``SignalTimeout``. A signal sent before the waiter was registered
is not seen, unless the wait has a ``lookback`` and the name keeps signals (``declare(keep=)``):
the registration's own write then returns the kept ones, and the earliest within the lookback
answers the token at once.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from sqsjobs.errors import ConfigurationError, SignalTimeout, TokenTimeout
from sqsjobs.signals import records
from sqsjobs.steps.namespace import parse
from sqsjobs.steps.records import answer
from sqsjobs.store.apply import Landed, apply
from sqsjobs.store.codec import canonical_json

if TYPE_CHECKING:
    from collections.abc import Mapping

    from sqsjobs._aws import Flow
    from sqsjobs.context import JobContext
    from sqsjobs.runtime.kernel import Kernel
    from sqsjobs.signals.namespace import Signals

#: A wait's timeout when none is given.
DEFAULT_TIMEOUT_S = 7 * 86400.0
STEP = "signal-{n}"


class SignalBook:
    """The worker's signal waits (one per kernel); ``calls(ctx)`` is a handler's ``ctx.signals``."""

    def __init__(self, kernel: Kernel, declared: Signals) -> None:
        self._kernel = kernel
        #: The App's declarations (``app.signals``): the keys each name matches on.
        self.declared = declared

    def calls(self, ctx: JobContext) -> SignalCalls:
        """The handler's ``ctx.signals``."""
        return SignalCalls(self, ctx)

    def wait_flow(
        self, ctx: JobContext, name: str, match: Mapping[str, Any], timeout_s: float, lookback_s: float
    ) -> Flow[Any]:
        """The data of the first matching signal sent after the wait began; ``SignalTimeout``; or ``Sleep``."""
        spec = self.declared.spec(name)
        if set(match) != set(spec.keys):
            raise ConfigurationError(
                f"a wait for {name!r} matches exactly its declared keys {spec.keys}, got {sorted(match)}"
                " (app.signals.declare)"
            )
        if not 0 < timeout_s <= records.MAX_WAIT_S:
            raise ConfigurationError(
                f"a signal wait's timeout is 0 to {records.MAX_WAIT_S:.0f} s, got {timeout_s}"
            )
        k = self._kernel
        table = k.settings.table_name
        book = ctx.steps
        token = yield from book._create_token(ctx, timeout_s)
        _, n = parse(token.id)
        done, _kept = yield from book._begin(ctx, STEP.format(n=n))
        if not done:
            now = k.clock.now()
            key = records.values_key(name, match)
            write = records.wait_on(
                table, key, token.id, token.timeout_at, name=name, now=now, lookback=lookback_s > 0
            )
            landed = yield from apply(write)
            if lookback_s > 0 and isinstance(landed, Landed):
                seen = [e for e in records.kept(landed.attributes or {}) if e[0] >= now - lookback_s]
                if seen:  # the earliest kept signal within the lookback answers the token now
                    text = canonical_json(seen[0][2])
                    yield from apply(answer(table, ctx.job_id, n, now=now, value=text, error=None))
            yield from book._end(ctx, STEP.format(n=n), now, {"key": key})
        try:
            return (yield from book._wait(ctx, token))
        except TokenTimeout as exc:
            raise SignalTimeout(
                f"no signal {records.described(name, match)} came before the wait's timeout"
            ) from exc


class SignalCalls:
    """``ctx.signals``: ``wait(name, match={...}, timeout=..., lookback=...)``; ``await`` it from an async handler.

    The waits of a run are told apart by their tokens' order, as sleeps are: a handler must make
    them in the same order in every run.
    """

    def __init__(self, book: SignalBook, ctx: JobContext) -> None:
        self._book = book
        self._ctx = ctx

    def wait(
        self,
        name: str,
        *,
        match: Mapping[str, Any] | None = None,
        timeout: timedelta | float | None = None,
        lookback: timedelta | float = 0.0,
    ) -> Any:
        """The data of the first signal ``name`` whose declared keys equal ``match``, sent after this call.

        ``timeout`` (default 7 days, at most 30): then ``SignalTimeout``. ``lookback``: also a signal
        sent up to this long before the call, when its name keeps signals (``declare(keep=)``).
        """
        flow = self._book.wait_flow(
            self._ctx, name, dict(match or {}), _seconds(timeout, DEFAULT_TIMEOUT_S), _seconds(lookback, 0.0)
        )
        kernel = self._book._kernel
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return kernel.run(flow)
        return kernel.arun(flow)


def _seconds(value: timedelta | float | None, default: float) -> float:
    if value is None:
        return default
    return value.total_seconds() if isinstance(value, timedelta) else float(value)
