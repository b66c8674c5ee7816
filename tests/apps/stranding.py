"""An app for the stranding tests: jobs where two features meet, leaving evidence outside the process.

Each run appends ``<job id> <attempt>`` to the payload's ``runs`` file (O_APPEND: runs of several
worker processes never tear a line), so a test counts runs whatever the workers believe.
"""

from __future__ import annotations

import json
import os
import tempfile
import time

from sqsjobs import App, BatchItem, BatchOptions, BatchRetry, BatchSuccess, Breaker, Hooks, JobContext, Retry

app = App(os.environ.get("TEST_APP_NAME", "stranding"))
app.limit("one", concurrency=1)


def _record(payload: dict[str, object], ctx: JobContext) -> None:
    fd = os.open(str(payload["runs"]), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, f"{ctx.job_id} {ctx.attempt}\n".encode())
    finally:
        os.close(fd)


@app.job("hold", limits=["one"], max_attempts=2, timeout=120)
def hold(payload: dict[str, object], ctx: JobContext) -> None:
    """Holds the limit's only slot for ``sleep_s``."""
    _record(payload, ctx)
    time.sleep(float(payload["sleep_s"]))  # type: ignore[arg-type]


@app.job("device.step", queue="device", limits=["one"], max_attempts=2, timeout=60)
def step(payload: dict[str, object], ctx: JobContext) -> None:
    """A serialized job under the same limit."""
    _record(payload, ctx)


app.limit("two", concurrency=2)

#: One job type per feature the stranding matrix crosses with each disturbance. Each records its
#: run; with ``sleep_first_s`` its first attempt sleeps (long enough to be killed mid-job; with
#: ``until``, a file path, only until that file exists), with ``retry_first_s`` it asks to run
#: again that much later.
FEATURE_TYPES = {
    "plain": "default",
    "work.run": "work",  # a queue with priority levels
    "device.run": "device",  # a serialized queue
    "limited.run": "default",
}


def _matrix_run(payload: dict[str, object], ctx: JobContext) -> None:
    _record(payload, ctx)
    _first_attempt(payload, ctx)


def _first_attempt(payload: dict[str, object], ctx: JobContext) -> None:
    """What a first attempt does: sleep (to be killed mid-job), or ask to run again later."""
    if ctx.attempt == 1 and payload.get("sleep_first_s"):
        limit = float(payload["sleep_first_s"])  # type: ignore[arg-type]
        release = payload.get("until")
        if release:  # runs until the test lets it end, at most ``sleep_first_s``
            deadline = time.monotonic() + limit
            while not os.path.exists(str(release)) and time.monotonic() < deadline:
                time.sleep(0.05)
        else:
            time.sleep(limit)
    if ctx.attempt == 1 and payload.get("retry_first_s"):
        raise Retry(delay_s=float(payload["retry_first_s"]))  # type: ignore[arg-type]
    if ctx.attempt == 2 and payload.get(
        "sleep_second_s"
    ):  # the last attempt: long enough to lose its message
        time.sleep(float(payload["sleep_second_s"]))  # type: ignore[arg-type]


for _name, _queue in FEATURE_TYPES.items():
    app.job(
        _name,
        queue=_queue,
        max_attempts=2,
        timeout=60,
        limits=["two"] if _name == "limited.run" else (),
        pausable=True,
    )(_matrix_run)


@app.job("batch.done", max_attempts=2, timeout=60)
def batch_done(payload: object, ctx: JobContext) -> None:
    """A batch's completion callback (the test reads the batch's status)."""


#: The matrix's rows that a flow-control feature gates: a pausable type paused by the test, a
#: dependency whose breaker one failing run opens, and a type that expires 1,001 s after its enqueue
#: (a foreign message carries no ``expires_after`` of its own: its type's applies).
app.job("paused.run", max_attempts=2, timeout=60, pausable=True)(_matrix_run)
app.limit("dep", breaker=Breaker(failures=1, window_s=60, cooldown_s=3))
app.job("breaker.run", max_attempts=2, timeout=60, limits=["dep"])(_matrix_run)
app.job("brief.run", max_attempts=2, timeout=60, expires_after=1001)(_matrix_run)
#: On a queue no matrix worker serves: a chain step of it waits, unclaimed, past its deadline.
app.job("aside.run", queue="aside", max_attempts=2, timeout=60, expires_after=1)(_matrix_run)


@app.job("breaker.trip", max_attempts=1, timeout=60, limits=["dep"])
def trip(payload: object, ctx: JobContext) -> None:
    """Fails: one failed run of the dependency opens its breaker for its cooldown."""
    raise RuntimeError("the dependency is down")


#: The same dependency's jobs on a queue of their own: a worker serving only it opens the breaker
#: and runs its long probe while no other worker runs (the redrive column's breaker-deferred cell).
app.job("dep.trip", queue="deps", max_attempts=1, timeout=60, limits=["dep"])(trip)
app.job("dep.probe", queue="deps", max_attempts=2, timeout=120, limits=["dep"])(_matrix_run)


#: A handler that may run longer than its message lives (``sleep_first_s`` past a short retention).
app.job("long.run", max_attempts=2, timeout=300)(_matrix_run)


#: The rows of batch handlers and durable steps (dedup modes enqueue ``plain``). A batch handler's
#: call records each of its jobs, and behaves as ``_matrix_run`` for a job's first attempt (the call
#: sleeps; a retry is a ``BatchRetry``).
@app.job(
    "batched.run", batch=BatchOptions(max_size=10, max_wait_s=0.2), max_attempts=2, timeout=60, pausable=True
)
def batched(items: list[BatchItem[dict[str, object]]]) -> list[BatchSuccess | BatchRetry]:
    """Records each job, sleeps while a first attempt asks to, and retries those that ask to."""
    firsts = [i for i in items if i.ctx.attempt == 1]
    for item in items:
        _record(item.payload, item.ctx)
    time.sleep(max((float(str(i.payload.get("sleep_first_s", 0))) for i in firsts), default=0.0))
    later = {
        i.job_id: float(str(i.payload["retry_first_s"])) for i in firsts if i.payload.get("retry_first_s")
    }
    return [
        BatchRetry("asked to run later", delay_s=later[i.job_id]) if i.job_id in later else BatchSuccess()
        for i in items
    ]


def _mark(runs: str, token: str) -> str:
    """A step's side effect: one line ``<job id>:<step>`` in the runs file per call."""
    fd = os.open(runs, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, f"{token}\n".encode())
    finally:
        os.close(fd)
    return token


@app.job("stepped.run", max_attempts=2, timeout=60, pausable=True)
def stepped(payload: dict[str, object], ctx: JobContext) -> None:
    """Two durable steps; between them ``naps`` sleeps (default 1) of ``nap_s``, then a first attempt's disturbance.

    Each run is recorded, and each step's call (``<job id>:one``, ``<job id>:two``): a step replayed
    from the record is not called again. A sleep gives its attempt back, so the row that sleeps
    (``nap_s``) is sent no first-attempt disturbance: its woken run would meet it again.
    """
    _record(payload, ctx)
    runs = str(payload["runs"])
    ctx.step("one", _mark, runs, f"{ctx.job_id}:one")
    for _ in range(int(str(payload.get("naps", 1))) if payload.get("nap_s") else 0):
        ctx.sleep(float(str(payload["nap_s"])))
    _first_attempt(payload, ctx)
    ctx.step("two", _mark, runs, f"{ctx.job_id}:two")


#: The rows of a job waiting on a token, a hook's job and a schedule's fire (a fire of ``plain``, or of
#: ``aside.run``, needs no type of its own). The token's job takes its first step, hands its token's id
#: out (``<runs>.<job id>.token``, read by the test as an email would carry it to a person), waits for
#: the answer (its run ends; no attempt used), then meets a first attempt's disturbance and takes its
#: second step.
@app.job("token.run", max_attempts=2, timeout=60, pausable=True)
def token_wait(payload: dict[str, object], ctx: JobContext) -> None:
    """Two durable steps around a wait on a token (``token_timeout_s``, 10 minutes by default)."""
    _record(payload, ctx)
    runs = str(payload["runs"])
    ctx.step("one", _mark, runs, f"{ctx.job_id}:one")
    token = ctx.create_token(timeout=float(str(payload.get("token_timeout_s", 600))))
    ctx.step("publish", _publish, runs, ctx.job_id, token.id)
    ctx.wait_for_token(token)
    _first_attempt(payload, ctx)
    ctx.step("two", _mark, runs, f"{ctx.job_id}:two")


def _publish(runs: str, job_id: str, token_id: str) -> str:
    with open(f"{runs}.{job_id}.token", "w") as out:
        out.write(token_id)
    return token_id


def hook_note(ended_job_id: str) -> str:
    """Where an ended job leaves its payload for its hook's job: a hook's payload is only its summary."""
    return os.path.join(tempfile.gettempdir(), f"sqsjobs-stranding-hook-{ended_job_id}.json")


def _hooked(payload: dict[str, object], ctx: JobContext) -> None:
    """Leaves ``{"runs": ..., **payload["hook"]}`` for its hook's job, then ends (it is not a row)."""
    with open(hook_note(ctx.job_id), "w") as out:
        json.dump({"runs": payload["runs"], **dict(payload.get("hook") or {})}, out)  # type: ignore[call-overload]


def _hook(summary: dict[str, object], ctx: JobContext) -> None:
    """A hook's job: runs as ``_matrix_run`` with the payload its ended job left for it."""
    with open(hook_note(str(summary["job_id"]))) as note:
        _matrix_run(json.load(note), ctx)


#: A hooked type and its ``on_succeeded`` hook on the default queue; on the deps queue (run by the
#: redrive column's only worker, its hook's job left for SQS to redrive); and with its hook on the
#: queue no matrix worker serves, expiring a second after its enqueue (the expiry column's).
app.job("hook.run", max_attempts=2, timeout=60, pausable=True)(_hook)
app.job("hooked.run", max_attempts=2, timeout=60, hooks=Hooks(on_succeeded="hook.run"))(_hooked)
app.job("hooked.deps", queue="deps", max_attempts=2, timeout=60, hooks=Hooks(on_succeeded="hook.run"))(
    _hooked
)
app.job("hook.aside", queue="aside", max_attempts=2, timeout=60, expires_after=1)(_hook)
app.job("hooked.aside", max_attempts=2, timeout=60, hooks=Hooks(on_succeeded="hook.aside"))(_hooked)
