"""What an attempt's ending becomes, and how a handler is called; pure, shared by the worker and ``run_job``.

The worker (``runtime/execution.py``) and ``sqsjobs.testing.run_job`` must decide a failed attempt's
fate by the same rule, so the rule lives here, below both.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from sqsjobs.errors import Cancel, JobTimeout, PayloadInvalid, PermanentError, Retry
from sqsjobs.retry import decide

if TYPE_CHECKING:
    from concurrent.futures import Executor

    from sqsjobs.context import JobContext
    from sqsjobs.job import Job
    from sqsjobs.registry import HandlerSpec


def timeout_error(spec: HandlerSpec, timeout_s: float | None = None) -> JobTimeout:
    """The error recorded for a run of ``spec`` that outlived ``timeout_s`` (``spec.timeout_s`` if None)."""
    return JobTimeout(
        f"{spec.name} ran past its {spec.timeout_s if timeout_s is None else timeout_s:g} s timeout"
    )


@dataclass(frozen=True)
class Verdict:
    """What a failed attempt becomes: the transition the worker records for it."""

    #: ``retry``: runs again after ``delay_s``; ``dead``: to the DLQ; ``cancelled``: stopped for good.
    outcome: Literal["retry", "dead", "cancelled"]
    #: The record's ``reason`` (dead or cancelled).
    reason: str = ""
    delay_s: float = 0.0


def judge_failure(spec: HandlerSpec, job: Job, exc: BaseException, *, now: float) -> Verdict:
    """Map a handler's exception to its job's next state; the one place the worker decides it.

    ``Cancel`` stops the job; ``PermanentError`` and ``PayloadInvalid`` kill it at once; anything
    else (a timeout, ``Retry`` with its delay) is retried by the job type's policy until the
    attempts or its max age run out. The bound is the type's (``spec``), never a producer's
    guess. Pure, so ``sqsjobs.testing.run_job`` reuses it.
    """
    if isinstance(exc, Cancel):
        return Verdict("cancelled", reason=str(exc))
    if isinstance(exc, PermanentError | PayloadInvalid):
        return Verdict("dead", reason="permanent error")
    decision = decide(
        spec.retry,
        attempt=job.attempt,
        max_attempts=spec.max_attempts,
        created_at=job.created_at.timestamp(),
        now=now,
        requested_delay_s=exc.delay_s if isinstance(exc, Retry) else None,
    )
    if decision is None:
        exhausted = job.attempt >= spec.max_attempts
        reason = (
            f"attempts exhausted ({job.attempt}/{spec.max_attempts})" if exhausted else "max age exceeded"
        )
        return Verdict("dead", reason=reason)
    return Verdict("retry", delay_s=decision.delay_s)


async def invoke(spec: HandlerSpec, payload: Any, ctx: JobContext, *, pool: Executor | None = None) -> Any:
    """Call the handler: an async one on the loop, a sync one in ``pool`` (the loop's default if None)."""
    if spec.is_async:
        return await spec.fn(payload, ctx)
    loop = asyncio.get_running_loop()
    call = functools.partial(contextvars.copy_context().run, spec.fn, payload, ctx)
    return await loop.run_in_executor(pool, call)
