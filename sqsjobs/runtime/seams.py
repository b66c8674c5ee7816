"""The kernel's seams: the few small interfaces through which a feature plugs into the runtime.

The runtime (claim → run → record → ack) imports no feature. A feature (limits, batches, chains,
schedule fires, foreign messages, ...) lives in its own folder, implements the seams it needs, and
is one line of the ordered list the App owns (``App._plugins``); the kernel consults the plug-ins in
that order::

    a delivery ──▶ MessageKind?  (an envelope type a feature owns: the feature handles it whole)
               ──▶ AdmissionGuard.admit   (before the claim: defer, or admit at an instant)
               ──▶ claim ──▶ RunPreparation.prepare   (fields of the handler's JobContext)
               ──▶ run ──▶ FinishHook.entries + finish write ──▶ FinishHook.landed
    the lease renewal ──▶ AdmissionGuard.renew;  a refused claim ──▶ AdmissionGuard.give_back

A feature that needs none of a seam leaves it None. The chains feature is the model: it touched
six modules, through ``FinishHook`` alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from sqsjobs.delivery import Ack, Delivery, Finish
    from sqsjobs.envelope import Envelope
    from sqsjobs.job import Job
    from sqsjobs.registry import HandlerSpec


class Admitted(Protocol):
    """What an admission hands the claim: the instant it admitted the job at."""

    #: Epoch seconds; the claim records it as the job's ``started_at`` (a rate limit logged it).
    at: float


class AdmissionGuard(Protocol):
    """Decides, before the claim, whether a job may start now (pause, limits, breakers)."""

    async def admit(self, spec: HandlerSpec, envelope: Envelope, delivery: Delivery) -> Admitted | Ack | None:
        """None: not this guard's concern; ``Admitted``: claim now; an ``Ack``: deferred, no claim."""
        ...

    async def give_back(self, job_id: str) -> None:
        """The claim after the admission did not take the job: free what the admission took."""
        ...

    async def renew(self, job_ids: Iterable[str], now: float) -> None:
        """These running jobs' leases were just renewed: renew what their admission holds."""
        ...


class FinishHook(Protocol):
    """Writes that follow a job's finish (see ``sqsjobs.runtime.hooks``)."""

    async def entries(self, finish: Finish) -> Sequence[Mapping[str, Any]]:
        """``TransactWriteItems`` entries (``{"Update": {...}}``...) to commit with the finish; empty: none."""
        ...

    async def landed(self, finish: Finish) -> None:
        """Called once the finish (and its entries) committed; logs its own failures, never raises."""
        ...


class MessageKind(Protocol):
    """A message that is not a job's own envelope (a schedule fire, a foreign message): handled whole."""

    async def handle(self, message: Any, delivery: Delivery) -> Ack:
        """Do what the message asks (typically: enqueue a job once), then say what the message is worth."""
        ...


class RunPreparation(Protocol):
    """Something a run needs before its handler starts (a chain step's previous result, batch streaming)."""

    async def prepare(self, job: Job) -> Mapping[str, Any]:
        """``JobContext`` fields for this run; raising fails the attempt (the type's retry policy)."""
        ...


@dataclass(frozen=True)
class Plugin:
    """One feature as the kernel sees it: which seams it fills."""

    #: The feature's name, for logs and tests.
    name: str
    guard: AdmissionGuard | None = None
    finish: FinishHook | None = None
    prepare: RunPreparation | None = None
    #: Envelope classes (``sqsjobs.envelope.Fire``...) this feature handles, and how.
    kinds: Mapping[type, MessageKind] = field(default_factory=dict)
