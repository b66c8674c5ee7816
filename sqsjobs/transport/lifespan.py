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

A wait must not pass the queue's **redrive limit** either: every receive counts toward it, and SQS
moves a message to the DLQ past it whatever the record says. The limit is sized for attempts (a
retry's re-arm keeps counting them), so a job that waits without using one — deferred by a limit, a
pause or a breaker, asleep in ``ctx.sleep`` — has its message re-armed while its receive count is
low, and replaced by a fresh copy (receive count 1) once it gets close (``waiting``). On a FIFO
queue a fresh copy goes to the back of its key's group, so the ECS worker holds such a wait in
place instead (``Ack.waits``, ``runtime/levels.py``): no receive, no copy, the key's order kept.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from sqsjobs.delivery import Ack
from sqsjobs.transport.sqs import MAX_DELAY_S, MAX_VISIBILITY_S, clamp_visibility

if TYPE_CHECKING:
    from sqsjobs.config import Settings
    from sqsjobs.delivery import Delivery

#: A waiting job's message is re-sent (a fresh copy, the old deleted) once its receive count gets
#: this close to the queue's redrive limit: a wait must never push a job into the DLQ.
RESEND_MARGIN = 3


def redrive_limit(settings: Settings, largest_max_attempts: int) -> int:
    """The receives after which SQS moves a message to its DLQ (what ``sqsjobs provision`` sets)."""
    return settings.max_receive_count or largest_max_attempts + settings.receive_slack


def waiting(delivery: Delivery, delay_s: float, redrive: int) -> Ack:
    """The ack of a job that waits ``delay_s`` without using an attempt (deferred, or asleep).

    Its message is re-armed, unless its receive count is within ``RESEND_MARGIN`` of ``redrive``
    (``redrive_limit``): then a fresh copy replaces it, delayed by the wait where the queue allows
    (a copy that comes back early is re-armed by its claim's refusal, ``not yet due``). A fresh
    copy is re-armed at least once: a FIFO copy takes no delay and comes back at once, so re-sending
    it again would spin while the job waits. Either is marked ``waits``: an ECS worker holds a
    serialize key's head in place instead (``runtime/levels.py``), spending no receive at all.
    """
    hide = clamp_visibility(delay_s)
    if delivery.receive_count < max(2, redrive - RESEND_MARGIN):
        return Ack("rearm", delay_s=hide, waits=True)
    return Ack("resend", delay_s=hide, waits=True)


def in_key(delivery: Delivery | None) -> bool:
    """True for a message of a FIFO queue: a serialize key's, whose place in its group a wait must keep.

    Such a wait past the 12-hour visibility cap keeps its message (re-armed to the cap, then held
    again when it comes back early: one receive per 12 hours) instead of being held in the record,
    whose message would be deleted and let the key's later jobs run first.
    """
    return delivery is not None and delivery.queue_url.endswith(".fifo")


def in_place(
    ack: Ack, *, now: float, received: float, visibility_timeout_s: int, stopping: bool
) -> Ack | None:
    """What a serialize key's head does with ``ack`` in an ECS worker: None to wait in place, else the ack to apply.

    A job that only waits (``ack.waits``) keeps its message in flight (``runtime/levels.py``)
    while its wait ends before SQS's cap on one receive's time in flight (``MAX_VISIBILITY_S``
    after ``received``, less two visibility timeouts for the heartbeat's last extension). Past
    it, or when the worker stops, the message is made visible at once, still its group's head (one
    receive); a fresh copy chosen near the redrive limit stays one (the job is kept, its place not).
    """
    if not ack.waits:
        return ack
    if stopping or now + ack.delay_s > received + MAX_VISIBILITY_S - 2 * visibility_timeout_s:
        return Ack("release") if ack.kind == "rearm" else ack
    return None


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
        return Ack("rearm", delay_s=max(1, math.floor(left)), waits=ack.waits)
    return fresh_copy_instead(ack, settings)
