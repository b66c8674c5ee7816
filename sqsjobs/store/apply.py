"""One write sent alone and read once: ``Landed``, or ``Refused`` with why and the item as it was.

``apply`` is the flow (sync and async drivers alike) every writer outside the worker's batched path
calls: the sweeper, the reconcilers, operator flows, the limit gate, presence, steps and tokens. It is
the one place that tells a refusal (the write's condition was false) from a failure (throttling, an
outage: raised as the ``StoreError`` it was), so ``is_conflict`` stays inside ``store/``. The worker's
own transitions go through ``JobStore`` and its applier, and answer with the same two values.

Lost answers: botocore retries a write whose answer was lost with the same parameters; a first try
that landed then refuses its retry. A write carrying a nonce (``wid``) that the refused item shows,
or whose caller names what only its own write wrote (``own``), answers ``Landed(confirmed=True)``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import tenacity

from sqsjobs._aws import Call, Flow, retrying
from sqsjobs.errors import StoreError
from sqsjobs.store import statements, transact
from sqsjobs.store.codec import (
    CCF,
    TRANSACTION_CANCELED,
    WRITE_ID,
    av_s,
    is_conflict,
    nonce,
    old_item,
    shows_own_write,
)
from sqsjobs.store.write import Delete, Put, Write

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence

    from sqsjobs.job import Job
    from sqsjobs.store.codec import Item


@dataclass(frozen=True)
class Landed:
    """A write that took effect.

    ``attributes``: what a single write returned (None from a batch); ``job``: the record it made,
    when the transition knows it (a claim, a heartbeat); ``confirmed``: refused only by its own
    earlier try, whose answer was lost (see the module docstring).
    """

    attributes: Mapping[str, Any] | None = None
    job: Job | None = None
    confirmed: bool = False
    #: The ``ConsumedCapacity`` a single write reported (asked for by ``Settings.measure_capacity``).
    consumed: list[Mapping[str, Any]] = field(default_factory=list, compare=False, repr=False)


class Refusal(enum.StrEnum):
    """Why a transition other than a claim was refused (a claim's reasons are ``ClaimRefusal``)."""

    #: A fenced write met another run's claim, or no running record (``LeaseLost`` says which).
    LEASE_LOST = "lease_lost"
    #: A heartbeat met its owner's own later transition (same claim, no longer running): expected.
    MOVED_ON = "moved_on"
    #: A claim met a job that never started and whose own deadline passed: ``Refused.deadline``.
    EXPIRED = "expired"
    #: An expire met a record expired already (a copy of the message).
    ALREADY_EXPIRED = "already_expired"
    #: An expire met a record that is not expired (another deadline of its own, started, finished).
    NOT_EXPIRED = "not_expired"
    #: The record changed since it was read (a payload kept already, a job retried meanwhile).
    CHANGED = "changed"
    #: The write was sound but an entry committed with it (a finish hook's) was refused.
    ENTRY_REFUSED = "entry_refused"
    #: A transaction that other transactions kept holding items of (``TransactionConflict`` on every
    #: try): nothing was written, and nothing says the write is wrong; the caller raises or comes back.
    CONTENDED = "contended"


@dataclass(frozen=True)
class Refused:
    """A write whose condition was false, why, and the record as it was (None: no record)."""

    reason: ClaimRefusal | Refusal
    job: Job | None = None
    #: The refusal as DynamoDB answered it (for logs).
    error: StoreError | None = field(default=None, compare=False, repr=False)
    #: What the refusal means, for a log line (a lost lease's owner and epoch).
    detail: str = field(default="", compare=False)
    #: ``EXPIRED``: the deadline that passed.
    deadline: float | None = None
    #: A transaction's cancellation reasons, one per entry in order (``apply_all``).
    reasons: Sequence[Mapping[str, Any]] = field(default=(), compare=False, repr=False)
    #: The item as it was, as DynamoDB returned it (a write on an item that is not a job's: a limit's
    #: slot, a worker's presence entry); None without ``ReturnValuesOnConditionCheckFailure``.
    item: Item | None = field(default=None, compare=False, repr=False)

    def as_error(self) -> StoreError:
        """The refusal as DynamoDB answered it, for a caller that has nothing more specific to raise."""
        return self.error or StoreError(f"dynamodb refused the write: {self.reason}", code=CCF)

    def code(self, index: int) -> str:
        """The cancellation code of a transaction's entry ``index`` (``None``: not what refused it)."""
        return str(self.reasons[index].get("Code", "None")) if index < len(self.reasons) else "None"

    def item_at(self, index: int) -> Item | None:
        """The item a transaction's entry ``index`` found, when its condition refused it."""
        found = self.reasons[index].get("Item") if index < len(self.reasons) else None
        return dict(found) if found else None


class ClaimRefusal(enum.StrEnum):
    """Why a claim did not take the job; the record it found decides what the message is worth."""

    #: No record: the message outlived its job (or was never backed by one).
    MISSING = "missing"
    #: The job is succeeded, dead or cancelled.
    FINISHED = "finished"
    #: Queued or retry_scheduled, but ``run_at`` is still ahead (beyond the clock-skew allowance); or
    #: waiting (a chain step, a sleep), which what wakes it sends a message of its own.
    NOT_DUE = "not_due"
    #: Running under a live lease: another worker (or this one, for a duplicate message) owns it.
    HELD_ELSEWHERE = "held_elsewhere"
    #: Every attempt was used by runs that never finished (their workers died).
    EXHAUSTED = "exhausted"
    #: The message's payload is not the record's: a conflicting enqueue with the same key sent it
    #: before its write was refused, or a retry ``--payload`` replaced it since. It names no job to run.
    CONFLICT = "conflict"


def apply(
    write: Write | Put | Delete, *, own: Callable[[Item], bool] | None = None
) -> Flow[Landed | Refused]:
    """Send ``write`` alone: ``Landed`` (with what it returned) or ``Refused(CHANGED, item=as it was)``.

    ``own``: true of an item only this write could have left (its token, its probe), for writes
    without a ``wid``. Anything but a refusal is raised.
    """
    try:
        response: Mapping[str, Any] = yield _call(write)
    except StoreError as exc:
        if not is_conflict(exc):
            raise
        found = old_item(exc)
        mine = isinstance(write, Write) and shows_own_write(write, exc)
        if mine or (own is not None and found is not None and own(found)):
            return Landed(attributes=found, confirmed=True)
        return Refused(Refusal.CHANGED, item=found, error=exc)
    consumed = response.get("ConsumedCapacity")  # one entry for a single write
    return Landed(attributes=response.get("Attributes"), consumed=[consumed] if consumed else [])


def _call(write: Write | Put | Delete) -> Call:
    if isinstance(write, Write):
        return Call("dynamodb", "update_item", write.update_item())
    if isinstance(write, Put):
        return Call("dynamodb", "put_item", write.put_item())
    return Call("dynamodb", "delete_item", write.delete_item())


#: Tries of a transaction cancelled only because another one held one of its items.
CONFLICT_TRIES = 4


def _contended(outcome: Landed | Refused) -> bool:
    return isinstance(outcome, Refused) and outcome.reason is Refusal.CONTENDED


def _last_answer(state: tenacity.RetryCallState) -> Landed | Refused:
    assert state.outcome is not None
    answer: Landed | Refused = state.outcome.result()
    return answer


_ON_CONFLICT = tenacity.Retrying(
    stop=tenacity.stop_after_attempt(CONFLICT_TRIES),
    wait=tenacity.wait_random(0.01, 0.1),
    retry=tenacity.retry_if_result(_contended),
    retry_error_callback=_last_answer,
)


def apply_all(
    entries: Sequence[Mapping[str, Any]], *, wid: str | None = None, own: Iterable[int] = ()
) -> Flow[Landed | Refused]:
    """One ``TransactWriteItems``, all or nothing: ``Landed``, or ``Refused`` with each entry's reason.

    A cancellation because another transaction held one of its items wrote nothing: it is tried
    again (up to ``CONFLICT_TRIES``, then ``Refused`` with those reasons) with a fresh request token.
    ``wid``: the write id the entries ``own`` (their indexes) carry, and the first request's token;
    a refusal whose item shows it is an earlier try of this very transaction that landed (an
    emulator that does not honour the token), so ``Landed``. Anything but a cancellation (a
    ``ValidationException``: the transaction as built) is raised.
    """
    tokens = iter([wid or nonce()])
    owned = tuple(own)

    def attempt() -> Flow[Landed | Refused]:
        request = transact.transact_write(entries, token=next(tokens, None) or nonce())
        try:
            yield Call("dynamodb", "transact_write_items", request)
        except StoreError as exc:
            if exc.code != TRANSACTION_CANCELED:
                raise
            refused = Refused(Refusal.CHANGED, error=exc, reasons=transact.cancellation_reasons(exc))
            if any(r.get("Code") == "TransactionConflict" for r in refused.reasons):
                return replace(refused, reason=Refusal.CONTENDED)  # tried again, with a fresh token
            if wid is not None and any(_shows_wid(refused.item_at(i), wid) for i in owned):
                return Landed(confirmed=True)
            return refused
        return Landed()

    return (yield from retrying(attempt, _ON_CONFLICT))


def _shows_wid(item: Item | None, wid: str) -> bool:
    return item is not None and item.get(WRITE_ID) == av_s(wid)


def apply_batched(writes: Sequence[Write | Put]) -> Flow[list[bool]]:
    """One ``BatchExecuteStatement`` of the writes' PartiQL renderings (at most 25): which landed.

    A write that did not land (its condition refused it, a passing fault, or the whole batch failed)
    is for the caller to send alone with ``apply``, whose answer tells which it was.
    """
    request = statements.batch([write.statement() for write in writes])
    try:
        answers = (yield Call("dynamodb", "batch_execute_statement", request))["Responses"]
    except StoreError:
        return [False] * len(writes)
    return [statements.statement_error(answer) is None for answer in answers]
