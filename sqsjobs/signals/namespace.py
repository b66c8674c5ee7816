"""``app.signals``: declare a signal's keys and which types it cancels, and send signals (docs/signals.md).

Why "signals" and not "events": in sqsjobs an *event* is already a job's lifecycle event, relayed
from the change stream to EventBridge (``sqsjobs.events``, docs/events.md). A signal is a message
to the jobs: one a job waits for (``ctx.signals.wait``) or one that cancels the jobs of a type
(``cancel_on``), as a Temporal signal is sent to a workflow.

A send is one write that returns the signal item with its waiters and cancellers
(``signals.records``), then each waiter's token is answered (``steps.namespace.answer_flow``) and
each canceller's job stopped (``stop_flow``): cancelled while it waits, superseded while it runs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic_core import to_jsonable_python

from sqsjobs._aws import Call, async_verb, sync_verb
from sqsjobs.dedupe.records import supersede
from sqsjobs.errors import ConfigurationError, JobStateError, PayloadInvalid, TokenExpired, TokenNotFound
from sqsjobs.job import TERMINAL, JobStatus
from sqsjobs.ops.cancel_job import cancel_flow
from sqsjobs.runtime.kernel import Namespace
from sqsjobs.signals import records
from sqsjobs.steps.namespace import answer_flow
from sqsjobs.store.apply import Landed, apply
from sqsjobs.store.codec import canonical_json, job_from_item, nonce
from sqsjobs.store.operator import request_cancel
from sqsjobs.store.requests import get

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence
    from datetime import timedelta

    from sqsjobs._aws import Flow
    from sqsjobs.runtime.kernel import Kernel


@dataclass(frozen=True)
class SignalSpec:
    """A signal name's declaration: the keys a wait matches on, and how long signals are kept."""

    name: str
    #: The data's keys (dotted paths into the data) whose values a wait or a cancel matches, all of them.
    keys: tuple[str, ...] = ()
    #: Seconds a sent signal is kept for a wait's ``lookback`` (0: not kept, a lookback sees nothing).
    keep_s: float = 0.0

    def values(self, data: Any) -> dict[str, Any]:
        """The values of the keys in ``data``; ``PayloadInvalid`` when one is missing."""
        found = {}
        for key in self.keys:
            value = path_value(data, key)
            if value is _MISSING:
                raise PayloadInvalid(
                    f"signal {self.name!r} has no {key!r}: its declared keys are {self.keys}"
                )
            found[key] = value
        return found


@dataclass(frozen=True)
class CancelOn:
    """A ``cancel_on`` declaration: a ``signal`` whose key values equal the job's ``match`` paths cancels it."""

    job_type: str
    signal: str
    #: Signal key → the path of its value in the job: ``{"order_id": "payload.order_id"}``.
    match: Mapping[str, str]

    def values(self, payload: Any) -> dict[str, Any] | None:
        """The key values of a job with this payload; None when its payload lacks one (never cancelled)."""
        found = {}
        for key, path in self.match.items():
            value = path_value(payload, path.removeprefix("payload."))
            if value is _MISSING:
                return None
            found[key] = value
        return found


_MISSING = object()


def path_value(data: Any, path: str) -> Any:
    """The value at a dotted ``path`` in JSON data (``_MISSING`` when there is none)."""
    value = to_jsonable_python(data)
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return _MISSING
        value = value[part]
    return value


@dataclass(frozen=True)
class SignalSent:
    """What a send did: the signal item it wrote, the waiters it answered and the jobs it stopped."""

    key: str
    answered: list[str]
    cancelled: list[str]


class Signals(Namespace):
    """``app.signals``: ``declare``, ``cancel_on``, ``send`` (async: ``asend``)."""

    def __init__(self, kernel: Callable[[], Kernel]) -> None:
        super().__init__(kernel)
        self._specs: dict[str, SignalSpec] = {}
        self._cancels: dict[str, list[CancelOn]] = {}

    def declare(self, name: str, *, keys: Iterable[str] = (), keep: timedelta | float = 0.0) -> SignalSpec:
        """Declare signal ``name``: the ``keys`` of its data a wait or a cancel matches on (by equality).

        ``keep``: how long a sent signal is kept, for waits with a ``lookback`` (at most a day).
        A name never declared has no keys: a wait for it matches every signal of the name.
        """
        keep_s = keep if isinstance(keep, (int, float)) else keep.total_seconds()
        if not 0 <= keep_s <= records.MAX_KEEP_S:
            raise ConfigurationError(f"signal {name!r}: keep must be 0 to {records.MAX_KEEP_S:.0f} s")
        spec = SignalSpec(name, tuple(sorted(keys)), float(keep_s))
        self._specs[name] = spec
        return spec

    def spec(self, name: str) -> SignalSpec:
        """``name``'s declaration (a name never declared: no keys, nothing kept)."""
        if not name or len(name) > 200:
            raise PayloadInvalid(f"a signal's name is 1 to 200 characters, got {name!r}")
        return self._specs.get(name) or SignalSpec(name)

    def cancel_on(self, job_type: str, signal: str, *, match: Mapping[str, str]) -> CancelOn:
        """Jobs of ``job_type`` queued or running when a matching ``signal`` is sent are cancelled.

        ``match`` maps each of the signal's declared keys to the path of its value in the job:
        ``app.signals.cancel_on("order.ship", "order.cancelled", match={"order_id": "payload.order_id"})``.
        Declared at import, beside the type, so every worker reads the same.
        """
        spec = self.spec(signal)
        if set(match) != set(spec.keys):
            raise ConfigurationError(
                f"cancel_on {job_type!r} by {signal!r}: match must name exactly its declared keys {spec.keys}"
            )
        bad = [p for p in match.values() if not p.startswith("payload.")]
        if bad:
            raise ConfigurationError(f"cancel_on {job_type!r}: match paths start with 'payload.', got {bad}")
        declared = CancelOn(job_type, signal, dict(match))
        self._cancels.setdefault(job_type, []).append(declared)
        return declared

    def cancels(self, job_type: str) -> Sequence[CancelOn]:
        """The ``cancel_on`` declarations of ``job_type``."""
        return self._cancels.get(job_type, ())

    @property
    def cancelled_types(self) -> frozenset[str]:
        """The types with a ``cancel_on``: the only jobs whose claims this feature looks at."""
        return frozenset(self._cancels)

    def _send(self, name: str, data: Any = None) -> Flow[SignalSent]:
        """Send signal ``name`` with ``data``: the jobs waiting for it with equal key values get ``data``.

        Jobs of a ``cancel_on`` type that match are cancelled (waiting) or stopped (running). A wait
        begun after this send does not see it (unless it looks back at a signal kept by ``keep``).
        """
        k = self.kernel
        return send_flow(k, self.spec(name), data, k.clock.now())

    send, asend = sync_verb(_send), async_verb(_send)


def send_flow(kernel: Kernel, spec: SignalSpec, data: Any, now: float) -> Flow[SignalSent]:
    """One signal: recorded on its item, its waiters answered, its cancellers' jobs stopped, the item tidied."""
    settings, table = kernel.settings, kernel.settings.table_name
    values = spec.values(data)
    text = canonical_json(to_jsonable_python(data))
    if len(text) > records.MAX_DATA_BYTES:
        raise PayloadInvalid(f"signal {spec.name!r} data is {len(text)} bytes, over {records.MAX_DATA_BYTES}")
    key = records.values_key(spec.name, values)
    write = records.signalled(
        table, key, name=spec.name, now=now, signal_id=nonce(), data=text if spec.keep_s else None
    )
    landed = yield from apply(write)
    item = dict(landed.attributes or {}) if isinstance(landed, Landed) else {}
    used: list[str] = list(records.stale_kept(item, now - spec.keep_s)) if spec.keep_s else []
    answered: list[str] = []
    for token, timeout_at in records.waiters(item):
        used.append(records.WAITER + token)
        if timeout_at < now:
            continue  # the job stopped waiting: its own timeout wakes it
        try:
            said = yield from answer_flow(settings, kernel.queue_urls, token, now, json_of(text))
        except (TokenExpired, TokenNotFound):
            continue
        if said == "answered":
            answered.append(token)
    cancelled: list[str] = []
    reason = f"cancelled by signal {records.described(spec.name, values)}"
    for job_id in records.cancellers(item):
        used.append(records.CANCELLER + job_id)
        if (yield from stop_flow(kernel, job_id, now=now, reason=reason)):
            cancelled.append(job_id)
    if used:
        yield from apply(records.forget(table, key, used))
    kernel.logger.info(
        "signal sent",
        extra={"signal": spec.name, "key": key, "answered": len(answered), "cancelled": len(cancelled)},
    )
    return SignalSent(key, answered, cancelled)


def json_of(text: str) -> Any:
    """The data as every waiter gets it: its canonical JSON read back (as a replay would)."""
    return json.loads(text)


def stop_flow(kernel: Kernel, job_id: str, *, now: float, reason: str) -> Flow[bool]:
    """Stop job ``job_id``: True if this cancelled it (or asked it to stop), False if it had ended.

    A waiting job is cancelled through the operator's cancel (a batch item counted, a ``notify``
    target told, its children's batch failed: ``ops.cancel_job``); a running one is superseded
    (``dedupe.records.supersede``: cancelled now, its run's fenced writes refused, its handler told
    at its next lease renewal), or asked to stop when it has a target, a batch or a chain to tell.
    """
    settings = kernel.settings
    table = settings.table_name
    retention_s = kernel.kept_for("", JobStatus.CANCELLED)
    for _ in range(3):  # it moved between the read and the write: read again
        answer = yield Call("dynamodb", "get_item", get(table, job_id))
        if "Item" not in answer:
            return False
        job = job_from_item(answer["Item"])
        if job.status in TERMINAL:
            return False
        if job.status is JobStatus.RUNNING:
            plain = job.notify is None and job.batch is None and job.chain is None
            write = (
                supersede(table, job_id, now=now, by="", retention_s=retention_s, reason=reason)
                if plain
                else request_cancel(table, job_id, now=now)
            )
            if isinstance((yield from apply(write)), Landed):
                return True
            continue
        try:
            yield from cancel_flow(settings, kernel.registry, job_id, now, reason=reason)
        except JobStateError:
            continue
        return True
    return False
