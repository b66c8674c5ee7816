"""Handle one delivery: claim → run → record → ack. Shared by the ECS worker and the Lambda adapter.

Delivery is at least once: SQS may hand the same message out twice, late, or after the job is
finished. None of that matters here, because ownership comes only from the conditional claim in
DynamoDB. The path is a pipeline of three stages over the frozen ``Kernel``, each in its module:

    parse ──▶ a message kind of a plug-in?  (a schedule fire, a foreign message: handled whole)
          ──▶ claim  (``runtime/claim_stage.py``: claim guards, admission, the claim, refusal → Ack)
          ──▶ run    (``runtime/run_stage.py``: payload, preparations, invoke, timeout, interrupt)
          ──▶ record (``runtime/record_stage.py``: the finish write + the finish hooks → Ack)

The record is always written before the message is touched: ``Execution.handle`` returns an
``Ack`` saying what to do with the message, and its host (``runtime/host.py``) applies it.
Features take part through the kernel's seams (``runtime/seams.py``), never by name, and only for
the jobs they declare as theirs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqsjobs import envelope as env
from sqsjobs.delivery import Ack, dead_letter, failure_record
from sqsjobs.errors import EnvelopeError, HandlerNotFound
from sqsjobs.runtime.claim_stage import Claimer
from sqsjobs.runtime.kernel import kernel_of
from sqsjobs.runtime.record_stage import Recorder
from sqsjobs.runtime.run_stage import Runner
from sqsjobs.runtime.transitions import Transitions
from sqsjobs.store.job_store import JobStore

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence
    from concurrent.futures import ThreadPoolExecutor

    from sqsjobs.context import JobContext
    from sqsjobs.delivery import Delivery
    from sqsjobs.runtime.kernel import Kernel, SupportsKernel
    from sqsjobs.runtime.seams import FinishHook


class Execution:
    """Runs deliveries for one worker (``worker_id`` is the lease owner it writes)."""

    def __init__(
        self,
        app: Kernel | SupportsKernel,
        worker_id: str,
        *,
        pool: ThreadPoolExecutor | None = None,
        on_run: Callable[[JobContext], None] | None = None,
        on_done: Callable[[JobContext], None] | None = None,
        default_timeout_s: Callable[[], float] | None = None,
        hooks: Sequence[FinishHook] | None = None,
    ) -> None:
        """``default_timeout_s``: see ``Runner``; ``hooks``: every finish's hooks instead of the kernel's."""
        #: The kernel (an App given here is asked for its own).
        self.app = kernel = kernel_of(app)
        self.worker_id = worker_id
        #: Claims and finishes go through it: what is ready at one instant leaves in one request.
        self.transitions = Transitions(kernel.arun, batch=kernel.settings.batch_writes, logger=kernel.logger)
        #: The state table's operations, applied through ``transitions``.
        self.store = JobStore(self.transitions, kernel.settings.table_name, worker_id)
        self.recorder = Recorder(kernel, worker_id, self.store, hooks)
        self.claimer = Claimer(kernel, self.recorder)
        self.runner = Runner(
            kernel,
            self.recorder,
            pool=pool,
            on_run=on_run,
            on_done=on_done,
            default_timeout_s=default_timeout_s,
        )

    async def handle(self, delivery: Delivery) -> Ack:
        """Decide and record the fate of one delivery; never raises for bad input."""
        kernel = self.app
        try:
            envelope = env.parse(delivery.body)
        except EnvelopeError as exc:
            kernel.logger.warning("message rejected", extra={"queue": delivery.queue, "reason": str(exc)})
            return dead_letter(f"malformed message: {exc}", error=failure_record(exc), queue=delivery.queue)
        if not isinstance(envelope, env.Envelope):  # a schedule fire, a foreign message: a plug-in's kind
            kind = kernel.kinds.get(type(envelope))
            if kind is None:
                reason = f"no plug-in handles {type(envelope).__name__} messages"
                kernel.logger.warning("message rejected", extra={"queue": delivery.queue, "reason": reason})
                return dead_letter(reason, queue=delivery.queue)
            return await kind.handle(envelope, delivery)
        try:
            spec = kernel.registry.get(envelope.job_type)
        except HandlerNotFound as exc:
            reason = f"unknown job type {envelope.job_type!r}"
            return await self.recorder.reject(envelope, delivery, exc, reason=reason)
        claimed = await self.claimer.claim(spec, envelope, delivery)
        if isinstance(claimed, Ack):
            return claimed
        return await self.runner.run(spec, claimed, delivery)

    async def renew_leases(self, running: Iterable[JobContext]) -> None:
        """Renew the lease of every job past half of it (and what its admission holds)."""
        await self.runner.renew_leases(running)
