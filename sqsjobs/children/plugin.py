"""The children feature as the kernel sees it: ``ctx.children`` for every run, and the wake job type.

A children batch completes with a job of the built-in type ``sqsjobs.children`` (``WAKE_TYPE``),
created once by the batch's completion transaction. Its handler answers the parent's wait token with
the batch's end — ``{"failed", "reason", "counts"}`` — which wakes the parent (``steps.namespace``:
the answer, then the ``wake`` row and a hint). An answer is idempotent: a second run of the wake job
finds it answered and changes nothing, so the parent is woken once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqsjobs.batches.completion import read_record_flow
from sqsjobs.batches.namespace import env_of
from sqsjobs.children.namespace import ChildBook
from sqsjobs.children.records import WAKE_TYPE, token_of
from sqsjobs.errors import PermanentError, TokenExpired, TokenNotFound
from sqsjobs.registry import HandlerSpec
from sqsjobs.retry import RetryPolicy
from sqsjobs.runtime.seams import Plugin
from sqsjobs.steps.namespace import answer_flow

if TYPE_CHECKING:
    from collections.abc import Callable

    from sqsjobs.context import JobContext
    from sqsjobs.runtime.kernel import Kernel

#: Attempts of a wake job: its writes are idempotent, and a parent left unanswered waits to its timeout.
WAKE_ATTEMPTS = 10


def children_plugin(kernel: Kernel) -> Plugin:
    """Children: ``ctx.children`` for every run (no code of its own runs for a job that does not use it)."""
    return Plugin(
        "children",
        fields=(),
        types=frozenset({WAKE_TYPE}),
        context={"_children": ChildBook(kernel)},
    )


def wake_spec(kernel: Callable[[], Kernel]) -> HandlerSpec:
    """The ``sqsjobs.children`` job type: a children batch's completion answers its parent's token."""

    async def wake(payload: dict[str, Any], ctx: JobContext) -> str:
        k = kernel()
        record = await k.arun(read_record_flow(env_of(k), str(payload["batch_id"])))
        token = token_of(record.dedupe_key)
        if token is None:
            raise PermanentError(f"batch {record.id} is not a children batch: no parent to wake")
        answer = {
            "failed": bool(payload.get("failed")),
            "reason": payload.get("reason"),
            "counts": payload.get("counts"),
        }
        try:
            said: str = await k.arun(answer_flow(k.settings, k.queue_urls, token, k.clock.now(), answer))
        except (TokenExpired, TokenNotFound) as exc:  # the parent stopped waiting (timed out, or gone)
            return f"parent not waiting: {exc}"
        return said

    return HandlerSpec(
        name=WAKE_TYPE,
        fn=wake,
        max_attempts=WAKE_ATTEMPTS,
        retry=RetryPolicy(base_s=1.0),
        payload_type=dict[str, Any],
    )
