"""The SQS message body: a versioned hint that carries what a worker needs to run the job.

Version 2 carries the job's payload and the fields its record is made of (type, queue, payload
hash and version, times, tenant, idempotency key, trace), so the record stays small (no payload on
the happy path: at most 1 KB, one write unit per write, docs/lifecycle.md) and a claim can create the record when the producer died between its
send and its write. It is still only a hint: the claim decides, and refuses a message whose payload
hash is not the record's (a conflicting idempotent enqueue). Version 3 is version 2 with the payload
in S3: ``ref`` names the object and ``size`` its bytes (``sqsjobs.transport.objects``); only such
messages are written as version 3, so a worker that predates it never mistakes one for a job with a
``null`` payload. Version 1 (id and type only) is still read: its payload comes from the record.

A second kind, ``Fire``, is what EventBridge Scheduler (or the local firing loop of ``sqsjobs dev``)
sends for one occurrence of a schedule; the worker turns it into a job (``sqsjobs.schedules.plugin``).

A third kind, ``Foreign``, is the public contract for senders that are not sqsjobs producers (an
EventBridge rule, an SNS topic, a Step Functions task, a Go or Node service): ``{"sqsjobs": 1,
"type": ..., "payload": ...}`` with an optional idempotency key, tenant and delay
(docs/enqueue-from-aws.md). Its field names are long and plain because people type them into input
transformers and state machines; unknown fields are refused, so a misspelt key cannot silently lose
its deduplication. The worker turns it into a job (``sqsjobs.ingress.plugin``).

JSON from outside, bounded (``read_json``): message bodies (an SNS notification's inner message
too), DLQ copies, payloads read back from S3, listing cursors and an operator's payload files are
all read by it. Whatever is wrong with the bytes -- not JSON, not UTF-8, over the size bound, or
nested deeper than ``MAX_DEPTH`` -- the caller gets ``MalformedJson`` (a ``ValueError``) and maps it
to its outcome: the worker dead-letters the message with the reason, a DLQ listing reports the
entry and goes on, the API answers 4xx. Without it, 100,000 nested ``[`` raise ``RecursionError``
from ``json.loads``, which no ``except ValueError`` catches. Depth counts nested arrays and objects
(``[]`` is 1). The codec stores a payload as one JSON string attribute, not a DynamoDB map, so
DynamoDB's 32 levels do not apply: ``MAX_PAYLOAD_DEPTH`` bounds a payload (enqueue refuses a deeper
one, well below pydantic's serialization limit of 254 and ``json``'s recursion limit), and
``MAX_DEPTH`` what carries one, so a valid payload always fits inside. The worker parses every
body, so the common case costs one ``json.loads``: the result is walked for its depth only when the
text holds more ``[`` and ``{`` than the bound (``str.count`` runs in C).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeGuard

from sqsjobs.errors import EnvelopeError, MalformedJson, UnknownEnvelopeVersion
from sqsjobs.job import BatchPlace, ChainPlace, Notify

if TYPE_CHECKING:
    from collections.abc import Mapping

ENVELOPE_VERSION = 2
#: A job whose payload is an S3 object (``ref``).
REF_ENVELOPE_VERSION = 3
FIRE_VERSION = 1
#: Versions this worker reads (1: the job id and type only).
READABLE_VERSIONS = frozenset({1, 2, 3})

#: Message attributes the framework sets on messages it dead-letters.
DLQ_REASON = "sqsjobs-reason"
DLQ_ERROR_CLASS = "sqsjobs-error-class"
DLQ_ERROR_MESSAGE = "sqsjobs-error-message"
DLQ_JOB_ID = "sqsjobs-job-id"
DLQ_JOB_TYPE = "sqsjobs-job-type"
DLQ_SOURCE_QUEUE = "sqsjobs-source-queue"
#: On a schedule fire the reconciler sent back from a DLQ: how many times it did (its bound).
FIRE_REDISPATCHES = "sqsjobs-fire-redispatches"


_UNSET: Any = object()

#: Optional job fields a v2 envelope carries, by their short key in the body.
_OPTIONAL = {
    "tenant": "tenant",
    "key": "idempotency_key",
    "trace": "trace",
    "parent": "parent_id",
    "root": "root_id",
    "max": "max_attempts",
    "start_by": "start_by",
    "prio": "priority",
    "skey": "serialize_key",
}


@dataclass(frozen=True)
class Envelope:
    """``{"v": 2, "id", "type", "queue", "payload", "hash", "pv", "created", "run_at", ...}``.

    ``has_payload`` tells a v2 envelope (which always carries its payload, even ``null``) from a v1
    hint that names the job only.
    """

    job_id: str
    job_type: str
    version: int = ENVELOPE_VERSION
    queue: str | None = None
    payload: Any = None
    has_payload: bool = False
    payload_hash: str | None = None
    payload_version: int = 1
    created_at: float | None = None
    run_at: float | None = None
    tenant: str | None = None
    idempotency_key: str | None = None
    trace: str | None = None
    parent_id: str | None = None
    root_id: str | None = None
    max_attempts: int | None = None
    #: A batch item's place (``Job.batch``): the claim rebuilds the record from it.
    batch: BatchPlace | None = None
    #: Routing, so a record made from the message (and a replay of it) goes back to the same queue.
    priority: str | None = None
    serialize_key: str | None = None
    #: The payload's S3 object (version 3; ``payload`` is then None) and its size in bytes.
    payload_ref: str | None = None
    payload_size: int | None = None
    #: The job's deadline (epoch seconds): a worker that meets the message later expires the job.
    start_by: float | None = None
    #: A chain step's place (``Job.chain``): a batched claim rebuilds the record from it.
    chain: ChainPlace | None = None
    #: Where the job's end is told (``Job.notify``).
    notify: Notify | None = None
    #: What the job is about (``Job.tags``): a record made from the message keeps them, and the
    #: jobs its handler enqueues inherit them.
    tags: Mapping[str, str] | None = None

    def to_body(self) -> str:
        """Serialise for SendMessage."""
        data: dict[str, Any] = {"v": self.version, "id": self.job_id, "type": self.job_type}
        if self.has_payload:
            data |= {
                "queue": self.queue,
                "payload": self.payload,
                "hash": self.payload_hash,
                "pv": self.payload_version,
                "created": self.created_at,
                "run_at": self.run_at,
            }
            if self.payload_ref is not None:
                data |= {"v": REF_ENVELOPE_VERSION, "ref": self.payload_ref, "size": self.payload_size}
            for key, attr in _OPTIONAL.items():
                value = getattr(self, attr)
                if value is not None:
                    data[key] = value
            if self.batch is not None:
                data["batch"] = self.batch.key
            if self.chain is not None:
                data |= {"chain": self.chain.id, "step": self.chain.step, "steps": self.chain.steps}
            if self.notify is not None:
                data["notify"] = self.notify.to_json()
            if self.tags:
                data["tags"] = dict(self.tags)
        return json.dumps(data, separators=(",", ":"))

    @classmethod
    def from_body(cls, body: str) -> Envelope:
        """Parse a message body; ``EnvelopeError`` says why it is not one of ours."""
        return cls._from_data(_load(body), body)

    @classmethod
    def _from_data(cls, data: dict[str, Any], body: str) -> Envelope:
        job_id, job_type = data.get("id"), data.get("type")
        if not isinstance(job_id, str) or not job_id or not isinstance(job_type, str) or not job_type:
            raise EnvelopeError(f"envelope lacks a job id or type: {body[:80]!r}")
        if "#" in job_id:
            # Job ids are hex; ids with "#" name the table's own items (the worker registry's).
            raise EnvelopeError(f"job id {job_id[:80]!r} is not a job id: job ids never contain '#'")
        if data["v"] < 2 or "payload" not in data:
            return cls(job_id=job_id, job_type=job_type, version=data["v"])
        queue, digest, created, run_at = (
            data.get("queue"),
            data.get("hash"),
            data.get("created"),
            data.get("run_at"),
        )
        if (
            not isinstance(queue, str)
            or not isinstance(digest, str)
            or not _number(created)
            or not _number(run_at)
        ):
            raise EnvelopeError(f"envelope lacks its queue, payload hash or times: {body[:80]!r}")
        optional = {attr: data[key] for key, attr in _OPTIONAL.items() if data.get(key) is not None}
        if "start_by" in optional and not _number(optional["start_by"]):
            raise EnvelopeError(f"envelope's start_by is not a time in epoch seconds: {body[:80]!r}")
        batch, chain = data.get("batch"), data.get("chain")
        if batch is not None:
            if not isinstance(batch, str):
                raise EnvelopeError(f"envelope's batch is not a batch item's key: {body[:80]!r}")
            optional["batch"] = BatchPlace(batch)
        step, steps = data.get("step"), data.get("steps")
        if (chain, step, steps) != (None, None, None):  # a chain step's three fields come together
            if not isinstance(chain, str) or not _integer(step) or not _integer(steps):
                raise EnvelopeError(f"envelope's chain step is not a chain id and two numbers: {body[:80]!r}")
            optional["chain"] = ChainPlace(chain, step, steps)
        if data.get("notify") is not None:
            try:
                optional["notify"] = Notify.of(data["notify"])
            except (TypeError, ValueError) as exc:
                raise EnvelopeError(f"envelope's notify target is not one: {exc}: {body[:80]!r}") from None
        tags = data.get("tags")
        if tags is not None:
            if not isinstance(tags, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in tags.items()
            ):
                raise EnvelopeError(f"envelope's tags are not names to strings: {body[:80]!r}")
            optional["tags"] = tags
        if data["v"] >= REF_ENVELOPE_VERSION:
            reference, size = data.get("ref"), data.get("size")
            if not isinstance(reference, str) or not reference or not _number(size):
                raise EnvelopeError(f"envelope lacks its payload's S3 reference or size: {body[:80]!r}")
            optional |= {"payload_ref": reference, "payload_size": int(size)}
        return cls(
            job_id=job_id,
            job_type=job_type,
            version=data["v"],
            queue=queue,
            payload=data["payload"],
            has_payload=True,
            payload_hash=digest,
            payload_version=int(data.get("pv") or 1),
            created_at=float(created),
            run_at=float(run_at),
            **optional,
        )


def _number(value: Any) -> TypeGuard[float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _integer(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


#: EventBridge Scheduler replaces this with the occurrence's time (``2026-12-01T08:00:00Z``);
#: some emulators deliver it unchanged.
SCHEDULED_TIME = "<aws.scheduler.scheduled-time>"


@dataclass(frozen=True)
class Fire:
    """``{"v": 1, "fire": schedule, "at": time, "job": type, "payload": ...}``: one occurrence of a schedule.

    The job type and payload travel in the fire, so what runs is what was applied to Scheduler.
    """

    schedule: str
    #: The scheduled time (ISO 8601, UTC) or, before substitution, ``SCHEDULED_TIME``.
    at: str
    job_type: str
    payload: Any = None
    #: Fires keep version 1: Scheduler targets hold the body verbatim, and a plan compares it as text.
    version: int = FIRE_VERSION

    def to_body(self) -> str:
        """Serialise (canonical JSON, so a plan compares it textually)."""
        data = {
            "v": self.version,
            "fire": self.schedule,
            "at": self.at,
            "job": self.job_type,
            "payload": self.payload,
        }
        return json.dumps(data, separators=(",", ":"), sort_keys=True)

    @classmethod
    def _from_data(cls, data: dict[str, Any], body: str) -> Fire:
        schedule, at, job_type = data.get("fire"), data.get("at"), data.get("job")
        if not all(isinstance(v, str) and v for v in (schedule, at, job_type)):
            raise EnvelopeError(f"schedule fire lacks a schedule name, time or job type: {body[:80]!r}")
        return cls(str(schedule), str(at), str(job_type), data.get("payload"), data["v"])


#: The field that marks a message from outside sqsjobs, and its version (docs/enqueue-from-aws.md).
FOREIGN_MARKER = "sqsjobs"
FOREIGN_VERSION = 1
#: A foreign message's dedup mode (as ``POST /jobs`` takes it): ``unique`` is ``"while_active"``, the
#: others are seconds (docs/dedupe.md). Each needs the sender's ``idempotency_key``.
DEDUP_FIELDS = ("unique", "dedupe_for", "throttle", "debounce", "debounce_max")
_FOREIGN_FIELDS = (
    FOREIGN_MARKER,
    "type",
    "payload",
    "idempotency_key",
    "tenant",
    "delay_s",
    "priority",
    "serialize_key",
    *DEDUP_FIELDS,
)
#: The longest idempotency key or tenant a foreign message may give: both live in the job's record,
#: which stays under 1 KB on the happy path (docs/lifecycle.md).
MAX_FOREIGN_KEY_CHARS = 256
#: The longest delay a foreign message may ask for (a year): beyond 15 min the record holds the job and
#: the sweeper sends it, as for a Python producer's ``run_at``.
MAX_FOREIGN_DELAY_S = 366 * 86_400


@dataclass(frozen=True)
class Foreign:
    """``{"sqsjobs": 1, "type", "payload"?, "idempotency_key"?, "tenant"?, "delay_s"?}`` from any SQS sender.

    ``payload`` None (absent or ``null``) means the handler's empty payload, as for a schedule fire.
    """

    job_type: str
    payload: Any = None
    idempotency_key: str | None = None
    tenant: str | None = None
    #: Seconds after the message was sent (its ``SentTimestamp``) that the job may start.
    delay_s: float = 0.0
    #: Routing (``sqsjobs.transport.routes``), checked when the job is built from the message.
    priority: str | None = None
    serialize_key: str | None = None
    #: The ``MessageId`` of the SNS notification that wrapped it (non-raw delivery): the same for
    #: every delivery SNS makes of one publish, so it keys a job that has no key of its own.
    sns_message_id: str | None = None
    #: The dedup mode the sender asks for (``DEDUP_FIELDS``); else the type's default applies.
    unique: str | None = None
    dedupe_for: float | None = None
    throttle: float | None = None
    debounce: float | None = None
    debounce_max: float | None = None
    version: int = FOREIGN_VERSION

    def to_body(self) -> str:
        """The body a sender puts on the queue (what the docs show, and what tests send as a plain SendMessage)."""
        data: dict[str, Any] = {FOREIGN_MARKER: self.version, "type": self.job_type}
        if self.payload is not None:
            data["payload"] = self.payload
        if self.idempotency_key is not None:
            data["idempotency_key"] = self.idempotency_key
        if self.tenant is not None:
            data["tenant"] = self.tenant
        if self.delay_s:
            data["delay_s"] = self.delay_s
        for name in ("priority", "serialize_key", *DEDUP_FIELDS):
            if getattr(self, name) is not None:
                data[name] = getattr(self, name)
        return json.dumps(data, separators=(",", ":"))

    @classmethod
    def _from_data(cls, data: dict[str, Any], body: str, sns_message_id: str | None = None) -> Foreign:
        version = data[FOREIGN_MARKER]
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise EnvelopeError(
                f'"{FOREIGN_MARKER}" must be the format version {FOREIGN_VERSION}: {body[:80]!r}'
            )
        if version > FOREIGN_VERSION:
            raise UnknownEnvelopeVersion(
                f"sqsjobs message version {version} is newer than this worker's {FOREIGN_VERSION}"
            )
        unknown = sorted(set(data) - set(_FOREIGN_FIELDS))
        if unknown:
            raise EnvelopeError(
                f"sqsjobs message has unknown field(s) {', '.join(unknown)}; "
                f"the fields are {', '.join(_FOREIGN_FIELDS)}: {body[:80]!r}"
            )
        job_type = data.get("type")
        if not isinstance(job_type, str) or not job_type:
            raise EnvelopeError(f'sqsjobs message lacks its job "type" (a non-empty string): {body[:80]!r}')
        for name in ("idempotency_key", "tenant", "priority", "serialize_key"):
            value = data.get(name)
            if value is not None and (
                not isinstance(value, str) or not value or len(value) > MAX_FOREIGN_KEY_CHARS
            ):
                raise EnvelopeError(
                    f'sqsjobs message: "{name}" must be a string of 1 to {MAX_FOREIGN_KEY_CHARS} '
                    f"characters, not {value!r:.80}"
                )
        delay = data.get("delay_s")
        if delay is not None and (
            not _number(delay) or not math.isfinite(delay) or not 0 <= delay <= MAX_FOREIGN_DELAY_S
        ):
            raise EnvelopeError(
                f'sqsjobs message: "delay_s" must be a number of seconds from 0 to {MAX_FOREIGN_DELAY_S}, '
                f"not {delay!r:.80}"
            )
        dedup = _foreign_dedup(data, body)
        return cls(
            job_type=job_type,
            payload=data.get("payload"),
            idempotency_key=data.get("idempotency_key"),
            tenant=data.get("tenant"),
            delay_s=float(delay or 0),
            sns_message_id=sns_message_id,
            priority=data.get("priority"),
            serialize_key=data.get("serialize_key"),
            version=version,
            **dedup,
        )


def _foreign_dedup(data: dict[str, Any], body: str) -> dict[str, Any]:
    """The dedup fields of a foreign message, checked for type and range (their combination is the producer's)."""
    found: dict[str, Any] = {}
    unique = data.get("unique")
    if unique is not None:
        if unique != "while_active":
            raise EnvelopeError(f'sqsjobs message: "unique" must be "while_active", not {unique!r:.80}')
        found["unique"] = unique
    for name in DEDUP_FIELDS[1:]:
        value = data.get(name)
        if value is None:
            continue
        if not _number(value) or not math.isfinite(value) or not 0 < value <= MAX_FOREIGN_DELAY_S:
            raise EnvelopeError(
                f'sqsjobs message: "{name}" must be a positive number of seconds up to '
                f"{MAX_FOREIGN_DELAY_S}, not {value!r:.80}"
            )
        found[name] = float(value)
    if found and data.get("idempotency_key") is None:
        raise EnvelopeError(
            f'sqsjobs message: a dedup mode ({", ".join(found)}) needs an "idempotency_key": {body[:80]!r}'
        )
    return found


def _sns_notification(data: dict[str, Any], body: str) -> Foreign:
    """The sqsjobs message inside an SNS notification (a subscription without raw message delivery)."""
    topic = data.get("TopicArn")
    why = ""
    try:
        inner: Any = read_json(data["Message"], what="its message")
    except MalformedJson as exc:
        inner, why = None, f" ({exc})"
    message_id = data.get("MessageId")
    if not isinstance(inner, dict) or FOREIGN_MARKER not in inner or not isinstance(message_id, str):
        raise EnvelopeError(
            f"SNS notification from {topic} does not carry an sqsjobs message{why}: publish "
            f'{{"{FOREIGN_MARKER}": {FOREIGN_VERSION}, "type": ..., "payload": ...}} as the message, '
            f"and subscribe the queue with raw message delivery: {body[:80]!r}"
        )
    return Foreign._from_data(inner, data["Message"], sns_message_id=message_id)


def parse(body: str) -> Envelope | Fire | Foreign:
    """Parse any message body: a job hint, a schedule fire, or a job sent from outside sqsjobs."""
    data = _json_object(body)
    if FOREIGN_MARKER in data:
        return Foreign._from_data(data, body)
    if data.get("Type") == "Notification" and isinstance(data.get("Message"), str):
        return _sns_notification(data, body)
    if "v" not in data and "type" in data:
        raise EnvelopeError(
            f'message names a "type" but has no "{FOREIGN_MARKER}" version: a job sent from outside '
            f'sqsjobs is {{"{FOREIGN_MARKER}": {FOREIGN_VERSION}, "type": ..., "payload": ...}}: {body[:80]!r}'
        )
    _check_version(data, body)
    return Fire._from_data(data, body) if "fire" in data else Envelope._from_data(data, body)


def _json_object(body: str) -> dict[str, Any]:
    try:
        data: Any = read_json(body, what="message body")
    except MalformedJson as exc:  # not JSON, too large, or nested too deep (even 100,000 levels)
        raise EnvelopeError(f"{exc}: {body[:80]!r}") from None
    if not isinstance(data, dict):
        raise EnvelopeError(f"message body is not a JSON object: {body[:80]!r}")
    return data


def _load(body: str) -> dict[str, Any]:
    """The JSON object of a body carrying our version; ``EnvelopeError`` says why it is not one of ours."""
    return _check_version(_json_object(body), body)


def _check_version(data: dict[str, Any], body: str) -> dict[str, Any]:
    version = data.get("v")
    if version not in READABLE_VERSIONS:
        if isinstance(version, int) and version > REF_ENVELOPE_VERSION:
            raise UnknownEnvelopeVersion(
                f"envelope version {version} is newer than this worker's {REF_ENVELOPE_VERSION}"
            )
        raise EnvelopeError(f"message body has no sqsjobs envelope version: {body[:80]!r}")
    return data


# ── JSON from outside ────────────────────────────────────────────────────────────────────────
#: Levels a payload may nest (``App.enqueue`` and ``POST /jobs`` refuse a deeper one).
MAX_PAYLOAD_DEPTH = 100
#: Levels any document read from outside may nest: a payload's bound plus room for what carries it.
MAX_DEPTH = 128
#: The reason a worker records for a job whose payload nests deeper than ``MAX_PAYLOAD_DEPTH``.
DEEP_PAYLOAD = "payload nests too deep"
#: What to do about a payload nested deeper than ``MAX_PAYLOAD_DEPTH`` (enqueue's and the API's refusal).
TOO_DEEP_ADVICE = (
    f"the payload nests arrays and objects more than {MAX_PAYLOAD_DEPTH} levels deep: flatten it "
    "(e.g. a list of items with parent ids), or store the document elsewhere and enqueue its key"
)
#: The largest SQS message (1 MiB): the size bound of a message body.
MAX_MESSAGE_BYTES = 1024 * 1024


def read_json(text: str | bytes, *, what: str = "document", max_bytes: int | None = MAX_MESSAGE_BYTES) -> Any:
    """The JSON value of ``text``; ``MalformedJson`` (saying why) for anything else.

    ``what`` names the document in the error (``message body``, ``payload object``...).
    ``max_bytes`` bounds its length (characters of a ``str``); None for a size checked elsewhere.
    """
    if max_bytes is not None and len(text) > max_bytes:
        raise MalformedJson(f"{what} of {len(text)} bytes is over the {max_bytes} bytes read")
    try:
        value = json.loads(text)
    except RecursionError:
        raise MalformedJson(f"{what} nests deeper than {MAX_DEPTH} levels") from None
    except (ValueError, TypeError) as exc:  # UnicodeDecodeError is a ValueError
        raise MalformedJson(f"{what} is not JSON: {exc}") from None
    if containers(text) > MAX_DEPTH and too_deep(value, MAX_DEPTH):
        raise MalformedJson(f"{what} nests deeper than {MAX_DEPTH} levels")
    return value


def too_deep(value: Any, limit: int) -> bool:
    """True when ``value`` nests arrays and objects more than ``limit`` levels (walked without recursion)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            item = list(item.values())
        elif not isinstance(item, list | tuple):
            continue
        if depth + 1 > limit:
            return True
        stack.extend((child, depth + 1) for child in item if isinstance(child, dict | list | tuple))
    return False


def payload_depth_error(value: Any, text: str | None = None) -> str | None:
    """``TOO_DEEP_ADVICE`` for a payload nested deeper than ``MAX_PAYLOAD_DEPTH``; None when it is not.

    ``text``, the payload's JSON when the caller has it, spares the walk in the common case.
    """
    if text is not None and containers(text) <= MAX_PAYLOAD_DEPTH:
        return None
    return TOO_DEEP_ADVICE if too_deep(value, MAX_PAYLOAD_DEPTH) else None


def containers(text: str | bytes) -> int:
    """How many arrays and objects ``text`` could open: its depth is at most this."""
    if isinstance(text, bytes):
        return text.count(b"[") + text.count(b"{")
    return text.count("[") + text.count("{")
