"""A message's lifespan: how long a message can still wait, and what a wait it cannot cover becomes.

SQS deletes a message ``message_retention_s`` after its *first* send, whatever happened to it
since: a delay (``DelaySeconds``) and every re-arm (a visibility change) count against it. A job
whose only witness is its message (docs/lifecycle.md, "Witnesses") is lost if that message is
told to wait past its own expiry. This module holds the one rule every wait follows:

- a **new message** (an enqueue, a sweeper's hint) waits at most ``delay_cap_s``: the 15-minute
  delay cap, or less when the queue keeps messages shorter than that; a longer wait is held in
  the record (a ``held`` attention entry) and the sweeper sends the message when due;
- a **re-arm** of a received message (not due yet, a lease to wait for, a newer payload version,
  a pause, a limit or a breaker) that would pass the message's expiry becomes a fresh copy
  (``keep_witness``): its retention starts again, so a job that only waits keeps its witness for
  the price of one send per retention span (14 days by default), and pays nothing otherwise.
  A retry's re-arm is held in the record instead (``runtime/record_stage.py``), as a retry past
  the 12-hour visibility cap is: there the receive count must keep meaning attempts.

A margin of one visibility timeout is kept, so a message that comes back just before its expiry
still has time to be received and claimed.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from sqsjobs.delivery import Ack
from sqsjobs.transport.sqs import MAX_DELAY_S

if TYPE_CHECKING:
    from sqsjobs.config import Settings
    from sqsjobs.delivery import Delivery


def reach_s(settings: Settings) -> float:
    """How long a message just sent can wait (delayed or hidden) and still be received before SQS drops it."""
    return float(settings.message_retention_s - settings.visibility_timeout_s)


def delay_cap_s(settings: Settings) -> float:
    """The longest ``DelaySeconds`` a new message is sent with; a job due later is held in its record."""
    return float(min(MAX_DELAY_S, reach_s(settings)))


def outlives(settings: Settings, sent_at: float, wake_at: float) -> bool:
    """True when a message first sent at ``sent_at`` would be gone (less the margin) by ``wake_at``."""
    return bool(sent_at) and wake_at > sent_at + reach_s(settings)


def fresh_copy_instead(ack: Ack, settings: Settings) -> Ack:
    """A fresh copy instead of the re-arm ``ack``, delayed by its wait as far as SQS and the retention allow.

    For a message too old to wait (``keep_witness``), or one SQS no longer has (deleted by hand,
    purged: ``DeliveryHost.messages_gone``), whose re-arm would change the visibility of nothing.
    """
    return Ack("resend", delay_s=max(0, min(ack.delay_s, math.floor(delay_cap_s(settings)))))


def keep_witness(ack: Ack, delivery: Delivery, now: float, settings: Settings) -> Ack:
    """``ack``, unless it re-arms ``delivery`` past its expiry: then a re-arm it can live through, or a fresh copy.

    A message that can still wait at least half of what a new one could is re-armed as long as it
    lives (it comes back before its expiry and is judged again); an older one is replaced by a
    fresh copy, delayed by the wait (up to what SQS and the retention allow: a FIFO copy goes
    at once to the back of its group, and re-arms itself when it comes back).
    """
    if ack.kind != "rearm" or not outlives(settings, delivery.sent_at, now + ack.delay_s):
        return ack
    left = delivery.sent_at + reach_s(settings) - now
    if left >= reach_s(settings) / 2:
        return Ack("rearm", delay_s=max(1, math.floor(left)))
    return fresh_copy_instead(ack, settings)
