"""The signals feature as the kernel sees it: ``ctx.signals``, ``cancel_on`` claims, the ``sqsjobs.signal`` type.

``ctx.signals`` is every run's context field; the claims of the types that declare a ``cancel_on``
register them; the built-in ``sqsjobs.signal`` job type sends a signal from a foreign message.

**cancel_on, at the claim.** A job of a type with a ``cancel_on`` registers itself on the signal
item of its key values when it is claimed (``CancelRegistration``, a ``RunPreparation``: one
``UpdateItem`` per claim, before the handler). That write returns the item: a matching signal sent
since the job was enqueued (``last_at`` at or after its ``created_at``) cancels it there, before its
handler starts; a signal sent later finds it registered and cancels it, queued (between attempts,
asleep, waiting) or running. Why at the claim and not at the enqueue: the producer has no seam for
a feature (every enqueue path — ``Producer``, ``Transaction``, the outbox, a batch's items — would
have to learn it), while the claim is the kernel's and a run preparation is this feature's for its
own types only. A plain job runs no code of this folder (``Plugin.types``).

**From an AWS service.** An EventBridge rule, an SNS topic or any sender puts the foreign message
``{"sqsjobs": 1, "type": "sqsjobs.signal", "payload": {"name": ..., "data": ...}}`` on a queue
(docs/enqueue-from-aws.md): it becomes a job of this built-in type, whose handler sends the signal.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqsjobs.errors import Cancel
from sqsjobs.registry import HandlerSpec
from sqsjobs.retry import RetryPolicy
from sqsjobs.runtime import payloads
from sqsjobs.runtime.seams import Plugin
from sqsjobs.signals import records
from sqsjobs.signals.namespace import send_flow
from sqsjobs.signals.waits import SignalBook
from sqsjobs.store.apply import Landed, apply

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from sqsjobs.context import JobContext
    from sqsjobs.job import Job
    from sqsjobs.runtime.kernel import Kernel
    from sqsjobs.signals.namespace import Signals

#: The built-in job type a foreign message sends a signal with: ``{"name": ..., "data": ...}``.
SIGNAL_TYPE = "sqsjobs.signal"
SIGNAL_ATTEMPTS = 10


def signals_plugin(kernel: Kernel, declared: Signals) -> Plugin:
    """Signals: ``ctx.signals`` for every run; the claims of ``cancel_on`` types only."""
    types = declared.cancelled_types
    return Plugin(
        "signals",
        fields=(),
        types=types,
        prepare=CancelRegistration(kernel, declared) if types else None,
        context={"_signals": SignalBook(kernel, declared)},
    )


class CancelRegistration:
    """A claimed job of a ``cancel_on`` type registers on its signal items; one signalled since its enqueue cancels it."""

    def __init__(self, kernel: Kernel, declared: Signals) -> None:
        self.kernel = kernel
        self.declared = declared

    async def prepare(self, job: Job) -> Mapping[str, Any]:
        """Register ``job``; raise ``Cancel`` when a matching signal came after it was enqueued."""
        cancels = self.declared.cancels(job.type)
        if not cancels:
            return {}
        k = self.kernel
        payload = await payloads.load(k.arun, k.settings.table_name, job)
        now = k.clock.now()
        for declared in cancels:
            values = declared.values(payload)
            if values is None:
                continue
            key = records.values_key(declared.signal, values)
            write = records.cancel_on(k.settings.table_name, key, job.id, name=declared.signal, now=now)
            landed = await k.arun(apply(write))
            last = records.last_at(landed.attributes or {}) if isinstance(landed, Landed) else None
            if last is not None and last >= job.created_at.timestamp():
                raise Cancel(f"cancelled by signal {records.described(declared.signal, values)}")
        return {}


def signal_spec(kernel: Callable[[], Kernel]) -> HandlerSpec:
    """The ``sqsjobs.signal`` job type: a foreign message's signal, sent with the App's declarations."""

    async def send(payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
        k = kernel()
        book: SignalBook = k.context["_signals"]
        spec = book.declared.spec(str(payload.get("name") or ""))
        sent = await k.arun(send_flow(k, spec, payload.get("data"), k.clock.now()))
        return {"key": sent.key, "answered": len(sent.answered), "cancelled": len(sent.cancelled)}

    return HandlerSpec(
        name=SIGNAL_TYPE,
        fn=send,
        max_attempts=SIGNAL_ATTEMPTS,
        retry=RetryPolicy(base_s=1.0),
        payload_type=dict[str, Any],
    )
