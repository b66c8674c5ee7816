"""How many sqsjobs modules one plain job's path executes (receive → claim → run → finish → ack).

A plain job (async, no-op, no feature's fields) through an in-process Worker on MiniStack; the
profile runs in the loop's thread once the worker is polling, the enqueue comes from a thread
started before. No feature's code may run on this path (``Plugin.fields``/``types``).

Only the receive loop's lineage is counted: the task running ``Worker._receive_loop`` and every
task and callback it starts (the poll, the job's ``_process``, the write and message batchers'
flushes its writes schedule). The worker's other loops — the heartbeat (every third of the
visibility timeout), the registry refresh, the metrics flush — share the thread, and on a loaded
machine the window stretched over a heartbeat once (22 modules, ``sqsjobs.config`` among them):
they are not one plain job's path. The lineage is a context variable each new task copies from
where it was created (callbacks run in the context that scheduled them), so it follows the path
through ``call_soon``/``call_later`` too.
"""

from __future__ import annotations

import asyncio
import contextvars
import sys
import threading
import time
from pathlib import Path

import boto3

import sqsjobs
from sqsjobs.job import JobStatus
from sqsjobs.runtime.worker import Worker

PACKAGE = Path(sqsjobs.__file__).resolve().parent
#: The distinct modules the walk may execute: 27 before the kernel (limits/ and workflows/ among
#: them); 29 after its first cut, none of them a feature's, but ten of them store modules; 18 at
#: the start of the round that followed (the App, the ack, verdict, host, batcher, reserved-word,
#: condition, deadline and record-from-a-message modules off the path or folded into their callers;
#: no tracing module without an OpenTelemetry SDK; no scale-in protection outside ECS); 16 then (the
#: typed write and its renderers in one module; a run's claim and finish built in one module, the
#: writes most runs never make apart); 17 with the worker's slot accounting (``runtime/slots.py``:
#: ``concurrency`` bounds handlers, claims and finishes run outside the slots), a concern of its own
#: on every ECS job's path. The target is 12.
MAX_MODULES = 17
FEATURES = ("sqsjobs.limits", "sqsjobs.workflows", "sqsjobs.schedules", "sqsjobs.ingress")
#: The coroutine whose tasks, and everything they start, make up the path.
PATH_ROOT = "Worker._receive_loop"
#: The chain of coroutines that created the running task (or scheduled the running callback).
LINEAGE: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar("walk_lineage", default=())


def lineage_factory(
    loop: asyncio.AbstractEventLoop, coro, context: contextvars.Context | None = None
) -> asyncio.Task:
    """A task factory that extends the creator's lineage with the new task's coroutine."""
    ctx = context if context is not None else contextvars.copy_context()
    name = getattr(coro, "__qualname__", type(coro).__name__)
    ctx.run(LINEAGE.set, (*ctx.get(LINEAGE, ()), name))
    return asyncio.Task(coro, loop=loop, context=ctx)


def walked_modules(app, job_type: str) -> set[str]:
    seen: set[str] = set()

    def profile(frame, event, arg):
        if event == "call" and PATH_ROOT in LINEAGE.get():
            name = frame.f_code.co_filename
            if name.startswith(str(PACKAGE)):
                seen.add(
                    str(Path(name).resolve().relative_to(PACKAGE.parent).with_suffix("")).replace("/", ".")
                )

    go, done = threading.Event(), threading.Event()
    job_ids: list[str] = []
    sqs = boto3.client("sqs", endpoint_url=app.settings.endpoint_url)
    url = sqs.get_queue_url(QueueName=app.settings.queue_name(app.registry.get(job_type).queue))["QueueUrl"]

    def producer() -> None:  # its own thread, started before profiling: the enqueue is not on the path
        go.wait()
        job_ids.append(app.enqueue(job_type, {"n": 1}))
        while True:
            job = app.get(job_ids[0], load_result=False)
            attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
            idle = (
                attrs["ApproximateNumberOfMessagesNotVisible"] == attrs["ApproximateNumberOfMessages"] == "0"
            )
            if job.status is JobStatus.SUCCEEDED and idle:
                break
            time.sleep(0.05)
        done.set()

    threading.Thread(target=producer, daemon=True).start()

    async def main() -> None:
        asyncio.get_running_loop().set_task_factory(lineage_factory)
        worker = Worker(app, concurrency=1)
        stop = asyncio.Event()
        task = asyncio.create_task(worker.run(stop))
        await asyncio.sleep(2.5)  # started and polling
        sys.setprofile(profile)
        go.set()
        await asyncio.to_thread(done.wait, 30)
        sys.setprofile(None)
        stop.set()
        await task

    asyncio.run(main())
    return seen


def test_a_plain_job_walks_few_modules(ministack_url, make_app, monkeypatch):
    # The path without an OpenTelemetry SDK, even when a test before this one in the process installed
    # one (test_observability.py does): the App then decides to make no spans, as without an SDK.
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    # The default lease and visibility timeout (the suite's are 5 s): a lease renewal is the path of a
    # job that runs for a third of its lease, not of this one, and on a loaded machine the suite's
    # short lease let a renewal fall inside the profile (24 modules counted once).
    app = make_app(ministack_url, lease_s=60.0, visibility_timeout_s=30)

    @app.job("plain")
    async def plain(payload, ctx):
        return None

    app.provision()
    seen = walked_modules(app, "plain")
    print(len(seen), sorted(seen))
    assert not [m for m in seen if m.startswith(FEATURES)], sorted(seen)
    assert len(seen) <= MAX_MODULES, sorted(seen)
