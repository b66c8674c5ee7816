"""The thin I/O layer: boto3 and aioboto3 executors of sans-I/O ``Call`` flows.

Each DynamoDB/SQS operation is written once as a generator that yields ``Call`` objects and
receives their responses (or has the AWS error thrown into it). ``run_sync`` and ``run_async``
drive such a flow with boto3 or aioboto3 clients, so the producer API has sync and async twins
without duplicated logic. botocore errors are wrapped here, at the seam.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Generator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar, cast

import boto3
import tenacity
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from sqsjobs.errors import AwsError, EventsError, ObjectStoreError, SchedulerError, StoreError, TransportError

if TYPE_CHECKING:
    from collections.abc import Callable

    from sqsjobs.config import Settings

T = TypeVar("T")

SERVICES = ("dynamodb", "sqs", "scheduler", "s3", "events", "dynamodbstreams")
#: Where a Call goes: an AWS service, or ``clock`` for a pause the driver sleeps through.
Service = Literal["dynamodb", "sqs", "scheduler", "s3", "events", "dynamodbstreams", "clock"]


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


class AsyncRunner(Protocol):
    """Runs a flow with aioboto3 (``App.arun``): what a component needs instead of the whole App."""

    async def __call__(self, flow: Flow[T], /) -> T:
        """Drive ``flow`` to its result."""
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


def wrap_error(service: str, exc: Exception) -> AwsError:
    """Turn a botocore exception into the sqsjobs error for ``service``."""
    kinds: dict[str, type[AwsError]] = {
        "dynamodb": StoreError,
        "scheduler": SchedulerError,
        "s3": ObjectStoreError,
        "events": EventsError,
        "dynamodbstreams": EventsError,
    }
    kind = kinds.get(service, TransportError)
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        code = str(error.get("Code", "Unknown"))
        return kind(f"{service} {code}: {error.get('Message', '')}", code=code, response=exc.response)
    return kind(f"{service} unreachable: {exc}", code="ConnectionError")


#: Connections per client at least (botocore's ``max_pool_connections``: aiohttp's connector limit,
#: urllib3's pool size). A request beyond the limit waits for a free connection (aiohttp) or opens
#: one it then throws away, handshake included (urllib3).
MIN_POOL_CONNECTIONS = 64
#: Connections a worker's client needs besides one per running job: the receive long polls (one per
#: queue, held up to 20 s each), the batched deletes and visibility changes, the heartbeat's
#: renewals and what handlers enqueue.
POOL_HEADROOM = 16


def pool_connections(concurrency: int) -> int:
    """Connections per client for ``concurrency`` jobs at once: each running job has one request in flight."""
    return max(MIN_POOL_CONNECTIONS, concurrency + POOL_HEADROOM)


def _botocore_config(*, validate: bool = False, pool: int = MIN_POOL_CONNECTIONS) -> Config:
    # Standard retry mode backs off on throttling and 5xx; the flows stay safe under a retried write
    # because every write is conditional.
    # CPU per request (profile in docs/bench.md): botocore rebuilds and sanitises its User-Agent from
    # its components twice per request and re-validates every parameter against the service model,
    # about a fifth of the SDK's CPU in a worker. The User-Agent is built once instead (the same
    # string, plus sqsjobs/<version>); parameters come from the tested sans-I/O builders, and AWS
    # validates every request anyway.
    return Config(
        retries={"mode": "standard", "max_attempts": 5},
        connect_timeout=5,
        read_timeout=30,
        max_pool_connections=pool,
        user_agent=_user_agent(),
        parameter_validation=validate,
    )


@functools.cache
def _user_agent() -> str | None:
    """The User-Agent botocore would send from here, computed once (None: let botocore build it)."""
    try:
        from importlib.metadata import version

        from botocore.useragent import UserAgentString

        return f"sqsjobs/{version('sqsjobs')} {UserAgentString.from_environment().to_string()}"
    except Exception:  # an older botocore or a vendored copy without metadata: keep the default
        return None


#: DynamoDB operations that report consumed capacity, and which of them read.
#: https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_ConsumedCapacity.html
CAPACITY_OPERATIONS = frozenset(
    {
        "PutItem",
        "UpdateItem",
        "DeleteItem",
        "GetItem",
        "Query",
        "Scan",
        "BatchGetItem",
        "BatchWriteItem",
        "TransactWriteItems",
        "TransactGetItems",
        "ExecuteStatement",
        "BatchExecuteStatement",
    }
)
READ_OPERATIONS = frozenset({"GetItem", "Query", "Scan", "BatchGetItem", "TransactGetItems"})


def consumed_units(consumed: Any) -> list[tuple[str, float]]:
    """``("table", units)`` and ``("index:<name>", units)`` of a ``ConsumedCapacity`` answer (a list for batch calls).

    ``INDEXES`` asks for the table's share apart; an answer with the total only (MiniStack's
    ``BatchExecuteStatement``) is the table's, less any index it names.
    """
    parts: list[tuple[str, float]] = []
    for entry in consumed if isinstance(consumed, list) else [consumed]:
        indexes = [
            (f"index:{name}", float(used.get("CapacityUnits", 0)))
            for group in ("GlobalSecondaryIndexes", "LocalSecondaryIndexes")
            for name, used in entry.get(group, {}).items()
        ]
        table = entry.get("Table", {}).get("CapacityUnits")
        total = float(entry.get("CapacityUnits", 0))
        parts += [
            ("table", float(table) if table is not None else total - sum(u for _, u in indexes)),
            *indexes,
        ]
    return parts


class RequestCounter:
    """Counts API calls by (service, operation), as the drivers hand them to the SDK.

    ``run_sync``/``run_async`` count each call they make (``add``), not a botocore event hook: a
    handler on ``before-call.*.*`` ran inside every request, on top of the SDK's own dozen, for
    what the driver knows anyway. The count is the same: one per API call, whatever botocore
    retries inside it.

    With ``Settings.measure_capacity`` it also adds up the capacity DynamoDB says each call consumed:
    ``capacity[("write", "table")]``, ``capacity[("write", "index:attention")]``, ``("read", ...)``.
    """

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str]] = Counter()
        self.capacity: dict[tuple[str, str], float] = defaultdict(float)
        self._lock = threading.Lock()

    def add(self, service: str, operation: str) -> None:
        """Record one call of ``operation`` (its API name, e.g. ``UpdateItem``) on ``service``."""
        with self._lock:
            self.counts[(service, operation)] += 1

    def ask_capacity(self, params: dict[str, Any], model: Any, **kwargs: Any) -> None:
        """``before-parameter-build.dynamodb``: request ``ReturnConsumedCapacity=INDEXES``."""
        if model.name in CAPACITY_OPERATIONS:
            params.setdefault("ReturnConsumedCapacity", "INDEXES")

    def add_capacity(self, parsed: Mapping[str, Any], model: Any, **kwargs: Any) -> None:
        """``after-call.dynamodb``: add what the answer says it consumed (a list for batch calls)."""
        consumed = parsed.get("ConsumedCapacity")
        if not consumed:
            return
        kind = "read" if model.name in READ_OPERATIONS else "write"
        with self._lock:
            for part, units in consumed_units(consumed):
                self.capacity[(kind, part)] += units

    def units(self, kind: str = "write", part: str | None = None) -> float:
        """Capacity units consumed of ``kind`` (``write``/``read``) by ``part`` (``table``, ``index:<name>``, None: all)."""
        return sum(v for (k, p), v in self.capacity.items() if k == kind and (part is None or p == part))

    def watch(self, client: Any) -> None:
        """Hook the capacity meter into a DynamoDB client's events (``Settings.measure_capacity``)."""
        client.meta.events.register("before-parameter-build.dynamodb.*", self.ask_capacity)
        client.meta.events.register("after-call.dynamodb.*", self.add_capacity)

    def total(self, service: str | None = None) -> int:
        """Calls made, optionally for one service."""
        return sum(n for (s, _), n in self.counts.items() if service is None or s == service)

    def snapshot(self) -> dict[str, int]:
        """``{"dynamodb.UpdateItem": n, ...}``."""
        return {f"{s}.{o}": n for (s, o), n in sorted(self.counts.items())}

    def reset(self) -> None:
        """Forget all counts."""
        with self._lock:
            self.counts.clear()
            self.capacity.clear()


def _client_kwargs(settings: Settings, service: str) -> dict[str, Any]:
    config = _botocore_config(
        validate=settings.validate_requests, pool=pool_connections(settings.concurrency)
    )
    kwargs: dict[str, Any] = {"region_name": settings.region, "config": config}
    if settings.endpoint_url:
        kwargs["endpoint_url"] = settings.endpoint_url
        if service == "s3":  # an emulator on 127.0.0.1 has no <bucket>.host names: path-style URLs
            kwargs["config"] = config.merge(Config(s3={"addressing_style": "path"}))
    return kwargs


class SyncClients:
    """boto3 clients, created on first use and shared across threads (boto3 clients are thread-safe).

    All of them come from one boto3 session, as the async clients do: a session loads botocore's
    data (endpoints, partitions, service models) once and keeps it, so three clients cost about
    90 ms of CPU instead of 175 ms with a session each (a producer's or a CLI command's start-up).
    A session is not thread-safe, so clients are made under the lock; the clients themselves are.
    """

    def __init__(self, settings: Settings, counter: RequestCounter) -> None:
        self._settings = settings
        self.counter = counter
        self._clients: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._session: Any = None

    def get(self, service: str) -> Any:
        """The client for ``service``."""
        client = self._clients.get(service)
        if client is None:
            with self._lock:
                client = self._clients.get(service)
                if client is None:
                    if self._session is None:
                        self._session = boto3.session.Session()
                    client = self._session.client(service, **_client_kwargs(self._settings, service))
                    if self._settings.measure_capacity and service == "dynamodb":
                        self.counter.watch(client)
                    self._clients[service] = client
        return client

    def close(self) -> None:
        """Close every client's connection pool."""
        for client in self._clients.values():
            client.close()
        self._clients.clear()


class AsyncClients:
    """aioboto3 clients bound to the running event loop, opened on first use."""

    def __init__(self, settings: Settings, counter: RequestCounter) -> None:
        self._settings = settings
        self.counter = counter
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
                import aioboto3  # deferred: producers that never go async do not pay for aiobotocore

                if self._session is None:
                    self._session = aioboto3.Session()
                client = await self._stack.enter_async_context(
                    self._session.client(service, **_client_kwargs(self._settings, service))
                )
                if self._settings.measure_capacity and service == "dynamodb":
                    self.counter.watch(client)
                self._clients[service] = client
        return self._clients[service]

    async def aclose(self) -> None:
        """Close every client."""
        self._clients.clear()
        await self._stack.aclose()
        self._stack = contextlib.AsyncExitStack()


def _api_name(client: Any, method: str) -> str:
    """``UpdateItem`` for ``update_item``: the name AWS (and botocore's events) give the operation."""
    return client.meta.method_to_api_mapping.get(method, method)  # type: ignore[no-any-return]


def run_sync(flow: Flow[T], clients: SyncClients) -> T:
    """Drive ``flow`` with boto3."""
    try:
        call = next(flow)
        while True:
            if call.service == "clock":
                time.sleep(call.params["seconds"])
                call = flow.send(None)
                continue
            try:
                client = clients.get(call.service)
                clients.counter.add(call.service, _api_name(client, call.operation))
                response = getattr(client, call.operation)(**call.params)
                if (
                    call.service == "s3" and "Body" in response
                ):  # S3's GetObject: the flow gets the bytes, not a stream
                    response["Body"] = response["Body"].read()
            except (ClientError, BotoCoreError) as exc:
                call = flow.throw(wrap_error(call.service, exc))
            else:
                call = flow.send(response)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


async def run_async(flow: Flow[T], clients: AsyncClients) -> T:
    """Drive ``flow`` with aioboto3."""
    try:
        call = next(flow)
        while True:
            if call.service == "clock":
                await asyncio.sleep(call.params["seconds"])
                call = flow.send(None)
                continue
            try:
                client = await clients.get(call.service)
                clients.counter.add(call.service, _api_name(client, call.operation))
                response = await getattr(client, call.operation)(**call.params)
                if (
                    call.service == "s3" and "Body" in response
                ):  # S3's GetObject: the flow gets the bytes, not a stream
                    async with response["Body"] as stream:
                        response["Body"] = await stream.read()
            except (ClientError, BotoCoreError) as exc:
                call = flow.throw(wrap_error(call.service, exc))
            else:
                call = flow.send(response)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


def one(call: Call) -> Flow[Any]:
    """A flow of a single call that returns its response."""
    return (yield call)
