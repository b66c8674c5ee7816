"""What ``ctx.step`` does: run a function once per job across attempts, its result kept on the record.

A run's first step reads the job's record once (one strongly consistent GetItem) and learns every
step an earlier attempt recorded. A step already recorded returns its recorded result and its
function is not called; a new one runs, and its result is written, fenced by the run's claim token,
before the step returns. So a run that crashes after a step's write replays it, and one that
crashes inside a step runs that step again: a step is *at least once* per job, and exactly once
per job once its result landed — the function should be idempotent toward the outside world for
the crash between its side effect and the write (docs/steps.md).

``StepBook`` is the worker's (the steps plug-in sets it as ``ctx.steps``); ``MemoryBook`` keeps the
steps in a dict, for ``sqsjobs.testing.run_job``. Both share the rules in ``Book``.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import inspect
import json
import secrets
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic_core import to_jsonable_python

from sqsjobs._aws import Call, Outcome, one, run_async, run_sync, sleep_call
from sqsjobs.errors import JobControl, LeaseLost, Sleep, StepError, TokenFailed, TokenTimeout
from sqsjobs.steps.namespace import Token, answer_of, parse, token_id
from sqsjobs.steps.records import (
    ANSWER_PREFIX,
    INLINE_STEP_BYTES,
    MAX_NAME_CHARS,
    MAX_STEPS,
    StepRecord,
    record_step,
    steps_of,
)
from sqsjobs.store import requests
from sqsjobs.store.apply import Refused, apply
from sqsjobs.store.codec import canonical_json
from sqsjobs.transport import objects

#: A woken run this close to its sleep's end waits out the rest in-process (a claim may come 1 s early).
EARLY_WAKE_S = 1.0
#: Random bytes of a token's answer key (``Token.key``, 192 bits): what its URL's holder is trusted by.
ANSWER_KEY_BYTES = 24

if TYPE_CHECKING:
    from collections.abc import Callable, Generator

    from sqsjobs._aws import Flow
    from sqsjobs.context import JobContext
    from sqsjobs.retry import RetryPolicy
    from sqsjobs.runtime.kernel import Kernel


@dataclass
class RunSteps:
    """One run's view of its job's steps (kept on its ``JobContext``)."""

    #: The steps recorded so far, read at the run's first step (None: not read yet).
    recorded: dict[str, StepRecord] | None = None
    #: Names this run has taken: a name is unique in a run.
    taken: set[str] = field(default_factory=set)
    #: Sleeps this run reached: the n-th is the step ``sleep-<n>`` in every run of the job.
    sleeps: int = 0
    #: Tokens this run created: the n-th is the step ``token-<n>``, its id ``<job id>.t<n>``.
    tokens: int = 0
    #: Awaits of children this run reached (``ctx.children``): the n-th is the step ``children-<n>``.
    children: int = 0


def _state(ctx: JobContext) -> RunSteps:
    state = ctx._steps_run
    if state is None:
        state = ctx._steps_run = RunSteps()
    return state  # type: ignore[no-any-return]


def run_steps(ctx: JobContext) -> RunSteps:
    """This run's view of its job's steps (what a feature built on steps numbers its own by)."""
    return _state(ctx)


def _check_name(state: RunSteps, name: str) -> None:
    if not isinstance(name, str) or not name or len(name) > MAX_NAME_CHARS:
        raise StepError(
            f"a step's name is a non-empty string of at most {MAX_NAME_CHARS} characters: {name!r}"
        )
    if name in state.taken:
        raise StepError(
            f"step {name!r} was already taken in this run: give each step of a job its own name "
            "(in a loop, put the index in it: f'charge-{i}')"
        )
    state.taken.add(name)


class Book:
    """The rules of ``ctx.step`` over a place to keep steps (its flows: ``_load``, ``_replay``, ``_keep``)."""

    def _now(self) -> float:
        return time.time()

    def _load(self, ctx: JobContext) -> Flow[dict[str, StepRecord]]:
        raise NotImplementedError

    def _replay(self, record: StepRecord) -> Flow[Any]:
        return record.result
        yield  # pragma: no cover - makes this a generator

    def _keep(self, ctx: JobContext, record: StepRecord, text: str) -> Flow[None]:
        raise NotImplementedError

    def _sync(self, flow: Flow[Any]) -> Any:
        raise NotImplementedError

    async def _async(self, flow: Flow[Any]) -> Any:
        raise NotImplementedError

    def _begin(self, ctx: JobContext, name: str) -> Generator[Any, Any, tuple[bool, Any]]:
        """(True, recorded result) or (False, None): the step must run. A flow."""
        state = _state(ctx)
        _check_name(state, name)
        if state.recorded is None:
            state.recorded = yield from self._load(ctx)
        record = state.recorded.get(name)
        if record is not None:
            return True, (yield from self._replay(record))
        if len(state.recorded) >= MAX_STEPS:
            raise StepError(
                f"job {ctx.job_id} would take more than {MAX_STEPS} steps (docs/steps.md: limits)"
            )
        return False, None

    def _sleep(self, ctx: JobContext, seconds: float) -> Flow[float]:
        """Seconds still to wait in this run (a wake-up at most ``EARLY_WAKE_S`` early); raises ``Sleep``."""
        state = _state(ctx)
        state.sleeps += 1
        name = f"sleep-{state.sleeps}"
        done, value = yield from self._begin(ctx, name)
        now = self._now()
        if done:  # this sleep was recorded by an earlier run: woken (or woken early: sleep the rest)
            left = self._left(float(value["until"]), now)
            if left > EARLY_WAKE_S:
                raise Sleep(StepRecord(name, now, left, ctx.attempt, value), float(value["until"]))
            return max(0.0, left)
        if seconds <= 0:
            return 0.0
        until = now + seconds
        raise Sleep(StepRecord(name, now, round(seconds, 3), ctx.attempt, {"until": round(until, 3)}), until)

    def _left(self, until: float, now: float) -> float:
        return until - now

    def _create_token(self, ctx: JobContext, timeout_s: float) -> Flow[Token]:
        """The run's next token: the one an earlier run created (same id), or a new one, kept as a step."""
        state = _state(ctx)
        state.tokens += 1
        name = f"token-{state.tokens}"
        done, value = yield from self._begin(ctx, name)
        if not done:
            now = self._now()
            made = {
                "id": token_id(ctx.job_id, state.tokens),
                "timeout_at": round(now + timeout_s, 3),
                "key": secrets.token_urlsafe(ANSWER_KEY_BYTES),
            }
            value = yield from self._end(ctx, name, now, made)
        key = value.get("key")
        return Token(str(value["id"]), float(value["timeout_at"]), str(key) if key else None)

    def _answers(self, ctx: JobContext) -> Flow[dict[str, Any]]:
        raise NotImplementedError

    def _wait(self, ctx: JobContext, token: Token) -> Flow[Any]:
        """The token's answer; ``TokenFailed``, ``TokenTimeout``, or ``Sleep`` until its timeout."""
        job_id, n = parse(token.id)
        if job_id != ctx.job_id:
            raise StepError(f"job {ctx.job_id} cannot wait for {token.id!r}: a job waits for its own tokens")
        answered, value, error = answer_of((yield from self._answers(ctx)), n)
        if answered:
            if error is not None:
                raise TokenFailed(error)
            return value
        if self._now() >= token.timeout_at - self._early():
            raise TokenTimeout(f"nobody answered token {token.id!r} before its timeout")
        raise Sleep(None, token.timeout_at, waits_for=f"{ANSWER_PREFIX}{n}")

    def _early(self) -> float:
        return 0.0

    def create_token(self, ctx: JobContext, timeout_s: float) -> Token:
        """A sync handler's ``create_token``."""
        return self._sync(self._create_token(ctx, timeout_s))  # type: ignore[no-any-return]

    async def acreate_token(self, ctx: JobContext, timeout_s: float) -> Token:
        """An async handler's ``create_token``."""
        return await self._async(self._create_token(ctx, timeout_s))  # type: ignore[no-any-return]

    def wait_for_token(self, ctx: JobContext, token: Token) -> Any:
        """A sync handler's ``wait_for_token``."""
        return self._sync(self._wait(ctx, token))

    async def await_token(self, ctx: JobContext, token: Token) -> Any:
        """An async handler's ``wait_for_token``."""
        return await self._async(self._wait(ctx, token))

    def _sleep_through(self, ctx: JobContext, seconds: float) -> Flow[None]:
        """``_sleep``, then the rest of a sleep woken (at most ``EARLY_WAKE_S``) early, in-process."""
        left = yield from self._sleep(ctx, seconds)
        if left > 0:
            yield sleep_call(left)

    def sleep(self, ctx: JobContext, seconds: float) -> None:
        """A sync handler's sleep."""
        self._sync(self._sleep_through(ctx, seconds))

    async def asleep(self, ctx: JobContext, seconds: float) -> None:
        """An async handler's sleep."""
        await self._async(self._sleep_through(ctx, seconds))

    def _end(self, ctx: JobContext, name: str, started: float, result: Any) -> Flow[Any]:
        """Keep the step's result (fenced), then hand the handler its stored form: a replay gives the same."""
        value, text = _storable(name, result, ctx_max_bytes(self))
        record = StepRecord(name, started, round(self._now() - started, 4), ctx.attempt, value)
        yield from self._keep(ctx, record, text)
        _state(ctx).recorded[name] = record  # type: ignore[index]
        return value

    def step(
        self,
        ctx: JobContext,
        name: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        attempts: int,
        backoff: RetryPolicy | None,
    ) -> Generator[Call | _Invoke, Any, Any]:
        """One step, sans I/O: its calls, an ``_Invoke`` where ``fn`` must be called, backoffs as sleeps."""
        done, value = yield from self._begin(ctx, name)
        if done:
            return value
        started = self._now()
        for attempt in range(1, attempts + 1):
            try:
                result = yield _Invoke(fn, args)
                break
            except JobControl:
                raise
            except Exception:
                if attempt >= attempts:
                    raise
                yield sleep_call(_delay(backoff, attempt))
        return (yield from self._end(ctx, name, started, result))

    def run(self, flow: Generator[Call | _Invoke, Any, Any]) -> Any:
        """Drive a sync handler's ``step`` (its function runs in the handler's thread)."""
        resume: Outcome | None = None
        while True:
            done, got = self._sync(_until_invoke(flow, resume))
            if done:
                return got
            try:
                resume = Outcome(value=got.fn(*got.args))
            except Exception as exc:
                resume = Outcome(error=exc)

    async def arun(self, flow: Generator[Call | _Invoke, Any, Any]) -> Any:
        """Drive an async handler's ``step``: its function may be a coroutine one; a sync one runs in a thread."""
        resume: Outcome | None = None
        while True:
            done, got = await self._async(_until_invoke(flow, resume))
            if done:
                return got
            try:
                resume = Outcome(value=await got.acall())
            except Exception as exc:
                resume = Outcome(error=exc)


@dataclass(frozen=True)
class _Invoke:
    """Where a step's flow needs its function called: the one thing its driver does itself."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]

    async def acall(self) -> Any:
        """Await a coroutine function; run a sync one in a thread (awaiting what it returns, if awaitable)."""
        if inspect.iscoroutinefunction(self.fn):
            return await self.fn(*self.args)
        result = await asyncio.to_thread(functools.partial(self.fn, *self.args))
        if inspect.isawaitable(result):
            result = await result
        return result


def _until_invoke(
    flow: Generator[Call | _Invoke, Any, Any], resume: Outcome | None
) -> Flow[tuple[bool, Any]]:
    """Run ``flow`` on (its calls pass through to the driver) until it asks for its function.

    Returns ``(False, the _Invoke)`` there, ``(True, its result)`` when it ends. ``resume`` is
    what the function's last call came to, sent (or thrown) into the flow first.
    """
    try:
        if resume is None:
            item = next(flow)
        elif resume.error is not None:
            item = flow.throw(resume.error)
        else:
            item = flow.send(resume.value)
        while not isinstance(item, _Invoke):
            try:
                response = yield item
            except Exception as exc:
                item = flow.throw(exc)
            else:
                item = flow.send(response)
    except StopIteration as stop:
        return True, stop.value
    return False, item


def _storable(name: str, result: Any, max_bytes: int) -> tuple[Any, str]:
    """The step's result as JSON data and its canonical text; a result no replay could give back raises.

    A job's result that cannot be kept becomes a note (the success must not be lost); a step's
    cannot: a later attempt would replay the note instead of the value.
    """
    try:
        value = to_jsonable_python(result)
        text = canonical_json(value)
    except Exception as exc:
        raise StepError(
            f"step {name!r} returned a value that is not JSON: {type(exc).__name__}: {exc}"
        ) from exc
    if len(text) > max_bytes:
        raise StepError(f"step {name!r} returned {len(text)} bytes, over max_result_bytes ({max_bytes})")
    return json.loads(text), text


def _delay(backoff: RetryPolicy | None, attempt: int) -> float:
    return 0.0 if backoff is None else backoff.delay_for(attempt)


def ctx_max_bytes(book: Book) -> int:
    """The largest result a step keeps (the App's ``max_result_bytes``; 64 MB without an App)."""
    return int(getattr(book, "max_result_bytes", 64 * 1024 * 1024))


class StepBook(Book):
    """The worker's steps: attributes of the job's record, large results in S3 (``ctx.steps``)."""

    def __init__(self, kernel: Kernel) -> None:
        self._kernel = kernel
        self.max_result_bytes = kernel.settings.max_result_bytes

    def _now(self) -> float:
        return self._kernel.clock.now()

    def _sync(self, flow: Flow[Any]) -> Any:
        return self._kernel.run(flow)

    async def _async(self, flow: Flow[Any]) -> Any:
        return await self._kernel.arun(flow)

    def _load(self, ctx: JobContext) -> Flow[dict[str, StepRecord]]:
        read = requests.get(self._kernel.settings.table_name, ctx.job_id)
        response = yield from one(Call("dynamodb", "get_item", read))
        return steps_of(response.get("Item") or {})

    def _answers(self, ctx: JobContext) -> Flow[dict[str, Any]]:
        read = requests.get(self._kernel.settings.table_name, ctx.job_id)
        response = yield from one(Call("dynamodb", "get_item", read))
        return dict(response.get("Item") or {})

    def _early(self) -> float:
        return EARLY_WAKE_S  # a claim may come up to 1 s before run_at

    def _replay(self, record: StepRecord) -> Flow[Any]:
        if record.ref is None:
            return record.result
        return json.loads((yield from objects.get_flow(record.ref)))

    def _keep(self, ctx: JobContext, record: StepRecord, text: str) -> Flow[None]:
        settings = self._kernel.settings
        inline: str | None = text
        if len(text) > INLINE_STEP_BYTES:  # the object first: the record never names one that is not there
            digest = hashlib.sha256(record.name.encode()).hexdigest()[:24]
            key = f"{objects.RESULTS}{ctx.job_id}/steps/{digest}/{ctx.job.claim_token}"
            reference = objects.ref(settings.payload_bucket, key)
            yield from objects.put_flow(reference, text.encode())
            record = StepRecord(
                record.name, record.started_at, record.duration_s, record.attempt, ref=reference
            )
            inline = None
        write = record_step(settings.table_name, ctx.job, record, inline)
        recorded = yield from apply(write)
        if isinstance(recorded, Refused):
            raise LeaseLost(
                f"step {record.name!r} of job {ctx.job_id} was not recorded: this run no longer holds the job"
            ) from recorded.error


class MemoryBook(Book):
    """Steps kept in a dict (``sqsjobs.testing.run_job``): ``recorded`` maps a name to its result."""

    def __init__(
        self,
        recorded: dict[str, Any] | None = None,
        *,
        answers: dict[str, Any] | None = None,
        max_result_bytes: int = 64 * 1024 * 1024,
    ) -> None:
        #: Name → result of every step recorded: the ones given, then this run's.
        self.recorded: dict[str, Any] = dict(recorded or {})
        #: The names whose function this run called, in order.
        self.ran: list[str] = []
        self.max_result_bytes = max_result_bytes
        #: Token id → the answer a test gives it (an ``Exception`` instance: the token failed with it).
        self.answers: dict[str, Any] = dict(answers or {})

    def _answers(self, ctx: JobContext) -> Flow[dict[str, Any]]:
        item: dict[str, Any] = {}
        for token, value in self.answers.items():
            _, n = parse(token)
            answer = (
                {"e": {"S": str(value)}} if isinstance(value, Exception) else {"v": {"S": json.dumps(value)}}
            )
            item[f"{ANSWER_PREFIX}{n}"] = {"M": answer}
        return item
        yield  # pragma: no cover - makes this a generator

    def _load(self, ctx: JobContext) -> Flow[dict[str, StepRecord]]:
        return {name: StepRecord(name, 0.0, 0.0, 0, value) for name, value in self.recorded.items()}
        yield  # pragma: no cover - makes this a generator

    def _left(self, until: float, now: float) -> float:
        return 0.0  # simulated: a recorded sleep has passed by the next run

    def _keep(self, ctx: JobContext, record: StepRecord, text: str) -> Flow[None]:
        self.recorded[record.name] = json.loads(text)
        self.ran.append(record.name)
        return
        yield  # pragma: no cover - makes this a generator

    def _sync(self, flow: Flow[Any]) -> Any:
        return run_sync(
            flow, _NO_AWS
        )  # a step's backoff and an early wake's rest are slept, as a worker would

    async def _async(self, flow: Flow[Any]) -> Any:
        return await run_async(flow, _NO_AWS)


class _NoAws:
    """The clients of a memory book's drivers: a flow that reached AWS is a bug in the book."""

    def get(self, service: str) -> Any:
        raise RuntimeError(f"a memory book's flow made an AWS call ({service})")


_NO_AWS: Any = _NoAws()
