"""The SQS event a Lambda invocation receives and the partial batch response it returns.

Kept apart from the adapter (``runtime/lambda_sqs.py``) because both shapes are AWS's contract, not
sqsjobs': a record becomes the ``Delivery`` the execution core reads, and the response is checked
against the batch's own message ids before it leaves (a wrong id would lose or loop messages).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict

from sqsjobs.delivery import Delivery
from sqsjobs.errors import InvalidBatchResponse, InvalidEvent

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence


class BatchItemFailure(TypedDict):
    """One record the ESM must not delete."""

    itemIdentifier: str


class BatchResponse(TypedDict):
    """The partial batch response (``FunctionResponseTypes=["ReportBatchItemFailures"]`` on the ESM)."""

    batchItemFailures: list[BatchItemFailure]


# ── the event ────────────────────────────────────────────────────────────────────────────────
@dataclass(frozen=True)
class SqsRecord:
    """One record of an SQS event, as the ESM delivers it."""

    message_id: str
    receipt_handle: str
    body: str
    #: ``arn:aws:sqs:<region>:<account>:<queue name>``.
    source_arn: str
    attributes: Mapping[str, str] = field(default_factory=dict)
    #: Converted to the SQS API's shape (``{"DataType": ..., "StringValue": ...}``), as a receive returns them.
    message_attributes: Mapping[str, Any] = field(default_factory=dict)

    @property
    def queue_name(self) -> str:
        """The source queue's name (the ARN's last part)."""
        return self.source_arn.rsplit(":", 1)[-1]


def parse_event(event: Mapping[str, Any]) -> list[SqsRecord]:
    """Read an SQS event; ``InvalidEvent`` when a record lacks what a reply or an ack needs."""
    records = event.get("Records") if isinstance(event, dict) else None
    if not isinstance(records, list):
        raise InvalidEvent("not an SQS event: no 'Records' list")
    out = []
    for i, r in enumerate(records):
        if not isinstance(r, dict) or r.get("eventSource", "aws:sqs") != "aws:sqs":
            raise InvalidEvent(f"record {i} is not an SQS record")
        missing = [k for k in ("messageId", "receiptHandle", "eventSourceARN") if not r.get(k)]
        if missing:
            raise InvalidEvent(f"record {i} lacks {', '.join(missing)}")
        out.append(
            SqsRecord(
                message_id=str(r["messageId"]),
                receipt_handle=str(r["receiptHandle"]),
                body=str(r.get("body") or ""),
                source_arn=str(r["eventSourceARN"]),
                attributes=dict(r.get("attributes") or {}),
                message_attributes={
                    name: _api_attribute(value) for name, value in (r.get("messageAttributes") or {}).items()
                },
            )
        )
    return out


def _api_attribute(value: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"DataType": value.get("dataType", "String")}
    if value.get("stringValue") is not None:
        out["StringValue"] = value["stringValue"]
    if value.get("binaryValue") is not None:
        out["BinaryValue"] = value["binaryValue"]
    return out


def to_delivery(record: SqsRecord, *, queue: str, queue_url: str) -> Delivery:
    """The record as the execution core sees any received message."""
    return Delivery(
        queue=queue,
        queue_url=queue_url,
        message_id=record.message_id,
        receipt_handle=record.receipt_handle,
        body=record.body,
        receive_count=int(record.attributes.get("ApproximateReceiveCount", "1")),
        sent_at=int(record.attributes.get("SentTimestamp", "0")) / 1000.0,
        attributes=record.attributes,
        message_attributes=record.message_attributes,
    )


def batch_response(message_ids: Sequence[str], failed: Iterable[str]) -> BatchResponse:
    """The partial batch response for ``failed``, checked against the batch's message ids.

    Raises:
        InvalidBatchResponse: an id is empty or not in the batch (a bug; failing the invocation
            makes the ESM retry the whole batch, which is safe, where a wrong id is not).
    """
    known = set(message_ids)
    seen: list[str] = []
    for item in failed:
        if not isinstance(item, str) or not item:
            raise InvalidBatchResponse(f"empty itemIdentifier {item!r} in a partial batch response")
        if item not in known:
            raise InvalidBatchResponse(f"itemIdentifier {item!r} is not a messageId of this batch")
        if item not in seen:
            seen.append(item)
    return {"batchItemFailures": [{"itemIdentifier": item} for item in seen]}
