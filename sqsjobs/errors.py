"""Every exception sqsjobs raises, under one root.

::

    SqsJobsError
    ├── ConfigurationError          settings that cannot work together
    ├── HandlerNotFound             no handler registered for a job type
    ├── DuplicateHandler            two handlers registered under one name
    ├── PayloadError
    │   ├── PayloadInvalid          payload fails the handler's model
    │   │   └── UpcastError         an older payload cannot be brought to the handler's version
    │   └── PayloadTooLarge         payload over the inline limit
    ├── EnvelopeError               an SQS body sqsjobs cannot read
    ├── MalformedJson               JSON from outside that cannot be read within bounds (also a ValueError)
    │   └── UnknownEnvelopeVersion
    ├── InvalidEvent                a Lambda event that is not an SQS batch
    ├── InvalidBatchResponse        a partial batch response naming no record of the batch (a bug)
    ├── BatchOutcomeError           a batch handler gave a job no outcome (missing, extra, not one)
    ├── StartTooLate                a batch type's job whose deadline passed in its collector (expired unrun)
    ├── ExpressionError             a schedule expression EventBridge Scheduler would refuse (also a ValueError)
    ├── CursorError                 a listing cursor from another listing (also a ValueError)
    ├── TransactionInvalid          a transaction DynamoDB would refuse as built (also a ValueError)
    ├── ExpiryInvalid               an expires_after that cannot hold: not positive, or ends before run_at
    ├── DedupeInvalid               dedup options that cannot hold: two modes, a window out of bounds (also a ValueError)
    ├── TransactionCancelled        DynamoDB cancelled a transaction: nothing of it was written
    ├── ChainInvalid                steps that cannot make a chain (none, over 99) (also a ValueError)
    ├── JobStateError               the job's record refused the change: an answer, not a failure
    │   ├── JobNotFound
    │   │   └── BatchNotFound       no batch has this id
    │   ├── LeaseLost               the caller no longer owns the job (fencing)
    │   ├── IdempotencyConflict     same key, different payload
    │   ├── InvalidTransition       e.g. cancelling a finished job
    │   ├── ChainNotFound           no chain has this id
    │   ├── ScheduleNotFound        no runtime schedule has this tenant and name
    │   ├── ScheduleExists          a runtime schedule of this tenant and name exists already
    │   ├── RecordChanged           changed between a read and the write based on it, again and again
    │   └── BatchSealed             the batch takes no more items (sealed, complete or cancelled)
    ├── AwsError                    an AWS call failed (wraps botocore; callers never see ClientError)
    │   ├── StoreError              ...on the DynamoDB job table
    │   ├── TransportError          ...on SQS
    │   ├── SchedulerError          ...on EventBridge Scheduler
    │   ├── ObjectStoreError        ...on the S3 bucket of large payloads and results
    │   ├── EncryptionError         ...on KMS, for an encrypted payload's data key
    │   └── EventsError             ...on the EventBridge bus or the table's change stream (job events)
    ├── JobTimeout                  a handler ran past its timeout (recorded as the attempt's error)
    ├── WaitTimeout                 a wait for a job, batch or chain ended before it did (also a TimeoutError)
    ├── WorkerLost                  runs that never recorded an outcome used up the attempts (recorded)
    └── JobControl                  raised by handlers to steer their own job
        ├── PermanentError          dead at once, no retry
        │   └── ChildrenFailed      a child the handler awaited failed (``ctx.children``, "raise" policy)
        ├── Retry                   retry after a given delay
        └── Cancel                  stop and mark cancelled

Refusals and failures are apart on purpose: ``except AwsError`` (or ``StoreError``) means "the
call did not work, try again later", and never swallows a refusal the caller must act on; catch
``JobStateError`` (or one of its leaves) for those. A refused conditional write reaches only the
store (``sqsjobs.store.apply``, ``sqsjobs.store.job_store``), which answers ``Refused`` with the
record as it was; everything outside ``store/`` reads that answer, never DynamoDB's error code.

``ExpressionError`` and ``CursorError`` are ``ValueError`` too, for callers that validate input
with ``except ValueError``. An exception's docstring is its default message.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping


class SqsJobsError(Exception):
    """sqsjobs failed."""

    def __init__(self, message: str | None = None) -> None:
        # The docstring's first paragraph: the rest (``Attributes:``...) documents, it does not explain.
        super().__init__(message or (self.__doc__ or "").strip().split("\n\n")[0])


class ConfigurationError(SqsJobsError):
    """The settings cannot work together."""


class HandlerNotFound(SqsJobsError):
    """No handler is registered for this job type."""


class DuplicateHandler(SqsJobsError):
    """A handler is already registered under this name."""


class PayloadError(SqsJobsError):
    """The payload cannot be used."""


class PayloadInvalid(PayloadError):
    """The payload does not validate against the handler's model.

    Attributes:
        reason: the record's ``reason`` when a worker kills a job for it.
    """

    reason = "payload failed validation"

    def __init__(self, message: str | None = None, *, reason: str | None = None) -> None:
        super().__init__(message)
        if reason:
            self.reason = reason


class UpcastError(PayloadInvalid):
    """An older payload cannot be brought to the handler's version: no step from it, or a step raised."""


class PayloadTooLarge(PayloadError):
    """The payload is larger than ``max_payload_bytes``, the largest a job may carry (S3 included)."""


class PayloadMissing(PayloadError):
    """The payload's S3 object is gone (expired or deleted) or is not the payload the job was enqueued with."""


class EnvelopeError(SqsJobsError):
    """The SQS message body is not an sqsjobs envelope."""


class UnknownEnvelopeVersion(EnvelopeError):
    """The envelope was written by a newer sqsjobs than this worker runs."""


class MalformedJson(SqsJobsError, ValueError):
    """JSON from outside is not JSON, or is larger or nests deeper than sqsjobs reads (``sqsjobs.envelope.read_json``)."""


class InvalidEvent(SqsJobsError):
    """The event is not an SQS batch this App can read."""


class InvalidBatchResponse(SqsJobsError):
    """A failure names no record of the batch; AWS would fail the whole batch, so it is never returned."""


class ExpressionError(SqsJobsError, ValueError):
    """An expression EventBridge Scheduler would refuse; the message says which part and why."""


class CursorError(SqsJobsError, ValueError):
    """The cursor is not one this listing produced."""


class RoutingError(SqsJobsError, ValueError):
    """A priority or serialize key the job's queue cannot take (``sqsjobs.transport.routes.check``)."""


class TransactionInvalid(SqsJobsError, ValueError):
    """The transaction cannot be written as built (too many items, too large, one item twice, a bad request); nothing was written."""


class ExpiryInvalid(SqsJobsError, ValueError):
    """The job's ``expires_after`` cannot hold: it is not a positive duration, or it ends before the job may start."""


class NotifyInvalid(SqsJobsError, ValueError):
    """A notify target that is not one: none or two of url, queue and bus, a URL that is not http(s), a secret without a URL."""

    def __init__(self, message: str | None = None, *, field: str | None = "notify") -> None:
        super().__init__(message)
        self.field = field


class TagsInvalid(SqsJobsError, ValueError):
    """Tags that cannot be kept: not names to strings, too many, a name or value out of bounds (``sqsjobs.store.tags``)."""

    field = "tags"


class DedupeInvalid(SqsJobsError, ValueError):
    """Dedup options that cannot hold: two modes at once, or a window outside ``sqsjobs.dedupe``'s bounds.

    Attributes:
        field: the option at fault (``dedupe_for``, ``throttle``, ``debounce``, ``debounce_max``,
            ``unique``), or None.
    """

    def __init__(self, message: str | None = None, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class CancellationReason:
    """What DynamoDB said about one item of a cancelled transaction (``TransactionCancelled.reasons``)."""

    #: The item's position in the transaction: the order of the ``tx.put``/``update``/... calls.
    index: int
    #: ``Put``, ``Update``, ``Delete`` or ``ConditionCheck``.
    operation: str
    table: str
    #: DynamoDB's code: ``None`` (this item was fine), ``ConditionalCheckFailed``,
    #: ``TransactionConflict``, ``ThrottlingError``, ``ValidationError``...
    code: str
    message: str
    #: The item as it was, when the item asked for it (``ReturnValuesOnConditionCheckFailure=ALL_OLD``).
    item: Mapping[str, Any] | None = None
    #: The job's id when the item is a job record added by ``tx.enqueue``.
    job_id: str | None = None

    @property
    def failed(self) -> bool:
        """True when this item is why the transaction was cancelled."""
        return self.code != "None"


class TransactionCancelled(SqsJobsError):
    """DynamoDB cancelled the transaction: none of its writes happened and no job was enqueued.

    Attributes:
        reasons: one ``CancellationReason`` per item, in the order they were added; ``failed``
            tells which ones cancelled it.
    """

    def __init__(self, message: str | None = None, *, reasons: tuple[CancellationReason, ...] = ()) -> None:
        super().__init__(message)
        self.reasons = reasons

    @property
    def failed(self) -> tuple[CancellationReason, ...]:
        """The items that cancelled the transaction."""
        return tuple(r for r in self.reasons if r.failed)


class JobStateError(SqsJobsError):
    """The job's record does not allow this change."""


class JobNotFound(JobStateError):
    """No job has this id."""


class LeaseLost(JobStateError):
    """This worker no longer owns the job: another worker claimed it, or it was finished or released."""


class TokenNotFound(JobNotFound):
    """No such wait token: its id names no job, or no token its job created (``app.tokens.complete``)."""


class TokenExpired(JobStateError):
    """The wait token's timeout passed: the job stopped waiting for it (HTTP 409)."""


class LimitWait(SqsJobsError):
    """A job may not start yet (paused type, full limit, open breaker): raised and caught inside the gate.

    It never reaches a user: the job's message is re-armed to come back (``sqsjobs.limits.plugin``).
    """

    def __init__(self, reason: str = "limit", limit: str = "", delay_s: float = 1.0) -> None:
        super().__init__(f"{reason} ({limit or 'flow control'}): wait {delay_s:.1f} s")
        self.reason, self.limit, self.delay_s = reason, limit, delay_s


class IdempotencyConflict(JobStateError):
    """A job with this idempotency key exists with a different payload; use a new key or the same payload."""


class InvalidTransition(JobStateError):
    """The job is not in a state that allows this change."""


class ChainNotFound(JobStateError):
    """No chain has this id."""


class ScheduleNotFound(JobStateError):
    """No runtime schedule has this tenant and name."""


class ScheduleExists(JobStateError):
    """A runtime schedule of this tenant and name exists already (update it, or delete it first)."""


class ChainInvalid(SqsJobsError, ValueError):
    """The steps given cannot make a chain (none, more than the limit, a step that is not a (type, payload))."""


class RecordChanged(JobStateError):
    """The job's record changed between our read and the conditional write based on it; try again."""


class BatchNotFound(JobNotFound):
    """No batch has this id."""


class BatchSealed(JobStateError):
    """The batch is sealed (or complete, or cancelled): it takes no more items; add them to another batch."""


class AwsError(SqsJobsError):
    """An AWS call failed.

    Attributes:
        code: the AWS error code (``ThrottlingException``...), or ``ConnectionError`` when no answer came.
        response: the parsed error response, when there was one.
    """

    def __init__(self, message: str | None = None, *, code: str = "", response: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.response = response


class StoreError(AwsError):
    """A call to the DynamoDB job table failed."""


class NotBatchable(SqsJobsError, ValueError):
    """A write needs what a batched PartiQL statement lacks (returned values, an upsert); sent alone."""


class TransportError(AwsError):
    """A call to SQS failed."""


class SchedulerError(AwsError):
    """A call to EventBridge Scheduler failed."""


class EventsError(AwsError):
    """A call to the EventBridge bus or the job table's change stream failed (job events)."""


class ObjectStoreError(AwsError):
    """A call to the S3 bucket of large payloads and results failed."""


class EncryptionError(AwsError):
    """A call to KMS for an encrypted payload's or result's data key failed (docs/encryption.md)."""


class JobTimeout(SqsJobsError):
    """The handler ran past its timeout."""


class WaitTimeout(SqsJobsError, TimeoutError):
    """The job (or batch, or chain) had not ended when the wait for it ran out.

    Attributes:
        last: what the last read saw (a ``Job``, ``BatchStatus`` or ``ChainStatus``): where it is now.
        waited_s: how long the wait lasted.
        reads: how many reads it made.
    """

    def __init__(
        self, message: str | None = None, *, last: Any = None, waited_s: float = 0.0, reads: int = 0
    ) -> None:
        super().__init__(message)
        self.last = last
        self.waited_s = waited_s
        self.reads = reads


class WorkerLost(SqsJobsError):
    """The job's runs never recorded an outcome: their worker died or lost its lease mid-run."""


class JobControl(SqsJobsError):
    """A handler steered its own job."""


class PermanentError(JobControl):
    """The job cannot succeed; it goes to the DLQ without further attempts."""


class StepError(PermanentError):
    """A durable step used wrongly (a name taken twice in one run, too many steps): the job dies, unretried.

    Retrying cannot help: the handler's code decides its steps' names, and it would decide the same.
    """


class ChildrenFailed(PermanentError):
    """Raised in a job by ``ctx.children``: a child it awaited ended without succeeding (docs/children.md).

    ``failures`` lists each such child as a ``sqsjobs.children.namespace.ChildOutcome`` (its id, type,
    status and reason), in the order the children were asked for. A ``PermanentError``: the parent
    dies at once, since a retry would replay the same children's ends.
    """

    def __init__(self, message: str | None = None, failures: Any = ()) -> None:
        super().__init__(message)
        #: The children that ended dead, cancelled or expired (``ChildOutcome``), in call order.
        self.failures = tuple(failures)


class Sleep(JobControl):
    """Raised by ``ctx.sleep`` (``sqsjobs.steps``): end this run, run the job again at ``until``; not an error.

    The steps feature records it (the job queued until then, the attempt given back), never the
    retry policy. ``step`` is the sleep's ``sqsjobs.steps.records.StepRecord``.
    """

    def __init__(self, step: Any = None, until: float = 0.0, *, waits_for: str | None = None) -> None:
        super().__init__(
            f"sleeping until {until:.3f} ({getattr(step, 'name', None) or waits_for or 'a sleep'})"
        )
        self.step = step
        self.until = until
        #: A wait for a token: the attribute its answer lands in. The record then keeps the job
        #: (held, with its payload) so that the answer can wake it, and the sleep's write lands only
        #: while no answer has.
        self.waits_for = waits_for


class TokenTimeout(SqsJobsError):
    """Raised in a job by ``ctx.wait_for_token``: nobody completed the token before its timeout."""


class SignalTimeout(TokenTimeout):
    """Raised in a job by ``ctx.signals.wait``: no matching signal came before the wait's timeout."""


class TokenFailed(SqsJobsError):
    """Raised in a job by ``ctx.wait_for_token``: the token was failed (``app.tokens.fail``) with this message."""


class Retry(JobControl):
    """Retry the job after ``delay_s`` seconds (attempts still count)."""

    def __init__(self, message: str | None = None, *, delay_s: float | None = None) -> None:
        super().__init__(message)
        self.delay_s = delay_s


class Cancel(JobControl):
    """The job was cancelled."""


class LeaseConflict(JobStateError):
    """An HTTP worker's lease no longer holds its job: the record moved on (finished, claimed again, timed out).

    ``job`` is the record as it is now (None: there is none).
    """

    def __init__(self, message: str = "the lease no longer holds its job", job: Any = None) -> None:
        state = f" (now {job.status.value}, attempt {job.attempt})" if job is not None else " (no such job)"
        super().__init__(message + state)
        self.job = job


class RemoteError(SqsJobsError):
    """An HTTP worker's run failed (``fail_lease``): recorded under the error class and stack it reported.

    Retried by the job type's policy, as a Python handler's exception is; ``PermanentRemoteError``
    kills the job at once, ``RetryRemoteError`` asks for its own delay.
    """

    def __init__(
        self,
        message: str = "the HTTP worker's run failed",
        *,
        error_class: str = "Error",
        stack: str | None = None,
    ) -> None:
        super().__init__(message)
        self.error_class = error_class
        self.stack = stack


class LeaseInvalid(SqsJobsError):
    """An HTTP worker's lease was not issued by this server's key: altered, forged, or signed with another key."""


class PermanentRemoteError(RemoteError, PermanentError):
    """An HTTP worker said its job cannot succeed: dead at once, with the error it reported."""


class RetryRemoteError(RemoteError, Retry):
    """An HTTP worker asked for its job to run again after ``delay_s`` (attempts still count)."""

    def __init__(
        self,
        message: str = "the HTTP worker asked to run its job again later",
        *,
        delay_s: float = 0.0,
        error_class: str = "Error",
        stack: str | None = None,
    ) -> None:
        RemoteError.__init__(self, message, error_class=error_class, stack=stack)
        self.delay_s = delay_s


class WebhookRefused(PermanentError):
    """A notify webhook this worker may not reach: not http(s), plain http, or an address that is not public."""


class DeliveryFailed(SqsJobsError):
    """A notification's target did not take it now (a 5xx, no answer): the delivery is retried."""


class StartTooLate(SqsJobsError):
    """A job's deadline passed while it waited in its batch collector: never called, it ends expired.

    Raised to the job's run by the collector (``runtime/batching.py``); the run stage records it as
    ``expire_claimed``, never as a failed attempt.
    """

    def __init__(self, reason: str | None = None) -> None:
        super().__init__(reason)
        #: The expired record's reason, as a claim refused by the deadline would have written it.
        self.reason = str(self)


class BatchOutcomeError(SqsJobsError):
    """A batch handler's answer did not give this job an outcome (one missing, extra, or not an outcome).

    Recorded as the job's failed attempt: retried by the type's policy, never lost or taken as success.
    """
