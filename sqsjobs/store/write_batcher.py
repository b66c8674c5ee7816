"""The worker's DynamoDB writes, grouped: what is ready at one instant goes in one request.

Every claim and finish a worker makes passes through ``WriteBatcher.write``. When nothing is in
flight the write leaves at once, on the next turn of the event loop, together with whatever other
writes that turn produced (ten claims from one receive, say) — nothing ever waits to fill a batch.
While ``max_in_flight`` requests are out, new writes queue and leave together as soon as one
returns: under load batches grow by themselves, when idle a write is one request, as before.

A finish (``linger=True``: the transitions that end a run) waits up to ``finish_linger_s``
(``Settings.finish_linger_s``) for company: it leaves with the next claims, which never wait, or
with the other finishes of that moment, or alone once the linger is over (at once when 25 wait).
A claim holds back a handler's start; nothing waits for a finish but its message's delete (the slot
is already free, and the delete lingers itself) and whoever watches the record. Finishes trickle in
one by one as handlers end: without the linger, most left in small groups of their own, and at
concurrency 8 the writes took 0.29 requests per job; with 20 ms, 0.18 (docs/bench.md).

A group of one is sent as its single UpdateItem (with ``ReturnValues`` where it asks); a larger one
as one ``BatchExecuteStatement`` of the writes' PartiQL renderings (``store/statements.py``). A statement
refused by its condition raises exactly what its single write would have raised; a statement
failed for a passing reason (throttling, a server fault), or a whole batch that failed, is sent
again as its single write, which botocore retries and whose refusal the same readers recognise as
one's own after a lost answer (docs/lifecycle.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqsjobs._aws import CARRIED_FOR, Call, one
from sqsjobs.errors import NotBatchable, StoreError
from sqsjobs.store import statements, transact
from sqsjobs.store.apply import Landed, apply_all
from sqsjobs.store.codec import CCF
from sqsjobs.store.write import Entry, Write

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from sqsjobs._aws import AsyncRunner

#: Batches a worker keeps in flight at once; more writes wait for one of them (and join the next).
MAX_IN_FLIGHT = 2


@dataclass
class _Write:
    #: Built only when the single write must be sent after all (a claim's is the larger of its two).
    single: Write | Callable[[], Write]
    #: The write whose statement goes in the batch (``single`` itself, or its batchable twin).
    batched: Write
    statement: dict[str, Any]
    #: For a refusal of the statement that only the single write can settle (see ``write``).
    needs_single: Callable[[StoreError], bool] | None
    future: asyncio.Future[Landed] = field(repr=False)
    #: A finish: it may wait for the request in flight (see the module docstring).
    linger: bool = False
    #: Where the write was made (its job's span, its log fields): a group's request is sent in its
    #: oldest write's, and the others' are named in ``CARRIED_FOR``, so every job's trace shows the
    #: request that carried its write (a finish that waited, a claim that joined it).
    context: contextvars.Context = field(default_factory=contextvars.copy_context, repr=False)


class WriteBatcher:
    """Sends one worker's conditional writes, alone or batched (see the module docstring)."""

    def __init__(
        self,
        arun: AsyncRunner,
        *,
        batch: bool,
        logger: Any,
        max_in_flight: int = MAX_IN_FLIGHT,
        finish_linger_s: float = 0.0,
    ) -> None:
        """``batch`` False: every write is its single UpdateItem (emulators without PartiQL conditions).

        ``finish_linger_s``: the longest a finish waits for others to share its request (0: none).
        """
        self._arun = arun
        self._linger_s = finish_linger_s
        self._batch = batch
        self._logger = logger
        self._max_in_flight = max_in_flight
        self._waiting: list[_Write] = []
        self._in_flight = 0
        self._scheduled = False
        self._timer: asyncio.TimerHandle | None = None
        #: The linger is over while every request slot was taken: the next free one sends them.
        self._due = False
        self._tasks: set[asyncio.Task[None]] = set()

    async def write(
        self,
        single: Write | Callable[[], Write],
        *,
        batchable: Write | None = None,
        needs_single: Callable[[StoreError], bool] | None = None,
        linger: bool = False,
    ) -> Landed:
        """Apply one transition; raises the ``StoreError`` its single UpdateItem would have raised.

        Args:
            single: the write, sent as its UpdateItem when alone; or what builds it (then only if
                it is sent: the batched twin of a claim usually lands alone).
            batchable: the write whose PartiQL statement may go in a batch instead (default
                ``single``; for a claim, ``runs.fresh_claim``).
            needs_single: when the batched statement is refused and this says so, ``single`` is sent
                after all (a claim whose record is missing or was claimed before).
            linger: a finish, which may wait for company (see the module docstring).
        """
        statement = None
        twin = batchable if batchable is not None else single
        if self._batch and isinstance(twin, Write):
            with contextlib.suppress(NotBatchable):
                statement = twin.statement()
        if statement is None or not isinstance(twin, Write):
            return Landed(await self.single(_built(single)))
        future: asyncio.Future[Landed] = asyncio.get_running_loop().create_future()
        self._waiting.append(_Write(single, twin, statement, needs_single, future, linger))
        self._kick()
        return await future

    async def single(self, write: Write) -> Mapping[str, Any] | None:
        """Send one UpdateItem on its own, now, and return its ``Attributes``.

        For the writes a batch cannot carry: a heartbeat that needs its answer (``ALL_NEW``), a
        reject that may create the record, and every write a batch sends again alone.
        """
        params = write.update_item()
        response: Mapping[str, Any] = await self._arun(one(Call("dynamodb", "update_item", params)))
        return response.get("Attributes")

    async def transact(self, single: Write, entries: Sequence[Entry]) -> None:
        """Apply the UpdateItem ``single`` and ``entries`` in one ``TransactWriteItems``, all or nothing.

        Raises exactly what ``single`` alone would have raised when its own condition refused it (a
        ``ConditionalCheckFailedException`` whose ``Item`` is the record), so the readers of a
        refusal (``lease_lost``, ``already_written``...) read both alike; a refusal of one of the
        ``entries`` raises the ``TransactionCanceledException`` as it came. The token is the
        write's own nonce (``:wid``): AWS applies a retried request once, and an emulator that
        refuses the retry shows the nonce in the record, which ``already_written`` recognises.
        """
        wid = single.value(":wid")
        if wid is None:
            raise ValueError("a transacted write must carry its write id (requests.with_write_id)")
        rendered = [{"Update": single.transact_item()}, *(transact.entry_of(e) for e in entries)]
        # Another transaction holding a shared item (a batch's counter shard) wrote nothing: apply_all
        # tries again soon rather than leave the job to rerun after its lease.
        outcome = await self._arun(apply_all(rendered, wid=wid["S"]))
        if isinstance(outcome, Landed):
            return
        if outcome.code(0) == transact.CONDITION_FAILED:
            response: dict[str, Any] = {"Error": {"Code": CCF, "Message": "the finish's condition"}}
            if (found := outcome.item_at(0)) is not None:
                response["Item"] = found
            raise StoreError(f"dynamodb {CCF}: the finish's condition", code=CCF, response=response) from (
                outcome.error
            )
        raise outcome.as_error()

    def _kick(self) -> None:
        if not self._waiting or self._scheduled or self._in_flight >= self._max_in_flight:
            return
        loop = asyncio.get_running_loop()
        if (
            self._linger_s > 0
            and not self._due
            and len(self._waiting) < statements.MAX_STATEMENTS
            and all(w.linger for w in self._waiting)
        ):  # only finishes wait: they leave with the next claim, or when the linger is over
            if self._timer is None:
                self._timer = loop.call_later(self._linger_s, self._linger_over)
            return
        self._scheduled = True
        loop.call_soon(self._send_waiting)

    def _linger_over(self) -> None:
        self._timer = None
        if self._waiting and not self._scheduled and self._in_flight < self._max_in_flight:
            self._send_waiting()
        else:  # the next request returning (its ``_send`` kicks) sends them without a new linger
            self._due = bool(self._waiting)

    def _send_waiting(self) -> None:
        self._scheduled = self._due = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        while self._waiting and self._in_flight < self._max_in_flight:
            group: list[_Write] = []
            later: list[_Write] = []
            keys: set[str] = set()
            for write in self._waiting:
                key = _key(write.batched)
                if len(group) == statements.MAX_STATEMENTS or key in keys:
                    later.append(write)  # one item twice in a batch is refused whole: next group
                else:
                    group.append(write)
                    keys.add(key)
            self._waiting = later
            self._in_flight += 1
            task = asyncio.get_running_loop().create_task(self._send(group), context=group[0].context)
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _send(self, group: list[_Write]) -> None:
        try:
            if len(group) == 1:
                await self._settle_single(group[0])
            else:
                await self._send_batch(group)
        except BaseException:
            for write in group:  # cancelled with the loop: the writers must not wait forever
                if not write.future.done():
                    write.future.cancel()
            raise
        finally:
            self._in_flight -= 1
            self._kick()

    async def _send_batch(self, group: list[_Write]) -> None:
        request = statements.batch([w.statement for w in group])
        carried = CARRIED_FOR.set(tuple(w.context for w in group[1:]))  # their runs' spans, too
        try:
            response = await self._arun(one(Call("dynamodb", "batch_execute_statement", request)))
            answers = response["Responses"]
        except StoreError as exc:
            if exc.code in statements.UNSUPPORTED_CODES:  # an emulator without (trustworthy) PartiQL
                self._batch = False
                self._logger.warning("the endpoint takes no BatchExecuteStatement: single writes from now on")
            else:
                self._logger.warning("batched write failed, sending each alone", extra={"error": str(exc)})
            answers = [None] * len(group)
        finally:
            CARRIED_FOR.reset(carried)
        retry = []
        for write, answer in zip(group, answers, strict=True):
            error = None if answer is None else statements.statement_error(answer)
            if answer is not None and error is None:
                write.future.set_result(Landed())
            elif (
                error is not None
                and error.code == CCF
                and not (write.needs_single and write.needs_single(error))
            ):
                write.future.set_exception(error)
            else:  # the single write decides: after a passing fault, a failed batch, or as the claim asks
                if error is not None and error.code not in statements.TRANSIENT_CODES | {CCF}:
                    self._logger.warning(
                        "batched write refused, sending it alone", extra={"error": str(error)}
                    )
                retry.append(write)
        loop = asyncio.get_running_loop()  # each sent again in its own writer's context (its span)
        await asyncio.gather(
            *(loop.create_task(self._settle_single(w), context=w.context.copy()) for w in retry)
        )

    async def _settle_single(self, write: _Write) -> None:
        try:
            write.future.set_result(Landed(await self.single(_built(write.single))))
        except Exception as exc:  # handed to the writer, who reads it as its single write's error
            write.future.set_exception(exc)


def _key(write: Write) -> str:
    return repr(sorted(write.key.items()))


def _built(write: Write | Callable[[], Write]) -> Write:
    return write if isinstance(write, Write) else write()
