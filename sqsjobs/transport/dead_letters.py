"""The dead-letter queues of an App, and reading them without loss.

Which DLQs a logical queue has (``sqsjobs.transport.routes``): its standard DLQ, where workers
dead-letter with a reason and where the normal queue and the priority levels' queues (``-high``,
``-low``) redrive; and, for a queue in ``serialized_queues``, the FIFO backstop DLQ of its FIFO
queue (SQS requires a FIFO queue's DLQ to be FIFO), where only SQS's redrive puts messages.

SQS has no peek: to see a message, ``ReceiveMessage`` hides it for a visibility timeout. A scan
hides every message it reads for as long as the scan may take, so it never reads one twice, and
then makes the ones it did not delete visible again (``ChangeMessageVisibilityBatch`` to 0). If
the process dies mid-scan, the messages come back by themselves when their timeout ends; nothing
is lost either way. Two scans at once each see only part of the queue.

Scan end: SQS long polling (``WaitTimeSeconds`` > 0) asks every server, short polling only a
sample. A scan receives with a short long-poll until it has seen as many messages as
``ApproximateNumberOfMessages`` reported at the start, then one short poll to stop.

The operator's flows (``sqsjobs.ops.dlq``, ``sqsjobs.ops.replay``) and the sweeper's reconciler
(``sqsjobs.runtime.reconciler``) read the DLQs through this module.
"""

from __future__ import annotations

import math
import weakref
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sqsjobs import envelope as envelope_format
from sqsjobs._aws import Call, Flow
from sqsjobs.errors import AwsError, EnvelopeError
from sqsjobs.transport import routes, sqs
from sqsjobs.transport.queues import dlq_key

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

    from sqsjobs.transport.queues import QueueUrls

#: Long-poll wait while the scan expects more messages (seconds).
POLL_WAIT_S = 1
#: A scan hides what it read for at least this long, plus a share per queued message.
MIN_HIDE_S = 30
HIDE_PER_MESSAGE_S = 0.05
#: The reason shown for a message SQS's redrive policy moved (it carries no sqsjobs attributes).
REDRIVEN = "moved by the queue's redrive policy (maxReceiveCount)"


@dataclass(frozen=True)
class DlqMessage:
    """One dead-lettered message and what sqsjobs attached to it."""

    #: Logical queue whose DLQ holds it, and that DLQ's URL.
    queue: str
    dlq_url: str
    message_id: str
    receipt_handle: str
    body: str
    #: When it was sent (epoch seconds; SQS keeps a redriven message's first send time) and how
    #: often it was received (emulators carry the source queue's count on into the DLQ).
    sent_at: float
    receive_count: int
    job_id: str | None
    job_type: str | None
    reason: str
    error_class: str
    error_message: str
    source_queue: str
    #: Why the body is not an sqsjobs job envelope ('' when it is one).
    malformed: str = ""
    #: True in a FIFO queue's backstop DLQ (only SQS's redrive puts messages there).
    backstop: bool = False
    #: A schedule fire's: how many times the reconciler already sent it back to its queue.
    fire_redispatches: int = 0

    @property
    def redriven(self) -> bool:
        """True when SQS's redrive policy moved it (no worker attached a reason)."""
        return self.reason == REDRIVEN

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "queue": self.queue,
            "dlq": "fifo backstop" if self.backstop else "standard",
            "message_id": self.message_id,
            "job_id": self.job_id,
            "job_type": self.job_type,
            "reason": self.reason,
            "error_class": self.error_class or None,
            "error_message": self.error_message or None,
            "source_queue": self.source_queue or None,
            "sent_at": datetime.fromtimestamp(self.sent_at, UTC).isoformat(),
            "receive_count": self.receive_count,
            "malformed": self.malformed or None,
            "body": self.body,
        }


def decode(queue: str, dlq_url: str, message: Mapping[str, Any], *, backstop: bool = False) -> DlqMessage:
    """Read a received DLQ message: the envelope from the body, the reason from the attributes."""
    attrs = {k: str(v.get("StringValue", "")) for k, v in message.get("MessageAttributes", {}).items()}
    system = message.get("Attributes", {})
    body = str(message.get("Body", ""))
    job_id = attrs.get(envelope_format.DLQ_JOB_ID) or None
    job_type = attrs.get(envelope_format.DLQ_JOB_TYPE) or None
    malformed = ""
    try:
        parsed = envelope_format.parse(body)
    except EnvelopeError as exc:
        malformed = str(exc)
    else:
        if isinstance(parsed, envelope_format.Fire):
            # A schedule occurrence that never became a job: there is no record to requeue.
            malformed = f"schedule fire of {parsed.schedule!r} at {parsed.at}, not a job"
            job_type = parsed.job_type
        elif isinstance(parsed, envelope_format.Foreign):
            # Sent from outside sqsjobs and refused before it became a job (its reason says why):
            # no record to replay; SQS's own redrive sends the body back once the cause is fixed.
            job_type = parsed.job_type
        else:
            job_id, job_type = parsed.job_id, parsed.job_type
    # No sqsjobs attributes: SQS's redrive policy moved it (its worker kept dying on it, or it
    # kept coming back without finishing).
    reason = attrs.get(envelope_format.DLQ_REASON) or (
        REDRIVEN if not attrs.keys() - {envelope_format.FIRE_REDISPATCHES} else "?"
    )
    try:
        refired = int(attrs.get(envelope_format.FIRE_REDISPATCHES, "0"))
    except ValueError:
        refired = 0
    return DlqMessage(
        queue=queue,
        dlq_url=dlq_url,
        message_id=str(message["MessageId"]),
        receipt_handle=str(message["ReceiptHandle"]),
        body=body,
        sent_at=int(system.get("SentTimestamp", "0")) / 1000.0,
        receive_count=int(system.get("ApproximateReceiveCount", "1")),
        job_id=job_id,
        job_type=job_type,
        reason=reason,
        error_class=attrs.get(envelope_format.DLQ_ERROR_CLASS, ""),
        error_message=attrs.get(envelope_format.DLQ_ERROR_MESSAGE, ""),
        source_queue=attrs.get(envelope_format.DLQ_SOURCE_QUEUE, ""),
        malformed=malformed,
        fire_redispatches=refired,
        backstop=backstop,
    )


@dataclass
class DlqDepth:
    """Messages in one DLQ, as SQS counts them (approximate on AWS)."""

    queue: str
    url: str
    visible: int
    in_flight: int
    #: True for a FIFO queue's backstop DLQ.
    backstop: bool = False


#: FIFO backstop DLQ URLs, per ``QueueUrls`` (so per App), resolved once like the other URLs.
_BACKSTOPS: weakref.WeakKeyDictionary[QueueUrls, dict[str, str]] = weakref.WeakKeyDictionary()


def backstop_url_flow(queue_urls: QueueUrls, queue: str) -> Flow[str]:
    """The URL of ``queue``'s FIFO backstop DLQ (one GetQueueUrl the first time in a process)."""
    known = _BACKSTOPS.setdefault(queue_urls, {})
    if queue not in known:
        name = routes.fifo_dlq_name(queue_urls.settings, queue)
        known[queue] = (yield Call("sqs", "get_queue_url", {"QueueName": name}))["QueueUrl"]
    return known[queue]


def dlqs_flow(queue_urls: QueueUrls, queues: Iterable[str]) -> Flow[list[tuple[str, str, bool]]]:
    """``(logical queue, DLQ url, backstop)`` of every DLQ of ``queues``: each FIFO backstop first.

    The backstop comes first so that what a pass moves out of it into the standard DLQ is seen by
    the same pass.
    """
    queues = list(queues)
    urls = yield from queue_urls.flow(queues)
    out: list[tuple[str, str, bool]] = []
    for queue in queues:
        if queue in queue_urls.settings.serialized_queues:
            out.append((queue, (yield from backstop_url_flow(queue_urls, queue)), True))
        out.append((queue, urls[dlq_key(queue)], False))
    return out


def depth_flow(queue_urls: QueueUrls, queues: list[str]) -> Flow[list[DlqDepth]]:
    """Visible and in-flight counts of every DLQ of ``queues`` (FIFO backstops included)."""
    out = []
    for queue, url, backstop in (yield from dlqs_flow(queue_urls, queues)):
        out.append((yield from one_depth_flow(queue, url, backstop=backstop)))
    return out


def one_depth_flow(queue: str, url: str, *, backstop: bool = False) -> Flow[DlqDepth]:
    """Visible and in-flight counts of one DLQ (one GetQueueAttributes)."""
    attrs = yield Call(
        "sqs",
        "get_queue_attributes",
        {
            "QueueUrl": url,
            "AttributeNames": ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        },
    )
    a = attrs.get("Attributes", {})
    return DlqDepth(
        queue,
        url,
        int(a.get("ApproximateNumberOfMessages", 0)),
        int(a.get("ApproximateNumberOfMessagesNotVisible", 0)),
        backstop,
    )


def hide_for(depth: int, per_message_s: float = HIDE_PER_MESSAGE_S) -> int:
    """Visibility timeout for a scan of ``depth`` messages: long enough not to read one twice."""
    return sqs.clamp_visibility(MIN_HIDE_S + math.ceil(depth * per_message_s))


@dataclass
class Scan:
    """Messages a scan holds (received, neither deleted nor released yet)."""

    held: dict[str, DlqMessage] = field(default_factory=dict)
    #: ``<dlq url>\0<message id>`` of every message read so far, and how many per DLQ.
    seen: set[str] = field(default_factory=set)
    seen_per_url: Counter[str] = field(default_factory=Counter)


def scan_flow(
    depth: DlqDepth,
    scan: Scan,
    *,
    hide_s: int,
    want: Callable[[], int] | None = None,
) -> Flow[list[DlqMessage]]:
    """Receive the next batch of unseen messages from one DLQ (an empty list: the scan is over).

    ``want`` caps the batch (e.g. what is left of a ``--limit``); received messages are held
    in ``scan`` until the caller deletes or releases them.
    """
    while True:
        n = min(sqs.MAX_BATCH, want() if want else sqs.MAX_BATCH)
        if n <= 0:
            return []
        expecting = scan.seen_per_url[depth.url] < depth.visible
        response = yield Call(
            "sqs",
            "receive_message",
            {
                "QueueUrl": depth.url,
                "MaxNumberOfMessages": n,
                "WaitTimeSeconds": POLL_WAIT_S if expecting else 0,
                "VisibilityTimeout": hide_s,
                "MessageSystemAttributeNames": ["ApproximateReceiveCount", "SentTimestamp"],
                "MessageAttributeNames": ["All"],
            },
        )
        messages = [
            decode(depth.queue, depth.url, m, backstop=depth.backstop) for m in response.get("Messages", [])
        ]
        if not messages:
            return []
        fresh = [m for m in messages if f"{depth.url}\0{m.message_id}" not in scan.seen]
        for m in messages:
            scan.held[m.receipt_handle] = m
        if not fresh:
            # Only messages we already read: their hide time ran out, so the scan has gone round.
            return []
        for m in fresh:
            scan.seen.add(f"{depth.url}\0{m.message_id}")
        scan.seen_per_url[depth.url] += len(fresh)
        return fresh


def delete_flow(m: DlqMessage, scan: Scan) -> Flow[bool]:
    """Delete one message; False when SQS no longer honours the receipt (it was redelivered)."""
    scan.held.pop(m.receipt_handle, None)
    try:
        yield Call("sqs", "delete_message", {"QueueUrl": m.dlq_url, "ReceiptHandle": m.receipt_handle})
    except AwsError as exc:
        if exc.code in sqs.INVALID_RECEIPT:
            return False
        raise
    return True


def release_flow(scan: Scan) -> Flow[int]:
    """Make every held message visible again; returns how many SQS accepted."""
    by_url: dict[str, list[DlqMessage]] = {}
    for m in scan.held.values():
        by_url.setdefault(m.dlq_url, []).append(m)
    scan.held.clear()
    released = 0
    for url, messages in by_url.items():
        for batch in sqs.chunks(messages):
            entries = [(str(i), m.receipt_handle, 0) for i, m in enumerate(batch)]
            try:
                response = yield Call(
                    "sqs", "change_message_visibility_batch", sqs.change_visibility_batch(url, entries)
                )
            except AwsError:
                continue  # they come back on their own when the hide time ends
            released += len(batch) - len(sqs.failed_entries(response))
    return released
