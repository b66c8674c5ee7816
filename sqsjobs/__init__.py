"""sqsjobs: durable background jobs on DynamoDB and SQS, run by ECS containers or Lambda.

DynamoDB holds each job's record (the source of truth); SQS messages are only hints that a job
may be runnable; a conditional write (the claim) is the only way to own a job.
"""

from __future__ import annotations

import warnings

from sqsjobs._clock import Clock, FakeClock, SystemClock
from sqsjobs.app import App
from sqsjobs.batches.namespace import Batch, BatchStatus
from sqsjobs.chains.namespace import ChainStatus, ChainStep
from sqsjobs.children.namespace import Child, ChildOutcome
from sqsjobs.config import Settings
from sqsjobs.context import JobContext
from sqsjobs.dedupe import Debounce, DedupeFor, Replace, Throttle, WhileActive
from sqsjobs.errors import (
    AwsError,
    BatchNotFound,
    BatchOutcomeError,
    BatchSealed,
    Cancel,
    CancellationReason,
    ChainInvalid,
    ChainNotFound,
    ChildrenFailed,
    ConfigurationError,
    DedupeInvalid,
    DuplicateHandler,
    EncryptionError,
    EnvelopeError,
    ExpiryInvalid,
    HandlerNotFound,
    IdempotencyConflict,
    InvalidTransition,
    JobControl,
    JobNotFound,
    JobStateError,
    LeaseLost,
    MalformedJson,
    ObjectStoreError,
    PayloadError,
    PayloadInvalid,
    PayloadMissing,
    PayloadTooLarge,
    PermanentError,
    RecordChanged,
    Retry,
    RoutingError,
    ScheduleExists,
    ScheduleNotFound,
    SchedulerError,
    SignalTimeout,
    SqsJobsError,
    StoreError,
    TransactionCancelled,
    TransactionInvalid,
    TransportError,
    UnknownEnvelopeVersion,
    UpcastError,
    WaitTimeout,
)
from sqsjobs.job import RENAMED as _RENAMED
from sqsjobs.job import BatchPlace, ChainPlace, FailureRecord, Job, JobStatus, Notify
from sqsjobs.limits.declarations import Breaker, Limit
from sqsjobs.options import (
    BatchDead,
    BatchItem,
    BatchOptions,
    BatchRetry,
    BatchSuccess,
    Hooks,
    PayloadVersion,
)
from sqsjobs.producer import JobRequest
from sqsjobs.registry import HandlerSpec, Registry
from sqsjobs.retry import Backoff, RetryPolicy
from sqsjobs.runtime.sweeper import SweepReport, sweep_once
from sqsjobs.runtime.worker import Worker
from sqsjobs.schedules.namespace import ScheduleSpec
from sqsjobs.transaction import Transaction

__all__ = [
    "App",
    "AwsError",
    "Backoff",
    "Batch",
    "BatchDead",
    "BatchItem",
    "BatchNotFound",
    "BatchOptions",
    "BatchOutcomeError",
    "BatchPlace",
    "BatchRetry",
    "BatchSealed",
    "BatchStatus",
    "BatchSuccess",
    "Breaker",
    "Cancel",
    "CancellationReason",
    "ChainInvalid",
    "ChainNotFound",
    "ChainPlace",
    "ChainStatus",
    "ChainStep",
    "Child",
    "ChildOutcome",
    "ChildrenFailed",
    "Clock",
    "ConfigurationError",
    "Debounce",
    "DedupeFor",
    "DedupeInvalid",
    "DuplicateHandler",
    "EncryptionError",
    "EnvelopeError",
    "ExpiryInvalid",
    "FailureRecord",
    "FakeClock",
    "HandlerNotFound",
    "HandlerSpec",
    "Hooks",
    "IdempotencyConflict",
    "InvalidTransition",
    "Job",
    "JobContext",
    "JobControl",
    "JobNotFound",
    "JobRequest",
    "JobStateError",
    "JobStatus",
    "LeaseLost",
    "Limit",
    "MalformedJson",
    "Notify",
    "ObjectStoreError",
    "PayloadError",
    "PayloadInvalid",
    "PayloadMissing",
    "PayloadTooLarge",
    "PayloadVersion",
    "PermanentError",
    "RecordChanged",
    "Registry",
    "Replace",
    "Retry",
    "RetryPolicy",
    "RoutingError",
    "ScheduleExists",
    "ScheduleNotFound",
    "ScheduleSpec",
    "SchedulerError",
    "Settings",
    "SignalTimeout",
    "SqsJobsError",
    "StoreError",
    "SweepReport",
    "SystemClock",
    "Throttle",
    "Transaction",
    "TransactionCancelled",
    "TransactionInvalid",
    "TransportError",
    "UnknownEnvelopeVersion",
    "UpcastError",
    "WaitTimeout",
    "WhileActive",
    "Worker",
    "sweep_once",
]


def __getattr__(name: str) -> type[FailureRecord]:
    # Renamed names still resolve, with a DeprecationWarning; see sqsjobs.job.RENAMED.
    if name in _RENAMED:
        warnings.warn(f"sqsjobs.{name} is renamed {_RENAMED[name]}", DeprecationWarning, stacklevel=2)
        return FailureRecord
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
