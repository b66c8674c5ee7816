"""SQS: sans-I/O requests, with the AWS limits as named constants, and the worker's batched message operations.

Every receive asks for at most the worker's free slots (never a prefetch that sits invisible), and
send/delete/visibility changes go in batches of up to ten.

``MessageOps`` sends the worker's deletes and visibility changes ten to a request: a finished job's
message is deleted a few milliseconds later together with its neighbours (``Settings.ack_linger_s``);
nothing is lost if the process dies first, because the record is already terminal and the
redelivered message is deleted by the claim it fails.

A message stays its worker's until its operation has landed (or definitively failed): ``settled``
tells the worker then, so its heartbeat keeps extending a message whose delete waits in a batch or
in a slow request, and the message never comes back to a second worker meanwhile. The heartbeat
never extends a message whose visibility change (a re-arm, a release) is queued or in flight, and
a visibility change waits for the extension in flight that covers its message: an extension can
never land after a re-arm or release and override it (bbc/sqs-consumer#848). A delete needs no such
order: an extension that lands after it finds no message. Nothing else is serialised, so a hung
delete holds up neither the heartbeat nor a release.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import uuid
from typing import TYPE_CHECKING, Any, TypeVar

from sqsjobs._aws import Call, one
from sqsjobs.config import MAX_MESSAGE_BYTES
from sqsjobs.delivery import Delivery
from sqsjobs.errors import AwsError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence

    from sqsjobs._aws import AsyncRunner

T = TypeVar("T")

#: https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/quotas-messages.html
MAX_BATCH = 10
#: A send batch's bodies together, at most: SendMessageBatch takes 1 MiB of messages in all (as one
#: message may hold), less headroom for the attributes.
#: https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SendMessageBatch.html
MAX_BATCH_BYTES = MAX_MESSAGE_BYTES - 8 * 1024
#: Per-message DelaySeconds cap.
MAX_DELAY_S = 900
#: Visibility timeout cap (12 h), counted from the receive.
MAX_VISIBILITY_S = 43_200

#: Every queue sqsjobs makes takes SQS's largest message: set, not left to the default, because a queue
#: made before 2025 kept 256 KiB and ``SetQueueAttributes`` (provision's update) raises it.
MESSAGE_SIZE = {"MaximumMessageSize": str(MAX_MESSAGE_BYTES)}

INVALID_RECEIPT = ("ReceiptHandleIsInvalid", "InvalidParameterValue", "MessageNotInflight")


def chunks(items: Sequence[Any], size: int = MAX_BATCH) -> Iterable[Sequence[Any]]:
    """Split into SQS-sized batches."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


def sized_chunks(items: Sequence[T], sizes: Sequence[int]) -> Iterable[Sequence[T]]:
    """Split into send batches: at most ten entries and ``MAX_BATCH_BYTES`` of bodies each.

    SQS refuses a whole batch whose messages add up to more than a message may hold; a message
    alone over it goes alone (and SQS says whether the queue takes it).
    """
    start, total = 0, 0
    for end, size in enumerate(sizes):
        if end > start and (end - start == MAX_BATCH or total + size > MAX_BATCH_BYTES):
            yield items[start:end]
            start, total = end, 0
        total += size
    if start < len(items):
        yield items[start:]


def clamp_delay(seconds: float) -> int:
    """DelaySeconds for a wait of ``seconds``: rounded up, within 0..900."""
    return max(0, min(MAX_DELAY_S, math.ceil(seconds)))


def clamp_visibility(seconds: float) -> int:
    """VisibilityTimeout for a wait of ``seconds``: rounded up, within 0..12 h."""
    return max(0, min(MAX_VISIBILITY_S, math.ceil(seconds)))


def send_batch(queue_url: str, entries: Sequence[tuple[str, str, int]]) -> dict[str, Any]:
    """SendMessageBatch of (entry id, body, delay seconds)."""
    if not 1 <= len(entries) <= MAX_BATCH:
        raise ValueError(f"a send batch holds 1..{MAX_BATCH} entries, got {len(entries)}")
    return {
        "QueueUrl": queue_url,
        "Entries": [
            {"Id": entry_id, "MessageBody": body, **({"DelaySeconds": delay} if delay else {})}
            for entry_id, body, delay in entries
        ],
    }


def send_one(
    queue_url: str, body: str, *, delay_s: int = 0, attributes: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """SendMessage, with string message attributes (used for dead-lettering with a reason)."""
    params: dict[str, Any] = {"QueueUrl": queue_url, "MessageBody": body}
    if delay_s:
        params["DelaySeconds"] = delay_s
    if attributes:
        params["MessageAttributes"] = {
            k: {"DataType": "String", "StringValue": v[:1024] or "-"} for k, v in attributes.items()
        }
    return params


def fresh_copy(delivery: Delivery, *, delay_s: int = 0) -> dict[str, Any]:
    """SendMessage of a new copy of ``delivery`` (receive count 1), to replace it before SQS redrives it.

    The copy keeps the body, the string message attributes (trace context) and the message group. A
    FIFO queue takes no per-message delay and would drop a copy whose deduplication id it saw within
    five minutes: the copy gets a fresh one and no delay (it goes to the back of its group).
    """
    params = send_one(delivery.queue_url, delivery.body)
    kept = {
        k: {"DataType": "String", "StringValue": v["StringValue"]}
        for k, v in delivery.message_attributes.items()
        if v.get("DataType") == "String" and "StringValue" in v
    }
    if kept:
        params["MessageAttributes"] = kept
    if group := delivery.attributes.get("MessageGroupId"):
        params["MessageGroupId"] = group
    if delivery.queue_url.endswith(".fifo"):
        params["MessageDeduplicationId"] = uuid.uuid4().hex
    elif delay_s:
        params["DelaySeconds"] = clamp_delay(delay_s)
    return params


def receive(queue_url: str, *, max_messages: int, wait_s: int) -> dict[str, Any]:
    """ReceiveMessage for at most ``max_messages`` (the free slots), long-polling ``wait_s``."""
    if not 1 <= max_messages <= MAX_BATCH:
        raise ValueError(f"receive takes 1..{MAX_BATCH} messages, got {max_messages}")
    return {
        "QueueUrl": queue_url,
        "MaxNumberOfMessages": max_messages,
        "WaitTimeSeconds": wait_s,
        "MessageSystemAttributeNames": ["ApproximateReceiveCount", "SentTimestamp", "AWSTraceHeader"],
        "MessageAttributeNames": ["All"],
    }


def deliveries(queue: str, queue_url: str, response: Mapping[str, Any]) -> list[Delivery]:
    """Decode a ReceiveMessage response."""
    out = []
    for m in response.get("Messages", []):
        attrs = m.get("Attributes", {})
        out.append(
            Delivery(
                queue=queue,
                queue_url=queue_url,
                message_id=m["MessageId"],
                receipt_handle=m["ReceiptHandle"],
                body=m.get("Body", ""),
                receive_count=int(attrs.get("ApproximateReceiveCount", "1")),
                sent_at=int(attrs.get("SentTimestamp", "0")) / 1000.0,
                attributes=attrs,
                message_attributes=m.get("MessageAttributes", {}),
            )
        )
    return out


def delete_batch(queue_url: str, receipts: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """DeleteMessageBatch of (entry id, receipt handle)."""
    return {"QueueUrl": queue_url, "Entries": [{"Id": i, "ReceiptHandle": r} for i, r in receipts]}


def change_visibility_batch(queue_url: str, entries: Sequence[tuple[str, str, int]]) -> dict[str, Any]:
    """ChangeMessageVisibilityBatch of (entry id, receipt handle, timeout seconds)."""
    return {
        "QueueUrl": queue_url,
        "Entries": [{"Id": i, "ReceiptHandle": r, "VisibilityTimeout": t} for i, r, t in entries],
    }


def failed_entries(response: Mapping[str, Any]) -> dict[str, str]:
    """Entry id → error code for the entries of a batch call that failed."""
    return {f["Id"]: f.get("Code", "Unknown") for f in response.get("Failed", [])}


def queue_attributes(
    *, visibility_timeout_s: int, dlq_arn: str | None, max_receive_count: int
) -> dict[str, str]:
    """CreateQueue attributes: the visibility timeout, 1 MiB messages and the redrive backstop to the DLQ."""
    import json

    attrs = {"VisibilityTimeout": str(visibility_timeout_s)} | MESSAGE_SIZE
    if dlq_arn:
        attrs["RedrivePolicy"] = json.dumps(
            {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": str(max_receive_count)}
        )
    return attrs


class MessageOps:
    """Batches deletes and visibility changes per queue; sends dead letters with their reason."""

    def __init__(
        self,
        arun: AsyncRunner,
        *,
        linger_s: float,
        logger: Any,
        settled: Callable[[Delivery], None] | None = None,
    ) -> None:
        """Send through ``arun``; hold each operation up to ``linger_s`` to fill a batch.

        ``settled``: called with each message whose operation has landed or definitively failed (the
        worker stops extending it then).
        """
        self._arun = arun
        self._linger_s = linger_s
        self._logger = logger
        self._settled = settled
        #: (queue_url, visibility or None for delete) -> pending deliveries.
        self._pending: dict[tuple[str, int | None], list[Delivery]] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._flushes: set[asyncio.Task[None]] = set()
        #: Receipt handles with an operation queued or in flight (a dead letter's or re-send's copy too).
        self._owned: set[str] = set()
        #: Receipt handles with a visibility change queued or in flight: the heartbeat leaves them be.
        self._changing: set[str] = set()
        #: Extensions in flight: their receipt handles, and an event set once they landed.
        self._extending: list[tuple[frozenset[str], asyncio.Event]] = []

    def holds(self, delivery: Delivery) -> bool:
        """True while an operation on ``delivery`` is queued or in flight (``settled`` comes later)."""
        return delivery.receipt_handle in self._owned

    def delete(self, delivery: Delivery) -> None:
        """Delete soon (batched)."""
        self._add(delivery, None)

    def set_visibility(self, delivery: Delivery, seconds: int) -> None:
        """Hide for ``seconds`` from now (0 = visible now), batched."""
        self._add(delivery, seconds)

    def _add(self, delivery: Delivery, visibility: int | None) -> None:
        self._owned.add(delivery.receipt_handle)
        if visibility is not None:
            self._changing.add(delivery.receipt_handle)
        key = (delivery.queue_url, visibility)
        batch = self._pending.setdefault(key, [])
        batch.append(delivery)
        if len(batch) >= MAX_BATCH:
            self._spawn_flush()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self._linger_s, self._spawn_flush)

    def _settle(self, delivery: Delivery) -> None:
        self._owned.discard(delivery.receipt_handle)
        self._changing.discard(delivery.receipt_handle)
        if self._settled is not None:
            self._settled(delivery)

    def _spawn_flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        task = asyncio.ensure_future(self.flush())
        self._flushes.add(task)
        task.add_done_callback(self._flushes.discard)

    async def flush(self) -> None:
        """Send everything pending now, each batch in a request of its own, side by side."""
        pending, self._pending = self._pending, {}
        if pending:
            await asyncio.gather(
                *(
                    self._send_batch(queue_url, visibility, batch)
                    for (queue_url, visibility), deliveries in pending.items()
                    for batch in chunks(deliveries)
                )
            )

    async def drain(self) -> None:
        """Flush and wait for every flush in progress (shutdown)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        await self.flush()
        if self._flushes:
            await asyncio.gather(*self._flushes, return_exceptions=True)

    async def _after_extensions(self, receipts: set[str]) -> None:
        """Wait until no extension in flight covers one of ``receipts`` (a new one leaves them out)."""
        for covered, landed in list(self._extending):
            if covered & receipts:
                await landed.wait()

    async def _send_batch(self, queue_url: str, visibility: int | None, batch: Sequence[Delivery]) -> None:
        try:
            await self._send(queue_url, visibility, batch)
        finally:
            for delivery in batch:
                self._settle(delivery)

    async def _send(self, queue_url: str, visibility: int | None, batch: Sequence[Delivery]) -> None:
        if visibility is None:
            call = Call(
                "sqs",
                "delete_message_batch",
                delete_batch(queue_url, [(str(i), d.receipt_handle) for i, d in enumerate(batch)]),
            )
        else:
            await self._after_extensions({d.receipt_handle for d in batch})
            entries = [(str(i), d.receipt_handle, visibility) for i, d in enumerate(batch)]
            call = Call("sqs", "change_message_visibility_batch", change_visibility_batch(queue_url, entries))
        try:
            failed = failed_entries(await self._arun(one(call)))
        except AwsError as exc:
            self._logger.warning(
                "message batch failed; the messages will be redelivered",
                extra={"operation": call.operation, "error": str(exc)},
            )
            return
        for entry_id, code in failed.items():
            # An invalid receipt means the message is gone or was redelivered to someone else: fine,
            # the record decides what happens to the job.
            level = self._logger.debug if code in INVALID_RECEIPT else self._logger.warning
            level(
                "message operation refused",
                extra={
                    "operation": call.operation,
                    "message_id": batch[int(entry_id)].message_id,
                    "code": code,
                },
            )

    async def _copy(self, delivery: Delivery, params: dict[str, Any]) -> AwsError | None:
        """SendMessage ``params`` while ``delivery`` stays owned; the error if it failed (then settled)."""
        self._owned.add(delivery.receipt_handle)
        failed: AwsError | None = None
        try:
            await self._arun(one(Call("sqs", "send_message", params)))
        except AwsError as exc:
            failed = exc
        except BaseException:
            self._settle(delivery)
            raise
        return failed

    async def dead_letter(self, delivery: Delivery, dlq_url: str, attributes: dict[str, str]) -> None:
        """Copy to the DLQ with the reason attached, then delete the original; keep it if the copy fails."""
        failed = await self._copy(delivery, send_one(dlq_url, delivery.body, attributes=attributes))
        if failed is None:
            self.delete(delivery)
            return
        self._logger.error(
            "dead-letter send failed; the message will be redelivered",
            extra={"message_id": delivery.message_id, "error": str(failed)},
        )
        self._settle(delivery)

    async def resend(self, delivery: Delivery, delay_s: int) -> None:
        """A fresh copy replaces the message (its receive count starts again); re-armed if the send fails."""
        failed = await self._copy(delivery, fresh_copy(delivery, delay_s=delay_s))
        if failed is None:
            self.delete(delivery)
            return
        self._logger.warning(
            "re-send failed; the message is re-armed instead",
            extra={"message_id": delivery.message_id, "error": str(failed)},
        )
        self.set_visibility(delivery, clamp_visibility(delay_s))

    async def extend(self, deliveries: list[Delivery], seconds: int) -> set[str]:
        """Heartbeat: extend the held messages; returns receipt handles SQS no longer honours.

        A message whose visibility change is queued or in flight is left out: that change is its
        witness, and an extension landing after it would override it.
        """
        lost: set[str] = set()
        by_queue: dict[str, list[Delivery]] = {}
        for d in deliveries:
            by_queue.setdefault(d.queue_url, []).append(d)
        for queue_url, held in by_queue.items():
            for chunk in chunks(held):
                # Filtered at its own turn: a re-arm may have been decided while the last batch flew.
                batch = [d for d in chunk if d.receipt_handle not in self._changing]
                if not batch:
                    continue
                flying = (frozenset(d.receipt_handle for d in batch), asyncio.Event())
                self._extending.append(flying)
                entries = [(str(i), d.receipt_handle, seconds) for i, d in enumerate(batch)]
                try:
                    with contextlib.suppress(AwsError):
                        response = await self._arun(
                            one(
                                Call(
                                    "sqs",
                                    "change_message_visibility_batch",
                                    change_visibility_batch(queue_url, entries),
                                )
                            )
                        )
                        lost.update(
                            batch[int(i)].receipt_handle
                            for i, code in failed_entries(response).items()
                            if code in INVALID_RECEIPT
                        )
                finally:
                    self._extending.remove(flying)
                    flying[1].set()
        return lost
