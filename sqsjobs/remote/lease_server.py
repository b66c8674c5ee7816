"""The HTTP worker protocol's four operations, over the same kernel a Python worker runs.

``lease`` receives messages of external types and claims each job with the claim stage a Python
worker uses (``runtime/claim_stage.py``: limits, pause, breakers, expiry, serialize keys, the
fenced claim), prepares it as the run stage would (``Runner.prepare``: upcast, S3 payloads, a
chain step's previous result), and hands it out sealed in a ``Lease`` instead of calling a
handler. ``heartbeat`` renews the record's lease (and what its admission holds) and the message's
visibility, as the worker's beat does; ``complete`` and ``fail`` are the record stage's finishes
(``runtime/record_stage.py``), fenced by the claim, followed by the message's ack. Nothing is kept
between requests: the lease carries what the next one needs.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqsjobs import envelope as envelope_format
from sqsjobs._aws import Call, one
from sqsjobs.context import InterruptReason, JobContext
from sqsjobs.delivery import LEAVE, Ack, dead_letter
from sqsjobs.errors import ConfigurationError, HandlerNotFound, JobNotFound, LeaseConflict, RemoteError
from sqsjobs.job import JobStatus, Progress
from sqsjobs.remote.lease import Lease, LeaseSealer
from sqsjobs.runtime import payloads
from sqsjobs.runtime.execution import Execution, apply
from sqsjobs.runtime.kernel import kernel_of
from sqsjobs.runtime.outliving import OutlivingRuns
from sqsjobs.runtime.run_stage import timeout_error
from sqsjobs.store import sealing, waiting
from sqsjobs.transport import routes, sqs
from sqsjobs.transport.queues import dlq_key

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sqsjobs.delivery import Delivery
    from sqsjobs.job import Job
    from sqsjobs.registry import HandlerSpec
    from sqsjobs.runtime.kernel import Kernel, SupportsKernel

#: The longest a lease request waits for jobs (SQS's long poll).
MAX_WAIT_S = 20
#: The most jobs one lease request hands out (one ReceiveMessage per queue).
MAX_JOBS = sqs.MAX_BATCH
#: What an HTTP worker may call itself: it becomes the record's ``lease_owner`` (``http:<id>``).
WORKER_ID = re.compile(r"^[A-Za-z0-9._:@-]{1,100}$")
#: With several queues to watch (priority levels, several types' queues), each long poll is this short.
_SHARED_POLL_S = 2


@dataclass(frozen=True)
class Leased:
    """One job handed to an HTTP worker."""

    lease: str
    job: Job
    payload: Any
    context: dict[str, Any]
    deadline: float
    lease_expires: float


@dataclass(frozen=True)
class Beat:
    """A heartbeat's answer: until when the lease now holds, and whether to stop."""

    lease_expires: float
    visible_until: float
    cancel_requested: bool


@dataclass(frozen=True)
class Ended:
    """What a finish recorded: the job's status now (``retry_scheduled``, ``dead``, ``cancelled``, ``succeeded``)."""

    status: JobStatus
    job: Job


class LeaseServer:
    """Hands external types' jobs to HTTP workers and records how they ended (see the module docstring)."""

    def __init__(self, app: Kernel | SupportsKernel, sealer: LeaseSealer) -> None:
        """``app``: the App (its kernel is read at each request, so ``configure`` reaches it) or a kernel."""
        self._app = app
        self.sealer = sealer

    @property
    def kernel(self) -> Kernel:
        """The App's current kernel."""
        return kernel_of(self._app)

    # ── lease_jobs ───────────────────────────────────────────────────────────────────────────
    def specs(self, types: Sequence[str]) -> list[HandlerSpec]:
        """The external types named; ``ConfigurationError`` for one unknown or with a Python handler."""
        found = []
        for name in types:
            try:
                spec = self.kernel.registry.get(name)
            except HandlerNotFound as exc:
                raise ConfigurationError(str(exc)) from None
            if not spec.external:
                raise ConfigurationError(
                    f"job type {name!r} has a Python handler: Python workers run it, HTTP workers lease external types only"
                )
            found.append(spec)
        return found

    async def lease(
        self, worker_id: str, types: Sequence[str], *, max_jobs: int, wait_s: float
    ) -> list[Leased]:
        """Up to ``max_jobs`` jobs of ``types``, each claimed for ``worker_id``; waits up to ``wait_s`` for the first."""
        kernel = self.kernel
        specs = self.specs(types)
        wanted = {s.name for s in specs}
        keys = sorted({r for s in specs for r in routes.routes_of(kernel.settings, s.queue)}, key=routes.rank)
        logical = sorted({s.queue for s in specs})
        urls = await kernel.arun(kernel.queue_urls.flow([*keys, *logical]))
        execution = Execution(kernel, worker_owner(worker_id), finish_linger_s=0.0)
        ops = sqs.MessageOps(kernel.arun, linger_s=0.0, logger=kernel.logger)
        deadline = kernel.clock.now() + min(wait_s, MAX_WAIT_S)
        leased: list[Leased] = []
        try:
            while not leased:
                remaining = deadline - kernel.clock.now()
                for n, key in enumerate(keys):
                    last = n == len(keys) - 1
                    wait = (
                        0
                        if not last
                        else max(
                            0, min(math.ceil(remaining), _SHARED_POLL_S if len(keys) > 1 else MAX_WAIT_S)
                        )
                    )
                    response = await kernel.arun(
                        one(
                            Call(
                                "sqs",
                                "receive_message",
                                sqs.receive(urls[key], max_messages=max_jobs, wait_s=wait),
                            )
                        )
                    )
                    for delivery in sqs.deliveries(key, urls[key], response):
                        got = await self._take(execution, ops, delivery, wanted, urls)
                        if got is not None:
                            leased.append(got)
                    if leased:
                        break
                if kernel.clock.now() >= deadline:
                    break
        finally:
            await ops.drain()
        return leased

    async def _take(
        self,
        execution: Execution,
        ops: sqs.MessageOps,
        delivery: Delivery,
        wanted: set[str],
        urls: dict[str, str],
    ) -> Leased | None:
        """Claim and prepare the job ``delivery`` brings; None when it is not to be handed out (acked instead)."""
        kernel = self.kernel
        dlq_url = urls[dlq_key(routes.split(delivery.queue)[0])]
        envelope = await execution.parse(delivery)
        if isinstance(envelope, Ack):
            await apply(envelope, delivery, dlq_url, ops)
            return None
        spec = kernel.registry.get(envelope.job_type) if envelope.job_type in kernel.registry else None
        if spec is not None and not spec.external:
            reason = f"job type {spec.name!r} has a Python handler but came to {delivery.queue!r}, a queue of external types"
            await apply(
                dead_letter(reason, job_id=envelope.job_id, job_type=spec.name, queue=delivery.queue),
                delivery,
                dlq_url,
                ops,
            )
            return None
        if spec is not None and spec.name not in wanted:  # another fleet's type on a shared queue
            await apply(Ack("rearm", delay_s=1), delivery, dlq_url, ops)  # not this request's again at once
            return None
        claimed = await execution.claim(envelope, delivery)
        if isinstance(claimed, Ack):
            await apply(claimed, delivery, dlq_url, ops)
            return None
        spec, job = claimed
        prepared = await execution.runner.prepare(spec, job, delivery)
        if isinstance(prepared, Ack):
            await apply(prepared, delivery, dlq_url, ops)
            return None
        payload, fields = prepared
        now = kernel.clock.now()
        deadline = now + spec.timeout_s
        lease = Lease(
            job.id,
            job.type,
            execution.worker_id,
            job.lease_epoch,
            delivery,
            started_at=now,
            deadline=deadline,
        )
        expires = job.lease_expires.timestamp() if job.lease_expires else now + kernel.settings.lease_s
        return Leased(
            lease=self.sealer.seal(lease),
            job=job,
            payload=spec.dump(payload),
            context={k: v for k, v in fields.items() if k == "previous_result"},
            deadline=deadline,
            lease_expires=expires,
        )

    # ── heartbeat_lease, complete_lease, fail_lease ──────────────────────────────────────────
    async def heartbeat(self, sealed: str, progress: Progress | None = None) -> Beat:
        """Renew the lease and the message's visibility; ``LeaseConflict`` once the lease no longer holds.

        ``progress``: the worker's report (as ``ctx.progress``), written now by the renewal.
        """
        kernel = self.kernel
        lease, job, execution = await self._held(sealed)
        if kernel.clock.now() > lease.deadline:
            await self._timed_out(lease, job, execution)
        ctx = self._context(lease, job, execution)
        if progress is not None:
            ctx.progress(fraction=progress.fraction, message=progress.message, data=progress.data)
        await execution.runner.renew_leases([ctx], reported=True)
        if ctx.interrupt_reason is InterruptReason.LEASE_LOST:
            raise LeaseConflict(
                "the lease was lost: the job was claimed again or ended", await self._record(lease.job_id)
            )
        ops = sqs.MessageOps(kernel.arun, linger_s=0.0, logger=kernel.logger)
        visibility = kernel.settings.visibility_timeout_s
        gone = await ops.extend([lease.delivery], visibility)
        outliving = OutlivingRuns(kernel)
        await outliving.keep([ctx])
        if gone:  # deleted, purged or dropped: the record keeps the job's witness, as for a Python run
            await outliving.lost([ctx])
        expires = ctx.job.lease_expires.timestamp() if ctx.job.lease_expires else kernel.clock.now()
        return Beat(
            lease_expires=expires,
            visible_until=kernel.clock.now() + visibility,
            cancel_requested=ctx.job.cancel_requested,
        )

    async def complete(self, sealed: str, result: Any) -> Ended:
        """The run succeeded with ``result``: the fenced finish, then the message's delete."""
        kernel = self.kernel
        lease, job, execution = await self._held(sealed)
        if kernel.clock.now() > lease.deadline:
            await self._timed_out(lease, job, execution)
        spec = kernel.registry.get(job.type) if job.type in kernel.registry else None
        encrypt = sealing.key_of(spec, kernel.settings)
        stored = await payloads.store_result(kernel.arun, kernel.settings, job, result, encrypt=encrypt)
        duration = round(kernel.clock.now() - lease.started_at, 4)
        ack = await execution.recorder.succeeded(job, stored.value, stored.ref, duration)
        return await self._acked(lease, ack, job, JobStatus.SUCCEEDED)

    async def fail(
        self,
        sealed: str,
        error: RemoteError,
        *,
        cancelled: bool = False,
    ) -> Ended:
        """The run failed with ``error``: retried or dead as the type's policy says; cancelled if asked to stop."""
        lease, job, execution = await self._held(sealed)
        spec = self.kernel.registry.get(lease.job_type)
        if cancelled or job.cancel_requested:
            ack = await execution.recorder.abort(job, "cancelled while running")
            return await self._acked(lease, ack, job, JobStatus.CANCELLED)
        ack = await execution.recorder.failed(spec, job, error, lease.delivery)
        return await self._acked(lease, ack, job, _failed_status(ack))

    # ── shared ───────────────────────────────────────────────────────────────────────────────
    async def _held(self, sealed: str) -> tuple[Lease, Job, Execution]:
        """The lease, its job's record as this lease's claim, and an execution writing as its owner.

        ``LeaseConflict`` when the record is no longer running under this claim. The record's claim
        token comes from the record itself: the write is fenced on it, so a claim made between
        this read and the write is refused.
        """
        lease = self.sealer.open(sealed)
        job = await self._record(lease.job_id)
        if (
            job is None
            or job.status is not JobStatus.RUNNING
            or job.lease_owner != lease.owner
            or job.lease_epoch != lease.epoch
        ):
            raise LeaseConflict("the lease no longer holds its job: it ended, or was claimed again", job)
        return lease, _with_payload(job, lease), Execution(self.kernel, lease.owner, finish_linger_s=0.0)

    async def _record(self, job_id: str) -> Job | None:
        try:
            return await self.kernel.arun(
                waiting.read_job_flow(self.kernel.settings, job_id, load_result=False)
            )
        except JobNotFound:
            return None

    def _context(self, lease: Lease, job: Job, execution: Execution) -> JobContext:
        return JobContext(
            job=job,
            worker_id=execution.worker_id,
            deadline=lease.deadline,
            logger=self.kernel.logger,
            delivery=lease.delivery,
        )

    async def _timed_out(self, lease: Lease, job: Job, execution: Execution) -> None:
        """Past its deadline: the run is recorded as a timeout (retried by the type's policy), and the lease ends."""
        spec = self.kernel.registry.get(lease.job_type)
        ack = await execution.recorder.failed(spec, job, timeout_error(spec), lease.delivery)
        ended = await self._acked(lease, ack, job, _failed_status(ack))
        raise LeaseConflict(
            f"the run passed its {spec.timeout_s:g} s timeout", ended.job.evolve(status=ended.status)
        )

    async def _acked(self, lease: Lease, ack: Ack, job: Job, status: JobStatus) -> Ended:
        """Apply the finish's ``ack`` to the lease's message: the job is now ``status``.

        ``LeaseConflict`` (with the record as it is now: one read, on this path only) when the
        finish did not land.
        """
        kernel = self.kernel
        if ack is LEAVE:
            raise LeaseConflict(
                "the finish was refused: the lease no longer holds its job", await self._record(lease.job_id)
            )
        logical = routes.split(lease.delivery.queue)[0]
        urls = await kernel.arun(kernel.queue_urls.flow([logical]))
        ops = sqs.MessageOps(kernel.arun, linger_s=0.0, logger=kernel.logger)
        try:
            await apply(ack, lease.delivery, urls[dlq_key(logical)], ops)
        finally:
            await ops.drain()
        return Ended(status, job)


def _failed_status(ack: Ack) -> JobStatus:
    """What a recorded failure left the job: dead (its message dead-lettered) or waiting for its retry."""
    return JobStatus.DEAD if ack.kind == "dead_letter" else JobStatus.RETRY_SCHEDULED


def worker_owner(worker_id: str) -> str:
    """The ``lease_owner`` an HTTP worker's claims write; ``ConfigurationError`` for an id it may not use."""
    if not WORKER_ID.match(worker_id):
        raise ConfigurationError(
            f"worker id {worker_id[:40]!r}: 1 to 100 letters, digits and ._:@- (it is written into the job's record)"
        )
    return f"http:{worker_id}"


def _with_payload(job: Job, lease: Lease) -> Job:
    """``job`` as its claim took it: with the payload its message carries (the record keeps only a hash).

    A heartbeat that finds the message gone writes the run's witness from this job: a record read
    alone would give it no payload, and the job the sweeper brings back could not run.
    """
    message = envelope_format.parse(lease.delivery.body)
    if isinstance(message, envelope_format.Envelope) and message.has_payload:
        return job.evolve(payload=message.payload)
    return job
