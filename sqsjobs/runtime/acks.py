"""Applying an ``Ack``: the one place that turns a decided ack into what happens to the message.

The execution decides (``sqsjobs.delivery.Ack``: delete, re-arm, release, dead-letter, leave) after
the job's record is written; ``apply`` acts on it through the host's target. The ECS worker's
target is its ``MessageOps`` (batched deletes and visibility changes, the DLQ send then the
delete); the Lambda adapter's is its reply (``runtime/lambda_sqs.py``: a delete is a success the
event source mapping deletes, a re-arm a visibility change reported as a failure). Deciding and
applying stay apart, so each can be read and tested alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from sqsjobs.delivery import Ack, Delivery


class AckTarget(Protocol):
    """What a host does with a message; ``leave`` needs nothing (the message comes back by itself)."""

    def delete(self, delivery: Delivery) -> None:
        """The message is done with."""
        ...

    def set_visibility(self, delivery: Delivery, seconds: int) -> None:
        """Hide the message for ``seconds`` (0: visible again now)."""
        ...

    async def dead_letter(self, delivery: Delivery, dlq_url: str, attributes: dict[str, str]) -> None:
        """Copy the message to the DLQ with ``attributes``, then let it go."""
        ...

    async def resend(self, delivery: Delivery, delay_s: int) -> None:
        """Send a fresh copy of the message, then let this one go (re-arm it if the send fails)."""
        ...


async def apply(ack: Ack, delivery: Delivery, dlq_url: str, target: AckTarget) -> None:
    """Act on ``delivery`` as ``ack`` says, once its record was written."""
    if ack.kind == "delete":
        target.delete(delivery)
    elif ack.kind == "rearm":
        target.set_visibility(delivery, ack.delay_s)
    elif ack.kind == "release":
        target.set_visibility(delivery, 0)
    elif ack.kind == "dead_letter":
        await target.dead_letter(delivery, dlq_url, ack.attributes)
    elif ack.kind == "resend":
        await target.resend(delivery, ack.delay_s)
