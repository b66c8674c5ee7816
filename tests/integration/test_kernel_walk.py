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

Counted honestly: a module counts when one of its functions runs on the path, and also when the
path only reads its data (a constant, an enum, a class used as a value): each executed function's
global names are resolved to the sqsjobs module that defines them. The features are the App's own
plug-in list (``App.kernel.plugins``), not a list kept here; the path is walked at concurrency 1
(each write its single request) and at concurrency 10 (claims and finishes batched).
"""

from __future__ import annotations

import ast
import asyncio
import contextvars
import dis
import sys
import threading
import time
import types
from pathlib import Path

import boto3
import pytest

import sqsjobs
from sqsjobs.app import App
from sqsjobs.job import JobStatus
from sqsjobs.runtime.kernel import features_of
from sqsjobs.runtime.worker import Worker

PACKAGE = Path(sqsjobs.__file__).resolve().parent
#: The distinct modules the walk may execute: 27 before the kernel (limits/ and the workflows among
#: them); 29 after its first cut, none of them a feature's, but ten of them store modules; 18 at
#: the start of the round that followed (the App, the ack, verdict, host, batcher, reserved-word,
#: condition, deadline and record-from-a-message modules off the path or folded into their callers;
#: no tracing module without an OpenTelemetry SDK; no scale-in protection outside ECS); 16 then (the
#: typed write and its renderers in one module; a run's claim and finish built in one module, the
#: writes most runs never make apart); 17 with the worker's slot accounting (``runtime/slots.py``:
#: ``concurrency`` bounds handlers, claims and finishes run outside the slots), a concern of its own
#: on every ECS job's path; 18 at concurrency 10, where claims and finishes leave batched and
#: ``store/statements.py`` renders their PartiQL. A ratchet, not a target: it only comes down.
MAX_MODULES = 18
#: The honest count: those, and the modules whose data alone the path reads (the errors it
#: catches, the job's status enum, the delivery and context records it builds, the condition
#: fragments its writes name): 23, alone and batched, when first counted this way; 24 since a
#: write's two answers, ``Landed`` and ``Refused``, live with ``apply`` in ``store/apply.py``, the one
#: place every writer sends through (a data read on this path: the worker's writes go through
#: ``JobStore``). A ratchet from here.
MAX_MODULES_WITH_DATA = 24
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


def module_of(filename: str) -> str:
    parts = Path(filename).resolve().relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def feature_folders() -> set[str]:
    """The folders of the App's features, read from its ``Feature`` lines: what a plain job must not run."""
    return {folder_of(feature.factory.__module__) for feature in features_of(App)}


def folder_of(module: str) -> str:
    """The folder a module is in (a package's ``__init__`` is its folder)."""
    return module if sys.modules[module].__file__.endswith("__init__.py") else module.rpartition(".")[0]


def imported_names(module: str) -> dict[str, str]:
    """``name`` -> the sqsjobs module it comes from, for each ``from sqsjobs.x import name``."""
    source = Path(sys.modules[module].__file__).read_text()
    found: dict[str, str] = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sqsjobs"):
            for alias in node.names:
                target = f"{node.module}.{alias.name}"
                found[alias.asname or alias.name] = target if target in sys.modules else node.module
    return found


def source_module(module: str, name: str) -> str | None:
    """The sqsjobs module a global ``name`` read in ``module`` belongs to (None: its own, or not ours)."""
    value = vars(sys.modules[module]).get(name)
    if isinstance(value, types.ModuleType):
        return value.__name__ if value.__name__.startswith("sqsjobs.") else None
    return imported_names(module).get(name)


def walked_modules(app, job_type: str, *, jobs: int, concurrency: int) -> tuple[set[str], set[str]]:
    """The modules whose code runs on the path, and those whose data it reads (a global loaded at run time)."""
    executed: set[str] = set()
    globals_read: set[tuple[str, str]] = set()
    loads: dict[types.CodeType, dict[int, str]] = {}

    def global_loads(code: types.CodeType) -> dict[int, str]:
        if code not in loads:
            loads[code] = {
                i.offset: i.argval
                for i in dis.get_instructions(code)
                if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")
            }
        return loads[code]

    def each_opcode(frame, event, arg):
        if event == "opcode" and (name := global_loads(frame.f_code).get(frame.f_lasti)) is not None:
            globals_read.add((frame.f_globals["__name__"], name))
        return each_opcode

    def trace(frame, event, arg):
        if (
            event == "call"
            and PATH_ROOT in LINEAGE.get()
            and frame.f_code.co_filename.startswith(str(PACKAGE))
        ):
            executed.add(module_of(frame.f_code.co_filename))
            frame.f_trace_opcodes = True
            return each_opcode
        return None

    go, done = threading.Event(), threading.Event()
    job_ids: list[str] = []
    sqs = boto3.client("sqs", endpoint_url=app.settings.endpoint_url)
    url = sqs.get_queue_url(QueueName=app.settings.queue_name(app.registry.get(job_type).queue))["QueueUrl"]

    def producer() -> None:  # its own thread, started before profiling: the enqueue is not on the path
        go.wait()
        job_ids.extend(app.enqueue_many([{"type": job_type, "payload": {"n": n}} for n in range(jobs)]))
        while True:
            done_ = all(app.get(i, load_result=False).status is JobStatus.SUCCEEDED for i in job_ids)
            attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
            idle = (
                attrs["ApproximateNumberOfMessagesNotVisible"] == attrs["ApproximateNumberOfMessages"] == "0"
            )
            if done_ and idle:
                break
            time.sleep(0.05)
        done.set()

    threading.Thread(target=producer, daemon=True).start()

    async def main() -> None:
        asyncio.get_running_loop().set_task_factory(lineage_factory)
        worker = Worker(app, concurrency=concurrency)
        stop = asyncio.Event()
        task = asyncio.create_task(worker.run(stop))
        await asyncio.sleep(2.5)  # started and polling
        sys.settrace(trace)
        go.set()
        await asyncio.to_thread(done.wait, 60)
        sys.settrace(None)
        stop.set()
        await task

    asyncio.run(main())
    data = {source_module(module, name) for module, name in globals_read}
    return executed, {m for m in data if m is not None} - executed


@pytest.mark.parametrize(("jobs", "concurrency"), [(1, 1), (10, 10)], ids=["one-alone", "ten-batched"])
def test_a_plain_job_walks_few_modules(ministack_url, make_app, monkeypatch, jobs, concurrency):
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
    features = feature_folders()
    assert len(features) >= 7 and {"sqsjobs.hooks", "sqsjobs.steps", "sqsjobs.events"} <= features, features
    executed, data_only = walked_modules(app, "plain", jobs=jobs, concurrency=concurrency)
    seen = executed | data_only
    print(f"{len(executed)} executed: {sorted(executed)}\n{len(data_only)} read only: {sorted(data_only)}")
    assert not [m for m in seen if folder_of(m) in features], sorted(seen)
    assert len(executed) <= MAX_MODULES, sorted(executed)
    assert len(seen) <= MAX_MODULES_WITH_DATA, sorted(seen)
