"""The kernel's seams: the few small interfaces through which a feature plugs into the runtime.

The runtime (claim → run → record → ack) imports no feature. A feature (limits, batches, chains,
schedule fires, foreign messages, ...) lives in its own folder, implements the seams it needs, and
is one line of the ordered list the App owns (``App._plugins``); the kernel consults the plug-ins in
that order::

    a delivery ──▶ MessageKind?  (an envelope type a feature owns: the feature handles it whole)
               ──▶ AdmissionGuard.admit   (before the claim: defer, or admit at an instant)
               ──▶ claim                  (the core's: refused past the job's deadline, then expired)
               ──▶ RunPreparation.prepare   (fields of the handler's JobContext)
               ──▶ run ──▶ FinishHook.entries + finish write ──▶ FinishHook.landed
                      (raised one of a feature's ``outcomes``) ──▶ RunOutcome.record
    the lease renewal ──▶ AdmissionGuard.renew;  a refused claim ──▶ AdmissionGuard.give_back
    each beat ──▶ RunWatch.look   (running jobs looked at; its notes ride on their next renewal)
    the sweeper's expire ──▶ FinishHook.entries + expire write ──▶ FinishHook.landed
    each sweep ──▶ SweepPass.sweep   (a feature's own repairs)

A feature that needs none of a seam leaves it None. A feature says, as data, which jobs are its
own (``Plugin.fields``, ``Plugin.types``): the kernel calls its seams for those jobs only, so a
plain job's path runs no feature's code. The chains feature is the model: it touched six modules,
through ``FinishHook`` alone.
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
    from sqsjobs.store.write import Entry


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
    """Writes that follow a job's finish, a worker's or the sweeper's (see ``sqsjobs.runtime.record_stage``)."""

    async def entries(self, finish: Finish) -> Sequence[Entry]:
        """Typed writes (``Write``, ``Put``...) to commit with the finish, in its transaction; empty: none."""
        ...

    async def landed(self, finish: Finish) -> None:
        """Called once the finish (and its entries) committed; logs its own failures, never raises."""
        ...


class MessageKind(Protocol):
    """A message that is not a job's own envelope (a schedule fire, a foreign message): handled whole."""

    async def handle(self, message: Any, delivery: Delivery) -> Ack:
        """Do what the message asks (typically: enqueue a job once), then say what the message is worth."""
        ...


class SweepPass(Protocol):
    """A feature's own pass in each sweep (the batches' repair of a completion check a crash cut short)."""

    async def sweep(self, now: float) -> list[str]:
        """Repair what is due at ``now``; the ids of what it completed (the sweep's report lists them)."""
        ...


class RunOutcome(Protocol):
    """A run's end a feature records itself: the handler raised one of the feature's ``Plugin.outcomes``."""

    async def record(self, job: Job, exc: BaseException, delivery: Delivery | None, recorder: Any) -> Ack:
        """Write the end through ``recorder`` (``runtime/record_stage.py``), then say what the message is worth."""
        ...


class RunWatch(Protocol):
    """A look at the running jobs at every beat of the worker's heartbeat (the slow-run watch).

    What it notes on a job is written by that job's next lease renewal, in the renewal's own
    ``UpdateItem``: a note costs no write of its own, as a progress report does not.
    """

    async def look(self, running: Sequence[Job], now: float) -> None:
        """Look at these running jobs (its own, by ``Plugin.fields``/``types``) at ``now``."""
        ...

    def notes(self, job: Job) -> Mapping[str, Any]:
        """What to write on ``job``'s record at its next renewal: attribute → JSON value, each kept once."""
        ...

    def written(self, job: Job) -> None:
        """A renewal wrote ``notes(job)``."""
        ...


class RunPreparation(Protocol):
    """Something a run needs before its handler starts (a chain step's previous result, batch streaming)."""

    async def prepare(self, job: Job) -> Mapping[str, Any]:
        """``JobContext`` fields for this run; raising fails the attempt (the type's retry policy)."""
        ...


@dataclass(frozen=True)
class Plugin:
    """One feature as the kernel sees it: which seams it fills, and which jobs are its own.

    ``fields`` and ``types`` are data the kernel reads (``Kernel.concerned``): a job is the feature's
    when its type is in ``types`` or one of its ``fields`` (an attribute of ``Job`` and ``Envelope``)
    is set. A feature that declares neither (both None) is every job's. A message without the job's fields (a
    version 1 hint) cannot say: it is every field-declaring feature's.
    """

    #: The feature's name, for logs and tests.
    name: str
    guard: AdmissionGuard | None = None
    finish: FinishHook | None = None
    prepare: RunPreparation | None = None
    sweep: SweepPass | None = None
    watch: RunWatch | None = None
    #: Exception classes a handler raises to end its run in a way this feature records (a durable sleep).
    outcomes: Mapping[type[BaseException], RunOutcome] = field(default_factory=dict)
    #: Envelope classes (``sqsjobs.envelope.Fire``...) this feature handles, and how.
    kinds: Mapping[type, MessageKind] = field(default_factory=dict)
    #: The job fields whose value makes a job this feature's (``batch``, ``chain``...).
    fields: tuple[str, ...] | None = None
    #: The job types that are this feature's whatever their fields (empty: none).
    types: frozenset[str] | None = None
    #: ``JobContext`` fields every run gets, fixed when the kernel is built (``ctx.batches``).
    context: Mapping[str, Any] = field(default_factory=dict)
