"""Sans-I/O SQS requests, with the AWS limits as named constants.

Every receive asks for at most the worker's free slots (never a prefetch that sits invisible), and
send/delete/visibility changes go in batches of up to ten.
"""

from __future__ import annotations

import math
import uuid
from typing import TYPE_CHECKING, Any, TypeVar

from sqsjobs.delivery import Delivery

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

T = TypeVar("T")

#: https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/quotas-messages.html
MAX_BATCH = 10
#: A send batch's bodies together, at most (the default message size; headroom for attributes).
MAX_BATCH_BYTES = 256 * 1024 - 8 * 1024
#: Per-message DelaySeconds cap.
MAX_DELAY_S = 900
#: Visibility timeout cap (12 h), counted from the receive.
MAX_VISIBILITY_S = 43_200

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
    """CreateQueue attributes: the visibility timeout and the redrive backstop to the DLQ."""
    import json

    attrs = {"VisibilityTimeout": str(visibility_timeout_s)}
    if dlq_arn:
        attrs["RedrivePolicy"] = json.dumps(
            {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": str(max_receive_count)}
        )
    return attrs
