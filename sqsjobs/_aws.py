"""The thin I/O layer: boto3 and aiobotocore executors of sans-I/O ``Call`` flows.

Each DynamoDB/SQS operation is written once as a generator that yields ``Call`` objects and
receives their responses (or has the AWS error thrown into it). ``run_sync`` and ``run_async``
drive such a flow with boto3 or aiobotocore clients, so the producer API has sync and async twins
without duplicated logic. botocore errors are wrapped here, at the seam, and, when the App makes
OpenTelemetry spans, each call becomes a CLIENT span inside the current trace
(``JobTracer.call_started``).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import os
import threading
import time
from collections.abc import Generator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Concatenate, Literal, ParamSpec, Protocol, TypeVar, cast, get_args

import tenacity

from sqsjobs._client_config import client_kwargs, pool_connections, share_botocore_data
from sqsjobs.errors import (
    AwsError,
    EncryptionError,
    EventsError,
    ObjectStoreError,
    SchedulerError,
    StoreError,
    TransportError,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine

    from sqsjobs.config import Settings

T = TypeVar("T")
P = ParamSpec("P")

#: Where a Call goes: an AWS service, ``clock`` for a pause the driver sleeps through, or ``flows``
#: for flows the driver runs at once (``together``).
Service = Literal[
    "dynamodb",
    "sqs",
    "scheduler",
    "s3",
    "events",
    "dynamodbstreams",
    "cloudwatch",
    "secretsmanager",
    "kms",
    "clock",
    "flows",
]
#: The AWS services among them (what the drivers make clients for): read from ``Service``, so the two
#: cannot drift apart (each new service was added to both by hand).
SERVICES = tuple(name for name in get_args(Service) if name not in ("clock", "flows"))


@dataclass(frozen=True)
class Call:
    """One AWS API call, described, not made."""

    service: Service
    #: The boto3 client method, e.g. ``update_item``; tests/unit/test_request_shapes.py checks the
    #: parameters each builder makes against botocore's model of it.
    operation: str
    params: Mapping[str, Any]


def sleep_call(seconds: float) -> Call:
    """A pause inside a flow (a retry's backoff); drivers sleep instead of calling AWS."""
    return Call("clock", "sleep", {"seconds": seconds})


#: A sans-I/O operation: yields Calls, receives responses, returns a result.
Flow = Generator[Call, Any, T]


@dataclass(frozen=True)
class Outcome:
    """What one of ``together``'s flows came to: its result, or the exception it raised."""

    value: Any = None
    error: Exception | None = None

    def get(self) -> Any:
        """The result, or the exception raised again."""
        if self.error is not None:
            raise self.error
        return self.value


def together(*flows: Flow[Any]) -> Flow[list[Outcome]]:
    """Run ``flows`` at once and wait for all of them: one round trip of latency for independent calls.

    The sync driver runs the first flow in the caller's thread and the others in the clients' small
    thread pool; the async driver gathers them on the loop. Each flow's exception is its
    ``Outcome``'s, so the caller decides what one failure means for the others (the enqueue: a
    refused send after a landed put).
    """
    outcomes: list[Outcome] = yield Call("flows", "together", {"flows": flows})
    return outcomes


class AsyncRunner(Protocol):
    """Runs a flow with aiobotocore (``App.arun``): what a component needs instead of the whole App."""

    async def __call__(self, flow: Flow[T], /) -> T:
        """Drive ``flow`` to its result."""
        ...


#: The contexts of the other writers whose writes the call being made carries (a worker's batched
#: DynamoDB request, ``store/write_batcher.py``): the tracer gives each of their runs a span of the
#: request too. Empty for every other call.
CARRIED_FOR: contextvars.ContextVar[tuple[contextvars.Context, ...]] = contextvars.ContextVar(
    "sqsjobs_carried_for", default=()
)


class CallMeter(Protocol):
    """What the drivers count calls with (``sqsjobs.observability.metrics.RequestCounter``)."""

    def add(self, service: str, operation: str) -> None:
        """One call of ``operation`` on ``service``."""

    def watch(self, client: Any) -> None:
        """Meter a new DynamoDB client's consumed capacity."""


class CallTracer(Protocol):
    """Makes a driver's calls spans (``sqsjobs.observability.spans.JobTracer``; a Protocol, so this seam imports no tracing)."""

    def call_started(self, call: Call, api_name: str, region: str | None) -> Any:
        """A handle for ``call`` (None: no span)."""
        ...

    def call_ended(
        self, handle: Any, response: Mapping[str, Any] | None, error: BaseException | None
    ) -> None:
        """End what ``call_started`` began."""
        ...


def retrying(attempt: Callable[[], Flow[T]], policy: tenacity.Retrying) -> Flow[T]:
    """Run the flow ``attempt()`` again for as long as ``policy`` says, waiting through the driver.

    tenacity decides: its stop, wait and retry strategies and what to do when attempts run out
    (``retry_error_callback``, ``reraise``), through its state machine ``Retrying.iter``. Its own
    ``sleep`` is never called, because a flow must not block: each wait becomes a ``sleep_call``
    that the driver performs (``time.sleep`` or ``asyncio.sleep``).
    """
    policy = policy.copy()  # its own statistics: one module-level policy serves concurrent flows
    policy.begin()
    state = tenacity.RetryCallState(policy, fn=None, args=(), kwargs={})
    while True:
        do = policy.iter(state)
        if isinstance(do, tenacity.DoAttempt):
            try:
                result = yield from attempt()
            except Exception as exc:  # an AWS error thrown into the flow by the driver, among others
                state.set_exception((type(exc), exc, exc.__traceback__))
            else:
                state.set_result(result)
        elif isinstance(do, tenacity.DoSleep):
            state.prepare_for_next_attempt()
            if do > 0:  # tenacity's default wait is 0: try again at once, no clock call
                yield sleep_call(float(do))
        else:
            return cast("T", do)


def sdk_errors() -> tuple[type[Exception], ...]:
    """The botocore exceptions the drivers turn into sqsjobs errors (``wrap_error``).

    Imported here, not at the top: ``import sqsjobs`` (a web app that only defines jobs, the CLI's
    ``--help``) must not pay for botocore, about a third of the import, until a client is made.
    ``except sdk_errors()`` evaluates only when an exception reaches it, by which time a client,
    and with it botocore, exists.
    """
    from botocore.exceptions import BotoCoreError, ClientError

    return (ClientError, BotoCoreError)


def wrap_error(service: str, exc: Exception) -> AwsError:
    """Turn a botocore exception into the sqsjobs error for ``service``."""
    from botocore.exceptions import ClientError

    kinds: dict[str, type[AwsError]] = {
        "dynamodb": StoreError,
        "scheduler": SchedulerError,
        "s3": ObjectStoreError,
        "events": EventsError,
        "dynamodbstreams": EventsError,
        "kms": EncryptionError,
    }
    kind = kinds.get(service, TransportError)
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        code = str(error.get("Code", "Unknown"))
        return kind(f"{service} {code}: {error.get('Message', '')}", code=code, response=exc.response)
    return kind(f"{service} unreachable: {exc}", code="ConnectionError")


class SyncClients:
    """boto3 clients, created on first use and shared across threads (boto3 clients are thread-safe).

    All of them come from one boto3 session, as the async clients do: a session loads botocore's
    data (endpoints, partitions, service models) once and keeps it, so three clients cost about
    90 ms of CPU instead of 175 ms with a session each (a producer's or a CLI command's start-up).
    A session is not thread-safe, so clients are made under the lock; the clients themselves are.
    """

    def __init__(self, settings: Settings, counter: CallMeter, *, tracer: CallTracer | None = None) -> None:
        self._settings = settings
        self.counter = counter
        #: Makes each call a CLIENT span (None: no SDK, no span, one test per call).
        self.tracer = tracer
        self._clients: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._session: Any = None
        #: The botocore session under ``_session``: where region and retries are read from.
        self._botocore: Any = None
        self._pool: ThreadPoolExecutor | None = None
        self._pool_pid = 0

    def pool(self) -> ThreadPoolExecutor:
        """The threads ``together`` runs its other flows in, made on first use and reused.

        As large as a client's connection pool: a web server's threads that enqueue at once each
        hand it one flow, and a flow waiting for a thread would cost the round trip it should save.
        Threads start only as needed.
        """
        if self._pool is None or self._pool_pid != os.getpid():
            with self._lock:
                # A forked child (a pre-forking web server) inherits the pool but not its threads.
                if self._pool is None or self._pool_pid != os.getpid():
                    self._pool_pid = os.getpid()
                    self._pool = ThreadPoolExecutor(
                        max_workers=pool_connections(self._settings.concurrency),
                        thread_name_prefix="sqsjobs-together",
                    )
        return self._pool

    def get(self, service: str) -> Any:
        """The client for ``service``."""
        client = self._clients.get(service)
        if client is None:
            with self._lock:
                client = self._clients.get(service)
                if client is None:
                    if self._session is None:
                        # Deferred, as botocore is (``sdk_errors``): only a client pays for boto3.
                        import boto3.session
                        import botocore.session

                        self._botocore = share_botocore_data(botocore.session.get_session())
                        self._session = boto3.session.Session(botocore_session=self._botocore)
                    kwargs = client_kwargs(self._settings, service, self._botocore)
                    client = self._session.client(service, **kwargs)
                    if self._settings.measure_capacity and service == "dynamodb":
                        self.counter.watch(client)
                    self._clients[service] = client
        return client

    def close(self) -> None:
        """Close every client's connection pool, and the threads of ``together``."""
        for client in self._clients.values():
            client.close()
        self._clients.clear()
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None


class AsyncClients:
    """aiobotocore clients bound to the running event loop, opened on first use."""

    def __init__(self, settings: Settings, counter: CallMeter, *, tracer: CallTracer | None = None) -> None:
        self._settings = settings
        self.counter = counter
        #: Makes each call a CLIENT span (None: no SDK, no span, one test per call).
        self.tracer = tracer
        self._stack = contextlib.AsyncExitStack()
        self._clients: dict[str, Any] = {}
        self._lock: asyncio.Lock | None = None
        self._session: Any = None

    async def get(self, service: str) -> Any:
        """The client for ``service``."""
        existing = self._clients.get(service)
        if existing is not None:
            return existing
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if service not in self._clients:
                # Deferred: producers that never go async do not pay for aiobotocore. Its own session
                # (what aioboto3 only wrapped): the same credential and region chain as botocore's.
                from aiobotocore.session import get_session

                if self._session is None:
                    self._session = share_botocore_data(get_session())
                client = await self._stack.enter_async_context(
                    self._session.create_client(
                        service, **client_kwargs(self._settings, service, self._session)
                    )
                )
                if self._settings.measure_capacity and service == "dynamodb":
                    self.counter.watch(client)
                self._clients[service] = client
        return self._clients[service]

    async def run(self, flow: Flow[T]) -> T:
        """Drive ``flow`` with these clients (``run_async``): the kernel's ``arun``."""
        return await run_async(flow, self)

    async def aclose(self) -> None:
        """Close every client; the next call opens new ones, on whichever loop is running then.

        The lock and the session go too: both belong to the loop that closed, so the same object
        serves a later ``asyncio.run`` (the kernel keeps this object, not the App's attribute).
        """
        self._clients.clear()
        self._lock = None
        self._session = None
        await self._stack.aclose()
        self._stack = contextlib.AsyncExitStack()


def _api_name(client: Any, method: str) -> str:
    """``UpdateItem`` for ``update_item``: the name AWS (and botocore's events) give the operation."""
    return client.meta.method_to_api_mapping.get(method, method)  # type: ignore[no-any-return]


def _botocore_traced() -> bool:
    """True when OpenTelemetry's botocore instrumentation wraps every boto3 call: it makes the span then.

    Its wrapper (``wrapt``) sets ``__wrapped__`` on ``BaseClient._make_api_call``; aiobotocore's
    client overrides that method, so the async driver's calls are never wrapped and always get ours.
    """
    from botocore.client import BaseClient

    return hasattr(getattr(BaseClient, "_make_api_call", None), "__wrapped__")


def run_sync(flow: Flow[T], clients: SyncClients) -> T:
    """Drive ``flow`` with boto3."""
    try:
        call = next(flow)
        while True:
            if call.service == "clock":
                time.sleep(call.params["seconds"])
                call = flow.send(None)
                continue
            if call.service == "flows":
                call = flow.send(_together_sync(call.params["flows"], clients))
                continue
            span = None
            try:
                client = clients.get(call.service)
                api_name = _api_name(client, call.operation)
                clients.counter.add(call.service, api_name)
                if clients.tracer is not None and not _botocore_traced():
                    span = clients.tracer.call_started(call, api_name, client.meta.region_name)
                response = getattr(client, call.operation)(**call.params)
                if (
                    call.service == "s3" and "Body" in response
                ):  # S3's GetObject: the flow gets the bytes, not a stream
                    response["Body"] = response["Body"].read()
            except sdk_errors() as exc:
                if span is not None:
                    clients.tracer.call_ended(span, getattr(exc, "response", None), exc)  # type: ignore[union-attr]
                call = flow.throw(wrap_error(call.service, exc))
            else:
                if span is not None:
                    clients.tracer.call_ended(span, response, None)  # type: ignore[union-attr]
                call = flow.send(response)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


async def run_async(flow: Flow[T], clients: AsyncClients) -> T:
    """Drive ``flow`` with aiobotocore.

    A cancellation while a call is in flight is thrown into the flow where it waits, not left to
    close it: a flow that holds something (a DLQ scan's hidden messages) hands it back with calls
    of its own before it re-raises, which a closed generator could not do. A ReceiveMessage in
    flight is first let finish (a second at most: the scans' polls are short) and its answer given
    to the flow: SQS may have hidden messages for it already, which only that answer names.
    """
    try:
        call = next(flow)
        while True:
            try:
                if call.operation == "receive_message":
                    outcome, cancelled = await _settled(asyncio.ensure_future(_call_async(call, clients)))
                else:
                    outcome, cancelled = await _call_async(call, clients), None
            except asyncio.CancelledError as exc:
                call = flow.throw(exc)
                continue
            if cancelled is not None:  # the flow reads the answer, then hears of it where it waits next
                with contextlib.suppress(Exception):  # (the flow ended on it: the cancellation stands)
                    flow.send(outcome.value) if outcome.error is None else flow.throw(outcome.error)
                call = flow.throw(cancelled)
                continue
            call = flow.send(outcome.value) if outcome.error is None else flow.throw(outcome.error)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


async def _settled(call: asyncio.Future[Outcome]) -> tuple[Outcome, asyncio.CancelledError | None]:
    """Await ``call`` to its end even if cancelled meanwhile; its outcome, and that cancellation."""
    cancelled = None
    while True:
        try:
            return await asyncio.shield(call), cancelled
        except asyncio.CancelledError as exc:
            if call.cancelled():
                raise
            cancelled = exc


async def _call_async(call: Call, clients: AsyncClients) -> Outcome:
    """Make one call: its response, or the AWS error (wrapped) to throw into the flow."""
    if call.service == "clock":
        await asyncio.sleep(call.params["seconds"])
        return Outcome(value=None)
    if call.service == "flows":
        return Outcome(value=await _together_async(call.params["flows"], clients))
    span = None
    try:
        client = await clients.get(call.service)
        api_name = _api_name(client, call.operation)
        clients.counter.add(call.service, api_name)
        if clients.tracer is not None:
            span = clients.tracer.call_started(call, api_name, client.meta.region_name)
        response = await getattr(client, call.operation)(**call.params)
        if (
            call.service == "s3" and "Body" in response
        ):  # S3's GetObject: the flow gets the bytes, not a stream
            async with response["Body"] as stream:
                response["Body"] = await stream.read()
    except sdk_errors() as exc:
        if span is not None:
            clients.tracer.call_ended(span, getattr(exc, "response", None), exc)  # type: ignore[union-attr]
        return Outcome(error=wrap_error(call.service, exc))
    except asyncio.CancelledError as exc:
        if span is not None:
            clients.tracer.call_ended(span, None, exc)  # type: ignore[union-attr]
        raise
    if span is not None:
        clients.tracer.call_ended(span, response, None)  # type: ignore[union-attr]
    return Outcome(value=response)


#: Set in a thread of the pool while it runs a flow: a ``together`` inside runs its flows in turn
#: there, so nested flows can never wait for threads held by the flows that wait for them.
_in_pool = threading.local()


def _outcome_sync(flow: Flow[Any], clients: SyncClients) -> Outcome:
    try:
        return Outcome(value=run_sync(flow, clients))
    except Exception as exc:
        return Outcome(error=exc)


def _pooled(flow: Flow[Any], clients: SyncClients) -> Outcome:
    _in_pool.active = True
    try:
        return _outcome_sync(flow, clients)
    finally:
        _in_pool.active = False


def _together_sync(flows: Sequence[Flow[Any]], clients: SyncClients) -> list[Outcome]:
    """Run ``flows`` at once: the first here, the others in the clients' pool.

    Each pooled flow runs in a copy of this thread's context, so the caller's trace and span carry over.
    """
    if len(flows) < 2 or getattr(_in_pool, "active", False):
        return [_outcome_sync(f, clients) for f in flows]
    pool = clients.pool()
    futures = [pool.submit(contextvars.copy_context().run, _pooled, f, clients) for f in flows[1:]]
    first = _outcome_sync(flows[0], clients)
    return [first, *(future.result() for future in futures)]


async def _together_async(flows: Sequence[Flow[Any]], clients: AsyncClients) -> list[Outcome]:
    """Run ``flows`` at once on the loop."""
    results = await asyncio.gather(*(run_async(f, clients) for f in flows), return_exceptions=True)
    outcomes: list[Outcome] = []
    for result in results:
        if isinstance(result, Exception):
            outcomes.append(Outcome(error=result))
        elif isinstance(result, BaseException):  # a cancellation: the caller's, not a flow's
            raise result
        else:
            outcomes.append(Outcome(value=result))
    return outcomes


def one(call: Call) -> Flow[Any]:
    """A flow of a single call that returns its response."""
    return (yield call)


class FlowRunner(Protocol):
    """What drives a verb's flow: ``run`` with boto3, ``arun`` with aiobotocore (an App, a ``Kernel``)."""

    def run(self, flow: Flow[T], /) -> T:
        """Drive ``flow`` with boto3."""
        ...

    async def arun(self, flow: Flow[T], /) -> T:
        """Drive ``flow`` with aiobotocore."""
        ...


R = TypeVar("R", bound=FlowRunner)
V = TypeVar("V", bound="Callable[..., Any]")


def sync_verb(flow: Callable[Concatenate[R, P], Flow[T]]) -> Callable[Concatenate[R, P], T]:
    """The blocking twin of a verb written once as a flow method, named in a class body as ``get``.

    With ``async_verb`` it is the one way a public verb gets its sync and async forms, so the two
    cannot drift: both run the same flow, one with boto3, one with aiobotocore.
    """

    def verb(self: R, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self.run(flow(self, *args, **kwargs))

    return _named(verb, flow, "")


def async_verb(
    flow: Callable[Concatenate[R, P], Flow[T]],
) -> Callable[Concatenate[R, P], Coroutine[Any, Any, T]]:
    """The awaitable twin of a verb written once as a flow method, as ``sync_verb`` makes the blocking one."""

    async def verb(self: R, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await self.arun(flow(self, *args, **kwargs))

    return _named(verb, flow, "Async: ")


def _named(verb: V, flow: Callable[..., Any], prefix: str) -> V:
    """The flow method's docstring and signature on its twin (``help()`` and IDEs read them)."""
    verb.__doc__ = prefix + (flow.__doc__ or "")
    verb.__wrapped__ = flow  # type: ignore[attr-defined]
    verb.__qualname__ = flow.__qualname__
    return verb
