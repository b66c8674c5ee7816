"""The worker's message operations, batched: deletes and visibility changes go ten to a request.

A finished job's message is deleted a few milliseconds later together with its neighbours
(``Settings.ack_linger_s``); nothing is lost if the process dies first, because the record is
already terminal and the redelivered message is deleted by the claim it fails.

Heartbeats and acks never overlap: both take ``self.lock``, so a message is never re-hidden by a
heartbeat that raced its delete or release (bbc/sqs-consumer#848).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

from sqsjobs._aws import Call, one
from sqsjobs.errors import AwsError
from sqsjobs.transport import sqs

if TYPE_CHECKING:
    from sqsjobs._aws import AsyncRunner
    from sqsjobs.delivery import Delivery


class MessageOps:
    """Batches deletes and visibility changes per queue; sends dead letters with their reason."""

    def __init__(self, arun: AsyncRunner, *, linger_s: float, logger: Any) -> None:
        """Send through ``arun``; hold each operation up to ``linger_s`` to fill a batch."""
        self._arun = arun
        self._linger_s = linger_s
        self._logger = logger
        self.lock = asyncio.Lock()
        #: (queue_url, visibility or None for delete) -> pending deliveries.
        self._pending: dict[tuple[str, int | None], list[Delivery]] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._flushes: set[asyncio.Task[None]] = set()

    def delete(self, delivery: Delivery) -> None:
        """Delete soon (batched)."""
        self._add(delivery, None)

    def set_visibility(self, delivery: Delivery, seconds: int) -> None:
        """Hide for ``seconds`` from now (0 = visible now), batched."""
        self._add(delivery, seconds)

    def _add(self, delivery: Delivery, visibility: int | None) -> None:
        key = (delivery.queue_url, visibility)
        batch = self._pending.setdefault(key, [])
        batch.append(delivery)
        if len(batch) >= sqs.MAX_BATCH:
            self._spawn_flush()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self._linger_s, self._spawn_flush)

    def _spawn_flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        task = asyncio.ensure_future(self.flush())
        self._flushes.add(task)
        task.add_done_callback(self._flushes.discard)

    async def flush(self) -> None:
        """Send everything pending now."""
        pending, self._pending = self._pending, {}
        if not pending:
            return
        async with self.lock:
            for (queue_url, visibility), deliveries in pending.items():
                for batch in sqs.chunks(deliveries):
                    await self._send_batch(queue_url, visibility, batch)

    async def drain(self) -> None:
        """Flush and wait for every flush in progress (shutdown)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        await self.flush()
        if self._flushes:
            await asyncio.gather(*self._flushes, return_exceptions=True)

    async def _send_batch(self, queue_url: str, visibility: int | None, batch: Any) -> None:
        if visibility is None:
            call = Call(
                "sqs",
                "delete_message_batch",
                sqs.delete_batch(queue_url, [(str(i), d.receipt_handle) for i, d in enumerate(batch)]),
            )
        else:
            entries = [(str(i), d.receipt_handle, visibility) for i, d in enumerate(batch)]
            call = Call(
                "sqs", "change_message_visibility_batch", sqs.change_visibility_batch(queue_url, entries)
            )
        try:
            failed = sqs.failed_entries(await self._arun(one(call)))
        except AwsError as exc:
            self._logger.warning(
                "message batch failed; the messages will be redelivered",
                extra={"operation": call.operation, "error": str(exc)},
            )
            return
        for entry_id, code in failed.items():
            # An invalid receipt means the message is gone or was redelivered to someone else: fine,
            # the record decides what happens to the job.
            level = self._logger.debug if code in sqs.INVALID_RECEIPT else self._logger.warning
            level(
                "message operation refused",
                extra={
                    "operation": call.operation,
                    "message_id": batch[int(entry_id)].message_id,
                    "code": code,
                },
            )

    async def dead_letter(self, delivery: Delivery, dlq_url: str, attributes: dict[str, str]) -> None:
        """Copy to the DLQ with the reason attached, then delete the original; keep it if the copy fails."""
        try:
            await self._arun(
                one(Call("sqs", "send_message", sqs.send_one(dlq_url, delivery.body, attributes=attributes)))
            )
        except AwsError as exc:
            self._logger.error(
                "dead-letter send failed; the message will be redelivered",
                extra={"message_id": delivery.message_id, "error": str(exc)},
            )
            return
        self.delete(delivery)

    async def resend(self, delivery: Delivery, delay_s: int) -> None:
        """A fresh copy replaces the message (its receive count starts again); re-armed if the send fails."""
        try:
            await self._arun(one(Call("sqs", "send_message", sqs.fresh_copy(delivery, delay_s=delay_s))))
        except AwsError as exc:
            self._logger.warning(
                "re-send failed; the message is re-armed instead",
                extra={"message_id": delivery.message_id, "error": str(exc)},
            )
            self.set_visibility(delivery, sqs.clamp_visibility(delay_s))
            return
        self.delete(delivery)

    async def extend(self, deliveries: list[Delivery], seconds: int) -> set[str]:
        """Heartbeat: extend every held message; returns receipt handles SQS no longer honours."""
        lost: set[str] = set()
        by_queue: dict[str, list[Delivery]] = {}
        for d in deliveries:
            by_queue.setdefault(d.queue_url, []).append(d)
        async with self.lock:
            for queue_url, held in by_queue.items():
                for batch in sqs.chunks(held):
                    entries = [(str(i), d.receipt_handle, seconds) for i, d in enumerate(batch)]
                    with contextlib.suppress(AwsError):
                        response = await self._arun(
                            one(
                                Call(
                                    "sqs",
                                    "change_message_visibility_batch",
                                    sqs.change_visibility_batch(queue_url, entries),
                                )
                            )
                        )
                        lost.update(
                            batch[int(i)].receipt_handle
                            for i, code in sqs.failed_entries(response).items()
                            if code in sqs.INVALID_RECEIPT
                        )
        return lost
