"""Helpers for tests, yours and ours.

- ``run_job`` runs one handler in-process, with no AWS at all, by the worker's own rules: the
  payload validated and JSON-round-tripped as enqueue and the worker do, the handler's timeout,
  and the worker's retry decision for the outcome (like Oban's ``perform_job``).
- ``work_until`` runs a real worker against an endpoint until a condition holds. There is no
  in-memory imitation of SQS or DynamoDB here: point the App at an emulator
  (``sqsjobs.local.emulator.EmbeddedMoto``, MiniStack, LocalStack) and the real code path runs.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, overload

from sqsjobs.context import JobContext
from sqsjobs.errors import Sleep
from sqsjobs.job import JobStatus
from sqsjobs.producer import JobRequest, build_new_job
from sqsjobs.registry import Registry
from sqsjobs.runtime.payloads import storable_result
from sqsjobs.runtime.record_stage import judge_failure
from sqsjobs.runtime.run_stage import invoke, timeout_error
from sqsjobs.runtime.sweeper import run_sweeper
from sqsjobs.runtime.worker import Worker
from sqsjobs.steps.book import MemoryBook
from sqsjobs.store import codec, enqueue
from sqsjobs.store.codec import to_datetime

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from sqsjobs.app import App
    from sqsjobs.job import Job
    from sqsjobs.options import P
    from sqsjobs.registry import Handler, HandlerOf

#: The lease owner and ``ctx.worker_id`` of jobs made here.
TEST_WORKER_ID = "sqsjobs-testing"


def make_job(
    app: App,
    job_type: str | Handler,
    payload: Any = None,
    *,
    attempt: int = 1,
    tenant: str | None = None,
    job_id: str | None = None,
    payload_version: int | None = None,
) -> Job:
    """A job as a worker's claim of ``attempt`` leaves it: running, leased to ``TEST_WORKER_ID``.

    Made by the producer's own code and read back from the item it would write, so the payload is
    checked and JSON-round-tripped exactly as ``enqueue`` and the worker do it (``HandlerNotFound``,
    ``PayloadInvalid``, ``PayloadTooLarge``). No AWS call. With an older ``payload_version`` the
    payload is stored as a producer of that version would (JSON, unchecked: the current model is
    not its model), and the worker's upcasts bring it up to date when it runs.
    """
    now = app.clock.now()
    request = JobRequest(job_type, payload, tenant=tenant)
    registry = app.registry
    spec = registry.get(registry.name_of(job_type))
    if payload_version is not None and payload_version != spec.version:
        if not 1 <= payload_version < spec.version:
            raise ValueError(
                f"payload_version must be 1..{spec.version} (the handler's), got {payload_version}"
            )
        registry = Registry()  # the type as an older producer registered it
        registry.add(dataclasses.replace(spec, version=payload_version, payload_type=Any, upcasts={}))
    new = build_new_job(request, registry=registry, settings=app.settings, now=now)
    queued = codec.job_from_item(enqueue.put_job(app.settings.table_name, new).item)
    max_attempts = app.registry.get(new.type).max_attempts
    if not 1 <= attempt <= max_attempts:
        raise ValueError(f"attempt must be 1..{max_attempts} (the job type's max_attempts), got {attempt}")
    # What the claim's UpdateItem sets (sqsjobs.store.runs.claim); each claim bumps the epoch.
    return queued.evolve(
        id=job_id or queued.id,
        payload=new.payload,  # the worker's job carries the message's payload (the record keeps its hash)
        status=JobStatus.RUNNING,
        attempt=attempt,
        max_attempts=max_attempts,
        lease_owner=TEST_WORKER_ID,
        claim_token=codec.nonce(),
        lease_epoch=attempt,
        lease_expires=to_datetime(now + app.settings.lease_s),
        started_at=to_datetime(now),
        updated_at=to_datetime(now),
    )


@dataclass(frozen=True, kw_only=True)
class RunResult:
    """What one run of a handler leads to, decided as the worker decides it."""

    #: The job's next state: ``succeeded``, ``retry`` (scheduled again), ``dead``, ``cancelled``, or
    #: ``asleep`` (``ctx.sleep``: queued again for ``delay_s``, the attempt not used).
    outcome: Literal["succeeded", "retry", "dead", "cancelled", "asleep"]
    #: The job as the handler saw it (``ctx.job``).
    job: Job
    #: The return value as the record would store it (JSON round-tripped); None unless succeeded.
    result: Any = None
    #: What the handler raised (``JobTimeout`` past its timeout); None when it succeeded.
    error: BaseException | None = None
    #: The record's reason when dead or cancelled, e.g. ``attempts exhausted (5/5)``.
    reason: str | None = None
    #: Seconds until the retry (jittered by the policy unless ``Retry(delay_s=...)`` set it), or the sleep's.
    delay_s: float | None = None
    #: Every step recorded after this run (name → JSON result): the ones given, then this run's.
    #: Pass it as ``steps=`` to run the next attempt as a worker would, replaying them.
    steps: dict[str, Any] = field(default_factory=dict)
    #: The steps whose function this run called, in order (a replayed step is not among them).
    ran_steps: tuple[str, ...] = ()


@overload
async def arun_job(
    app: App,
    job_type: str,
    payload: Any = None,
    *,
    attempt: int = 1,
    tenant: str | None = None,
    job_id: str | None = None,
    payload_version: int | None = None,
    previous_result: Any = None,
    steps: dict[str, Any] | None = None,
    tokens: dict[str, Any] | None = None,
) -> RunResult: ...
@overload
async def arun_job(
    app: App,
    job_type: HandlerOf[P],
    payload: P,
    *,
    attempt: int = 1,
    tenant: str | None = None,
    job_id: str | None = None,
    payload_version: int | None = None,
    previous_result: Any = None,
    steps: dict[str, Any] | None = None,
    tokens: dict[str, Any] | None = None,
) -> RunResult: ...
async def arun_job(
    app: App,
    job_type: str | Handler,
    payload: Any = None,
    *,
    attempt: int = 1,
    tenant: str | None = None,
    job_id: str | None = None,
    payload_version: int | None = None,
    previous_result: Any = None,
    steps: dict[str, Any] | None = None,
    tokens: dict[str, Any] | None = None,
) -> RunResult:
    """Async ``run_job``, for tests that already run an event loop."""
    job = make_job(
        app, job_type, payload, attempt=attempt, tenant=tenant, job_id=job_id, payload_version=payload_version
    )
    spec = app.registry.get(job.type)
    # The worker upgrades an older payload and validates again before the run; a payload that does
    # not survive the JSON round trip or an upcast would die there (its reason says which), and
    # raises PayloadInvalid (UpcastError) here.
    value = spec.load(job.payload, job.payload_version)
    ctx = JobContext(
        job=job,
        worker_id=TEST_WORKER_ID,
        deadline=app.clock.now() + spec.timeout_s,
        logger=app.telemetry.logger,
        # What a chain step's handler reads: as the worker gives it, JSON round-tripped as the record stores it.
        previous_result=json.loads(storable_result(previous_result, app.settings.max_result_bytes)[1]),
        # Steps simulated: the ones given are recorded (replayed without a call), new ones are kept here.
        steps=(book := MemoryBook(steps, answers=tokens, max_result_bytes=app.settings.max_result_bytes)),
    )
    # A pool of its own: a sync handler past its timeout runs on in its thread (it cannot be
    # killed, as in the worker), and must not hold up the shutdown of the loop's default executor.
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqsjobs-run-job")
    run = asyncio.ensure_future(invoke(spec, value, ctx, pool=pool))
    try:
        done, _ = await asyncio.wait({run}, timeout=spec.timeout_s)
    finally:
        pool.shutdown(wait=False)
        if not run.done():
            run.cancel()  # an async handler stops; a sync one is abandoned
    exc = run.exception() if run in done else timeout_error(spec)
    if exc is None:
        stored = json.loads(storable_result(run.result(), app.settings.max_result_bytes)[1])
        return RunResult(
            outcome="succeeded", job=job, result=stored, steps=book.recorded, ran_steps=tuple(book.ran)
        )
    if isinstance(exc, Sleep):  # simulated: the next run_job(steps=result.steps) finds it passed
        if exc.step is not None:  # a sleep (a wait for a token records nothing: it waits for an answer)
            book.recorded[exc.step.name] = exc.step.result
        return RunResult(
            outcome="asleep",
            job=job,
            delay_s=exc.step.duration_s if exc.step is not None else round(exc.until - app.clock.now(), 3),
            steps=book.recorded,
            ran_steps=tuple(book.ran),
        )
    verdict = judge_failure(spec, job, exc, now=app.clock.now())
    return RunResult(
        outcome=verdict.outcome,
        job=job,
        error=exc,
        reason=verdict.reason or None,
        delay_s=verdict.delay_s if verdict.outcome == "retry" else None,
        steps=book.recorded,
        ran_steps=tuple(book.ran),
    )


@overload
def run_job(
    app: App,
    job_type: str,
    payload: Any = None,
    *,
    attempt: int = 1,
    tenant: str | None = None,
    job_id: str | None = None,
    payload_version: int | None = None,
    previous_result: Any = None,
    steps: dict[str, Any] | None = None,
    tokens: dict[str, Any] | None = None,
) -> RunResult: ...
@overload
def run_job(
    app: App,
    job_type: HandlerOf[P],
    payload: P,
    *,
    attempt: int = 1,
    tenant: str | None = None,
    job_id: str | None = None,
    payload_version: int | None = None,
    previous_result: Any = None,
    steps: dict[str, Any] | None = None,
    tokens: dict[str, Any] | None = None,
) -> RunResult: ...
def run_job(
    app: App,
    job_type: str | Handler,
    payload: Any = None,
    *,
    attempt: int = 1,
    tenant: str | None = None,
    job_id: str | None = None,
    payload_version: int | None = None,
    previous_result: Any = None,
    steps: dict[str, Any] | None = None,
    tokens: dict[str, Any] | None = None,
) -> RunResult:
    """Run one job's handler in-process, as a worker would run this attempt; no AWS.

    The job type must be registered in ``app`` (``HandlerNotFound``). The payload goes through
    what enqueue and the worker do to it (validation and dump, JSON, validation), so a payload the
    handler cannot take raises ``PayloadInvalid`` as ``enqueue`` would. Sync handlers run in a
    thread, async ones on a loop, both under the handler's timeout; the outcome is the worker's own
    decision for this attempt (``Retry``, ``PermanentError``, ``Cancel``, other exceptions, the
    retry policy and ``max_attempts``).

    Args:
        app: the App that registers the handler.
        job_type: the registered name, or the handler (then mypy checks ``payload`` against it).
        payload: what a producer would pass to ``enqueue``.
        attempt: the attempt to run, 1..``max_attempts``: the last one turns a failure into ``dead``.
        tenant: the job's tenant.
        job_id: the job's id (``ctx.job_id``); default: a new one, as ``enqueue`` makes.
        payload_version: the payload's schema version (default: the handler's); an older one is
            stored as is and upgraded by the type's upcasts before validation, as a worker does.
        previous_result: what ``ctx.previous_result`` holds, as a chain step after the first sees
            the step before's result (JSON round-tripped, as the record keeps it).
        steps: steps an earlier attempt recorded (name → result): ``ctx.step`` returns these
            without calling the function, as a worker's later attempt would (``RunResult.steps``).
        tokens: answers to the job's wait tokens (token id → value; an exception instance: the
            token failed with its message). A token without one leaves the run ``asleep``.
    """
    return asyncio.run(
        arun_job(
            app,
            job_type,
            payload,
            attempt=attempt,
            tenant=tenant,
            job_id=job_id,
            payload_version=payload_version,
            previous_result=previous_result,
            steps=steps,
            tokens=tokens,
        )
    )


def all_finished(app: App, job_ids: Iterable[str]) -> Callable[[], bool]:
    """A condition: every job is in a terminal state."""
    ids = list(job_ids)

    def check() -> bool:
        return all(app.get(i, load_result=False).status.terminal for i in ids)

    return check


async def awork_until(
    app: App,
    done: Callable[[], bool],
    *,
    timeout_s: float = 30.0,
    concurrency: int | None = None,
    queues: list[str] | None = None,
    sweep: bool = False,
    poll_s: float = 0.1,
) -> Worker:
    """Run a worker (and optionally the sweeper) until ``done()`` is true; TimeoutError otherwise."""
    worker = Worker(app, queues=queues, concurrency=concurrency)
    stop = asyncio.Event()
    tasks = [asyncio.create_task(worker.run(stop))]
    if sweep:
        tasks.append(asyncio.create_task(run_sweeper(app, stop)))
    deadline = time.monotonic() + timeout_s
    try:
        while not await asyncio.to_thread(done):
            if time.monotonic() > deadline:
                raise TimeoutError(f"condition not met within {timeout_s} s")
            if tasks[0].done():
                tasks[0].result()  # surface a crashed worker
            await asyncio.sleep(poll_s)
    finally:
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=False)
    return worker


def work_until(app: App, done: Callable[[], bool], **kwargs: object) -> Worker:
    """Sync ``awork_until``."""
    return asyncio.run(awork_until(app, done, **kwargs))  # type: ignore[arg-type]
