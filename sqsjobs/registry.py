"""Handler registry: ``@registry.job("name")`` records a HandlerSpec and returns the function unchanged.

A job type's payload schema has a version (``@job(version=3)``), written with every job. A worker
whose handler is newer than a payload brings it up to date with the type's upcast steps
(``upcast={1: v1_to_v2, 2: v2_to_v3}``) before validating it (``HandlerSpec.load``); the record
and the message keep the payload as it was enqueued. See docs/payloads.md.
"""

from __future__ import annotations

import copy
import inspect
import typing
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, TypeAlias, TypeVar

from pydantic import AfterValidator, TypeAdapter, ValidationError, WithJsonSchema

from sqsjobs.config import to_seconds
from sqsjobs.context import JobContext
from sqsjobs.envelope import DEEP_PAYLOAD, payload_depth_error
from sqsjobs.errors import (
    ConfigurationError,
    DuplicateHandler,
    HandlerNotFound,
    PayloadInvalid,
    UpcastError,
)
from sqsjobs.options import (
    DEDUPE_MODES,
    BatchItem,
    BatchOptions,
    Hooks,
    KeyPolicy,
    P,
    PayloadVersion,
    Upcast,
    checked_events,
)
from sqsjobs.retry import RetryPolicy

if typing.TYPE_CHECKING:
    from datetime import timedelta

Handler = Callable[..., Any]
#: A handler ``fn(payload: P, ctx) -> R``, sync or async: what producers may pass instead of the
#: type name, so that mypy checks the payload against the handler's annotation.
HandlerOf: TypeAlias = Callable[[P, JobContext], Any]
#: Any handler; the decorator returns it with its own type, so its signature reaches the type checker.
H = TypeVar("H", bound=Handler)
#: The job types sqsjobs registers in every App itself (``Registry.add_built_in``) are named with it.
BUILT_IN_PREFIX = "sqsjobs."
#: Defaults for ``@job`` options; settings-wide values live in ``sqsjobs.config``.
DEFAULT_QUEUE = "default"
DEFAULT_MAX_ATTEMPTS = 5
DEFAULT_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class HandlerSpec:
    """Everything the framework knows about one job type."""

    #: Stable name that travels in messages and records; never derived from the function's module.
    name: str
    fn: Handler
    queue: str = DEFAULT_QUEUE
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    #: ``@job(timeout=...)``; None leaves the run's length to the runtime: ``DEFAULT_TIMEOUT_S`` in
    #: the ECS worker, the invocation's remaining time on Lambda (which may be shorter than the
    #: default, and must still run the job: docs/lambda.md).
    explicit_timeout_s: float | None = None
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    #: Version of the payload schema written with each job.
    version: int = 1
    #: The type's default priority level (``"high"``/``"low"``; None is normal); an enqueue's wins.
    priority: str | None = None
    #: The payload's type, from the handler's first parameter annotation (Any when unannotated).
    payload_type: Any = Any
    #: ``upcasts[n]`` turns a version-n payload into a version n + 1 one, for every n from the oldest
    #: version still read up to ``version - 1`` (checked by ``@job``). Empty: an older payload is
    #: validated as it is. Left out of the hash, so a spec stays hashable.
    upcasts: Mapping[int, Upcast] = field(default_factory=dict, hash=False)
    #: ``@job(expires_after=...)``: a job not started this long after its enqueue expires, never
    #: runs. Applied by the worker from the record's ``created_at`` too, so a producer without the
    #: handler code (which cannot know it) never weakens it. None: jobs of the type never expire.
    expires_after_s: float | None = None
    #: Names of the fleet-wide limits (``app.limit``) its jobs start under; see ``sqsjobs.limits``.
    limits: tuple[str, ...] = ()
    #: ``app.limits.pause`` can stop it (always true under a limit): its worker reads a pause item through
    #: a short cache, a read the types that are neither limited nor pausable never pay.
    pausable: bool = False
    #: The type's default dedup mode for an enqueue with an idempotency key (an enqueue's own wins):
    #: ``DedupeFor``, ``Throttle``, ``WhileActive`` or ``Debounce``; see docs/dedupe.md.
    dedupe: KeyPolicy | None = None
    #: ``@job(events=...)``: the events its jobs publish when they end (``JOB_EVENTS`` names); None:
    #: the App's ``events`` setting decides (docs/events.md).
    events: frozenset[str] | None = None
    #: ``@job(hooks=Hooks(on_dead=..., on_succeeded=...))``: the job types enqueued with the finish,
    #: in its transaction, when a job of this type dies or succeeds (``sqsjobs.hooks``; docs/events.md).
    hooks: Hooks = field(default_factory=Hooks)
    #: ``@job(batch=...)``: the handler takes a list of ``BatchItem`` and returns an outcome per job.
    batch: BatchOptions | None = None
    #: ``app.external(...)``: no Python handler; HTTP workers in any language lease its jobs
    #: (``sqsjobs.remote``, docs/http-workers.md) from its queue, which no Python worker receives.
    external: bool = False
    #: ``@job(version=PayloadVersion(n, encrypt=key))``: the KMS key of its payloads and results, over the
    #: App's ``encrypt`` (``sqsjobs.store.sealing.key_of``).
    encrypt: str | None = None

    @property
    def timeout_s(self) -> float:
        """How long a run may take in the ECS worker: the explicit timeout, else ``DEFAULT_TIMEOUT_S``."""
        return self.run_timeout_s(DEFAULT_TIMEOUT_S)

    def run_timeout_s(self, default_s: float) -> float:
        """How long a run may take: the explicit timeout, else the runtime's ``default_s``.

        The handler is cancelled (async) or abandoned (sync, its thread cannot be killed) after it.
        """
        return default_s if self.explicit_timeout_s is None else self.explicit_timeout_s

    @property
    def is_async(self) -> bool:
        """True for ``async def`` handlers (run on the loop, not in a thread)."""
        return inspect.iscoroutinefunction(self.fn)

    @property
    def _adapter(self) -> TypeAdapter[Any]:
        return _adapter_for(self.payload_type)

    def validate(self, payload: Any) -> Any:
        """Turn stored JSON into the handler's argument; ``PayloadInvalid`` says what is wrong."""
        try:
            return self._adapter.validate_python(payload)
        except ValidationError as exc:
            raise PayloadInvalid(f"payload for {self.name!r} does not validate: {_summarise(exc)}") from exc

    def upgrade(self, payload: Any, version: int) -> Any:
        """A stored payload of ``version`` brought to the handler's version by the upcast steps.

        Returned as it is when it is current, or when the type has no upcasts. A payload *newer*
        than the handler is the caller's to handle (the worker parks it for a newer worker). The
        steps work on a copy: the job keeps the payload as it was enqueued.

        Raises:
            UpcastError: no step starts at ``version``, or a step raised; its ``reason`` names which.
        """
        if not self.upcasts or version >= self.version:
            return payload
        if version not in self.upcasts:
            raise UpcastError(
                f"payload version {version} of {self.name!r} is older than its oldest upcast step "
                f"({min(self.upcasts)}→{min(self.upcasts) + 1}): it cannot be brought to version {self.version}",
                reason=f"no upcast from version {version}",
            )
        data = copy.deepcopy(payload)
        for step in range(version, self.version):
            try:
                data = self.upcasts[step](data)
            except Exception as exc:
                raise UpcastError(
                    f"upcast {step}→{step + 1} of {self.name!r} failed: {type(exc).__name__}: {exc}",
                    reason=f"payload upcast {step}→{step + 1} failed",
                ) from exc
        return data

    def load(self, payload: Any, version: int) -> Any:
        """A stored payload of ``version`` as the handler's argument: upgraded (``upgrade``), then validated.

        What the worker, ``sqsjobs.testing.run_job`` and an operator's retry or replay all apply.

        Raises:
            PayloadInvalid: it does not validate (``UpcastError``: it could not be upgraded).
        """
        upgraded = self.upgrade(payload, version)
        try:
            return self.validate(upgraded)
        except PayloadInvalid as exc:
            if upgraded is payload:
                raise
            raise PayloadInvalid(f"{exc} (after upcasting it from version {version})") from exc

    def dump(self, payload: Any) -> Any:
        """Validate a producer's payload and return its JSON-compatible form (what is stored)."""
        value = self.validate(payload)
        try:
            return self._adapter.dump_python(value, mode="json")
        except ValueError:  # pydantic serializes at most 254 levels: say so, and what to do
            problem = payload_depth_error(payload)
            if problem is None:
                raise
            raise PayloadInvalid(f"payload for {self.name!r}: {problem}", reason=DEEP_PAYLOAD) from None


_ADAPTERS: dict[int, TypeAdapter[Any]] = {}


def _adapter_for(tp: Any) -> TypeAdapter[Any]:
    key = id(tp)
    adapter = _ADAPTERS.get(key)
    if adapter is None:
        adapter = _ADAPTERS[key] = TypeAdapter(tp)
    return adapter


def _summarise(exc: ValidationError) -> str:
    parts = [f"{'.'.join(str(p) for p in e['loc']) or '<root>'}: {e['msg']}" for e in exc.errors()[:5]]
    return "; ".join(parts)


def _checked_upcasts(name: str, version: int, upcast: Mapping[int, Upcast] | None) -> dict[int, Upcast]:
    """The upcast steps of ``@job(version=PayloadVersion(...))``, or ``ConfigurationError`` saying what is wrong.

    Keys are versions 1..``version - 1`` with no gap up to ``version - 1`` (a payload older than the
    first key is refused by the worker, which is how a version is retired); values are callables.
    """
    steps = dict(upcast or {})
    for key, fn in steps.items():
        if isinstance(key, bool) or not isinstance(key, int) or not 1 <= key < version:
            raise ConfigurationError(
                f"job {name!r} (version {version}): upcast key {key!r} is not a version from 1 to "
                f"{version - 1}; upcast[n] turns a version-n payload into a version n+1 one"
            )
        if not callable(fn):
            raise ConfigurationError(f"job {name!r}: upcast[{key}] is not callable ({fn!r})")
    missing = [n for n in range(min(steps, default=version), version) if n not in steps]
    if missing:
        raise ConfigurationError(
            f"job {name!r} (version {version}): upcast lacks the step "
            + ", ".join(f"{n}→{n + 1}" for n in missing)
            + f"; give upcast[{missing[0]}] (steps must run without a gap up to version {version})"
        )
    return steps


def _runs_elsewhere(name: str) -> Handler:
    """The stand-in handler of an external type: a Python worker never calls it (its queue is not theirs)."""

    def runs_elsewhere(payload: Any, ctx: JobContext) -> Any:
        raise ConfigurationError(
            f"job type {name!r} is external: HTTP workers lease its jobs (POST /leases), Python workers do not run it"
        )

    return runs_elsewhere


def payload_type_of(name: str, payload: Any) -> Any:
    """The payload type of an external type: pydantic's own, or a JSON Schema given as a ``dict``.

    A JSON Schema is checked with ``jsonschema`` (the ``sqsjobs[jsonschema]`` extra, in ``api``) and
    is what the OpenAPI document shows for the type.
    """
    if payload is None:
        return Any
    if not isinstance(payload, Mapping):
        return payload
    try:
        import jsonschema
    except ImportError as exc:  # pragma: no cover - the api extra installs it
        raise ConfigurationError(
            f"job {name!r}: a JSON Schema payload needs the jsonschema package: pip install 'sqsjobs[jsonschema]'"
        ) from exc
    schema = dict(payload)
    try:
        validator_class = jsonschema.validators.validator_for(schema)
        validator_class.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise ConfigurationError(f"job {name!r}: payload is not a valid JSON Schema: {exc.message}") from exc
    validator = validator_class(schema)

    def conforms(value: Any) -> Any:
        error = jsonschema.exceptions.best_match(validator.iter_errors(value))
        if error is not None:
            where = "/".join(str(p) for p in error.absolute_path) or "<root>"
            raise ValueError(f"{where}: {error.message}")
        return value

    return Annotated[Any, AfterValidator(conforms), WithJsonSchema(schema)]


def _payload_type(fn: Handler) -> Any:
    params = list(inspect.signature(fn).parameters.values())
    if not params:
        raise TypeError(f"handler {fn.__qualname__} must accept (payload, ctx)")
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # unresolved forward references: validate nothing rather than refuse to start
        hints = {}
    return hints.get(params[0].name, Any)


def _item_type(fn: Handler) -> Any:
    """A batch handler's payload type: ``P`` of its ``list[BatchItem[P]]`` parameter (Any if unsaid)."""
    items = _payload_type(fn)
    for arg in typing.get_args(items):  # list[BatchItem[P]], Sequence[BatchItem[P]]
        if typing.get_origin(arg) is BatchItem:
            return typing.get_args(arg)[0]
    return Any


def _options(
    name: str,
    *,
    queue: str,
    max_attempts: int,
    timeout: timedelta | float | None,
    retry: RetryPolicy | None,
    version: int | PayloadVersion,
    expires_after: timedelta | float | None,
    limits: Sequence[str],
    pausable: bool,
    priority: str | None,
    dedupe: KeyPolicy | None,
    hooks: Hooks | None,
) -> dict[str, Any]:
    """A job type's options, checked (``ConfigurationError`` at import), as ``HandlerSpec`` fields."""
    if dedupe is not None and not isinstance(dedupe, KeyPolicy):
        raise ConfigurationError(f"job {name!r}: dedupe={dedupe!r}: {DEDUPE_MODES}")
    if hooks is not None and not isinstance(hooks, Hooks):
        raise ConfigurationError(
            f"job {name!r}: hooks={hooks!r}: give Hooks(on_dead=..., on_succeeded=..., events=...)"
        )
    hooks = hooks or Hooks()
    chosen = checked_events(name, hooks.events)
    versioned = version if isinstance(version, PayloadVersion) else PayloadVersion(version)
    expires_after_s = None if expires_after is None else to_seconds(expires_after)
    if expires_after_s is not None and not expires_after_s > 0:
        raise ConfigurationError(f"job {name!r}: expires_after must be positive, got {expires_after!r}")
    if max_attempts < 1:
        raise ValueError(f"max_attempts must be at least 1, got {max_attempts}")
    if priority not in (None, "high", "normal", "low"):
        raise ValueError(f"priority must be 'high', 'normal' or 'low', got {priority!r}")
    upcasts = _checked_upcasts(name, versioned.number, versioned.upcast)
    policy = retry or RetryPolicy()
    return {
        "name": name,
        "queue": queue,
        "max_attempts": max_attempts,
        "explicit_timeout_s": None if timeout is None else to_seconds(timeout),
        "retry": policy,
        "version": versioned.number,
        "upcasts": upcasts,
        "encrypt": versioned.encrypt or None,
        "expires_after_s": expires_after_s,
        "limits": tuple(limits),
        "pausable": pausable or bool(limits),
        "priority": priority,
        "dedupe": dedupe,
        "events": chosen,
        "hooks": hooks,
    }


class Registry:
    """Job types by name; composes with ``include``."""

    def __init__(self) -> None:
        self._specs: dict[str, HandlerSpec] = {}
        #: sqsjobs' own types (``sqsjobs.notify``): found by ``get``, never listed, counted or included.
        self._built_in: dict[str, HandlerSpec] = {}

    def job(
        self,
        name: str,
        *,
        queue: str = DEFAULT_QUEUE,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        timeout: timedelta | float | None = None,
        retry: RetryPolicy | None = None,
        version: int | PayloadVersion = 1,
        expires_after: timedelta | float | None = None,
        limits: Sequence[str] = (),
        pausable: bool = False,
        priority: str | None = None,
        dedupe: KeyPolicy | None = None,
        hooks: Hooks | None = None,
        batch: BatchOptions | None = None,
    ) -> Callable[[H], H]:
        """Register a handler ``fn(payload, ctx)``; the function itself is returned unchanged.

        Without ``timeout`` a run gets ``DEFAULT_TIMEOUT_S`` in the ECS worker and the invocation's
        remaining time on Lambda; give one only when the job must be cut off sooner.

        ``version`` is the payload schema's version, stamped on every job enqueued with this
        handler; ``PayloadVersion(n, upcast=...)`` adds the steps that upgrade older payloads
        (``HandlerSpec.load``). A missing step raises ``ConfigurationError`` here, at import.

        ``expires_after``: a job of this type not started this long after its enqueue ends
        ``expired`` and never runs (an enqueue's own ``expires_after`` wins; docs/flow-control-expiry.md).
        ``limits`` names ``app.limit`` declarations its jobs start under (an unknown name is a
        ``ConfigurationError`` when a worker starts); ``pausable`` lets ``app.limits.pause`` stop a type
        that is under no limit (docs/flow-control-limits.md).

        ``dedupe``: ``DedupeFor(window)``, ``Throttle(window)``, ``WhileActive()`` or
        ``Debounce(quiet, max=)``, the type's default dedup mode for an enqueue with an idempotency
        key (docs/dedupe.md).
        ``hooks``: ``Hooks(on_dead=, on_succeeded=, events=)``, what a job's end sets off: job types
        run with its summary (``sqsjobs.hooks``) and the events it publishes on the App's
        ``event_bus`` (docs/events.md). ``retry``: the backoff, and
        ``RetryPolicy(max_age_s=)`` to stop retrying a job older than that. ``batch``: the
        handler is ``fn(items: list[BatchItem[P]])`` and runs many jobs per call (docs/batch-handlers.md).
        """
        options = _options(
            name,
            queue=queue,
            max_attempts=max_attempts,
            timeout=timeout,
            retry=retry,
            version=version,
            expires_after=expires_after,
            limits=limits,
            pausable=pausable,
            priority=priority,
            dedupe=dedupe,
            hooks=hooks,
        )

        def register(fn: H) -> H:
            payload_type = _item_type(fn) if batch is not None else _payload_type(fn)
            self.add(HandlerSpec(fn=fn, payload_type=payload_type, batch=batch, **options))
            return fn

        return register

    def external(
        self,
        name: str,
        *,
        queue: str,
        payload: Any = None,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        timeout: timedelta | float | None = None,
        retry: RetryPolicy | None = None,
        version: int = 1,
        expires_after: timedelta | float | None = None,
        limits: Sequence[str] = (),
        pausable: bool = False,
        priority: str | None = None,
        dedupe: KeyPolicy | None = None,
        hooks: Hooks | None = None,
    ) -> None:
        """Declare a job type whose handler runs outside this process: in an HTTP worker, any language.

        Python producers enqueue it validated against ``payload`` (a pydantic model or any type
        pydantic reads, or a JSON Schema as a ``dict``; None: any JSON), and ``GET /types`` lists
        it; its jobs go to ``queue``, which carries external types only, so no Python worker ever
        receives one. HTTP workers lease them (``POST /leases``, docs/http-workers.md); every other
        option means what it means for ``job``, enforced by the server that hands the jobs out.
        """
        options = _options(
            name,
            queue=queue,
            max_attempts=max_attempts,
            timeout=timeout,
            retry=retry,
            version=version,
            expires_after=expires_after,
            limits=limits,
            pausable=pausable,
            priority=priority,
            dedupe=dedupe,
            hooks=hooks,
        )
        payload_type = payload_type_of(name, payload)
        self.add(HandlerSpec(fn=_runs_elsewhere(name), payload_type=payload_type, external=True, **options))

    def add(self, spec: HandlerSpec) -> None:
        """Register a prepared spec; a queue carries Python types or external ones, never both."""
        if spec.name in self._specs:
            raise DuplicateHandler(f"a handler named {spec.name!r} is already registered")
        mixed = [
            s.name for s in self._specs.values() if s.queue == spec.queue and s.external != spec.external
        ]
        if mixed:
            python, remote = (mixed[0], spec.name) if spec.external else (spec.name, mixed[0])
            raise ConfigurationError(
                f"queue {spec.queue!r} would carry Python type {python!r} and external type {remote!r}: "
                "Python workers would receive jobs they cannot run; give external types a queue of their own"
            )
        self._specs[spec.name] = spec

    def add_built_in(self, spec: HandlerSpec) -> None:
        """Register one of sqsjobs' own types (named ``sqsjobs.*``): runnable, but no part of the App's list of types."""
        if not spec.name.startswith(BUILT_IN_PREFIX):
            raise ConfigurationError(f"a built-in job type is named {BUILT_IN_PREFIX}*, not {spec.name!r}")
        self._built_in[spec.name] = spec

    def include(self, other: Registry, prefix: str = "") -> None:
        """Register every handler of ``other``, names prefixed with ``prefix`` (its built-in types stay its own)."""
        for spec in other:
            self.add(HandlerSpec(**{**spec.__dict__, "name": prefix + spec.name}))

    def get(self, name: str) -> HandlerSpec:
        """The spec for ``name``; ``HandlerNotFound`` lists what is registered."""
        try:
            return self._specs.get(name) or self._built_in[name]
        except KeyError:
            known = ", ".join(sorted(self._specs)) or "none"
            raise HandlerNotFound(
                f"no handler registered for job type {name!r} (registered: {known})"
            ) from None

    def name_of(self, job_type: str | Handler) -> str:
        """The job type's name: a string as given, a handler by the name it was registered under.

        A string is not checked here, because a producer may enqueue a type that only another
        service's workers handle (with an explicit ``queue``).
        """
        if isinstance(job_type, str):
            return job_type
        # ``==``, not ``is``: a bound method is a new object at each access but compares equal.
        names = sorted(s.name for s in self._specs.values() if s.fn == job_type)
        what = getattr(job_type, "__qualname__", repr(job_type))
        if not names:
            raise HandlerNotFound(
                f"{what} is not a registered handler: decorate it with @app.job(...) "
                "(or include the registry that has it), or pass the job type's name"
            )
        if len(names) > 1:
            raise HandlerNotFound(
                f"{what} is registered under several names ({', '.join(names)}): pass the job type's name"
            )
        return names[0]

    def __contains__(self, name: object) -> bool:
        return name in self._specs or name in self._built_in

    def __iter__(self) -> Iterator[HandlerSpec]:
        return iter(self._specs.values())

    def queues(self) -> list[str]:
        """Logical queues used by any handler, sorted."""
        return sorted({s.queue for s in self._specs.values()})

    def worker_queues(self) -> list[str]:
        """The queues a Python worker receives from: those of types with a Python handler, sorted."""
        return sorted({s.queue for s in self._specs.values() if not s.external})

    def external_queues(self) -> list[str]:
        """The queues HTTP workers lease from: those of external types, sorted."""
        return sorted({s.queue for s in self._specs.values() if s.external})

    def max_attempts(self) -> int:
        """The largest ``max_attempts`` of any handler (for the redrive backstop)."""
        return max((s.max_attempts for s in self._specs.values()), default=DEFAULT_MAX_ATTEMPTS)
